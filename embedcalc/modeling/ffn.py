"""The dense feed-forward network (Vaswani et al. 2017, §3.3) and its activations, plain and gated.

``in_`` is the analytic ``ffn/in`` component: one embed_dim -> ffn_dim Linear, or for gated activations (swiglu,
geglu; Shazeer 2020) a :class:`GatedInput` holding the ``gate`` and ``up`` projections as transformers lays them out
(LLaMA's gate_proj/up_proj, T5 v1.1's wi_0/wi_1); ``out`` projects back. ``in_`` carries PEP 8's trailing
underscore; its breakdown key is ``ffn/in``. A learned activation (xIELU) is the module ``act`` (``ffn/act``). The
same network is a MoE's shared experts (``moe/shared``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

GATED = frozenset({"swiglu", "geglu"})


def activate(name: str, x: Tensor) -> Tensor:
    """The FFN activation of a plain (not gated) FFN."""
    if name == "relu":
        return F.relu(x)
    if name == "gelu":
        return F.gelu(x)
    if name == "gelu_tanh":
        return F.gelu(x, approximate="tanh")
    if name == "silu":
        return F.silu(x)
    raise ValueError(f"unknown activation {name!r}")


def activate_gated(name: str, gate: Tensor, up: Tensor) -> Tensor:
    """A gated activation (Shazeer 2020): act(gate) * up, SiLU for swiglu, GELU for geglu."""
    if name == "swiglu":
        return F.silu(gate) * up
    if name == "geglu":
        return F.gelu(gate) * up
    raise ValueError(f"unknown gated activation {name!r}")


class XIELU(nn.Module):
    """xIELU (Huang et al. 2024, arXiv 2411.13010, eq. 4), the activation of Apertus: x > 0 -> a_p x^2 + beta x,
    else (expm1(min(x, eps)) - x) a_n + beta x, with a_p = softplus(alpha_p) and a_n = beta + softplus(alpha_n).
    ``alpha_p`` and ``alpha_n`` are learned scalars (initialised so that a_p = a_n = 0.8); beta = 0.5 and eps =
    -1e-6 are fixed (transformers' XIELUActivation keeps them as buffers). Its breakdown key is ``ffn/act``."""

    beta, eps = 0.5, -1e-6

    def __init__(self, alpha_init: float = 0.8) -> None:
        super().__init__()
        self.alpha_p = nn.Parameter(torch.tensor([math.log(math.expm1(alpha_init))]))
        self.alpha_n = nn.Parameter(torch.tensor([math.log(math.expm1(alpha_init - self.beta))]))

    def forward(self, x: Tensor) -> Tensor:
        a_p = F.softplus(self.alpha_p)
        a_n = self.beta + F.softplus(self.alpha_n)
        negative = (torch.expm1(torch.clamp(x, max=self.eps)) - x) * a_n + self.beta * x
        return torch.where(x > 0, a_p * x * x + self.beta * x, negative)


class GatedInput(nn.Module):
    """The ``gate`` and ``up`` projections of a gated FFN."""

    def __init__(self, embed_dim: int, ffn_dim: int, bias: bool) -> None:
        super().__init__()
        self.gate = nn.Linear(embed_dim, ffn_dim, bias=bias)
        self.up = nn.Linear(embed_dim, ffn_dim, bias=bias)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        return self.gate(x), self.up(x)  # (B, T, f) each


class MLP(nn.Module):
    """``in_`` -> activation -> ``out``: embed_dim -> ffn_dim -> embed_dim, biases when ``bias`` (``out``'s own when
    ``out_bias`` says otherwise: GTE)."""

    def __init__(
        self, embed_dim: int, ffn_dim: int, bias: bool, activation: str, out_bias: bool | None = None
    ) -> None:
        super().__init__()
        self.activation = activation
        self.in_: nn.Module = (
            GatedInput(embed_dim, ffn_dim, bias)
            if activation in GATED
            else nn.Linear(embed_dim, ffn_dim, bias=bias)
        )
        self.out = nn.Linear(ffn_dim, embed_dim, bias=bias if out_bias is None else out_bias)
        self.act = XIELU() if activation == "xielu" else None

    def transform(self, x: Tensor) -> Tensor:
        """(..., d) -> (..., d), without norm or residual."""
        if isinstance(self.in_, GatedInput):
            gate, up = self.in_(x)  # (..., f) each
            hidden = activate_gated(self.activation, gate, up)  # (..., f)
        elif self.act is not None:
            hidden = self.act(self.in_(x))  # (..., f)
        else:
            hidden = activate(self.activation, self.in_(x))  # (..., f)
        out: Tensor = self.out(hidden)  # (..., d)
        return out

    def forward(self, x: Tensor) -> Tensor:
        return self.transform(x)
