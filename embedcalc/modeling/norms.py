"""Norms and where they sit around a sublayer: pre, post, sandwich (the residual wiring of one sublayer).

A norm is LayerNorm (weight, and a bias unless ``norm_bias`` is false) or RMSNorm (weight only), of any width,
with no parameters at all when ``norm_affine`` is false (OLMo 1's parameter-free LayerNorm). Placements
(docs/layers.md, "Norms"): ``pre`` x + f(norm(x)) (GPT-2, LLaMA; Xiong et al. 2020); ``post`` norm(x + f(x))
(Vaswani et al. 2017, BERT); ``sandwich`` x + after(f(before(x))) (Gemma 2/3: pre_* and post_* layernorms).
``parallel`` blocks (GPT-J, GPT-NeoX) are wired by the block itself, which owns both branches.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from embedcalc.config.resolved import ResolvedShape

_RMS_EPS = 1e-6
_LAYER_NORM_EPS = 1e-5


def make_norm(config: ResolvedShape, width: int | None = None) -> nn.Module:
    """A norm of the config's kind over ``width`` channels (default embed_dim)."""
    width = config.embed_dim if width is None else width
    affine = config.norm_affine
    if config.norm == "rmsnorm":
        return nn.RMSNorm(width, eps=_RMS_EPS, elementwise_affine=affine)
    return nn.LayerNorm(
        width, eps=_LAYER_NORM_EPS, elementwise_affine=affine, bias=config.norm_bias and affine
    )


class SandwichNorm(nn.Module):
    """The two norms of a sandwich sublayer (Gemma 2): ``before`` its input and ``after`` its output."""

    def __init__(self, config: ResolvedShape) -> None:
        super().__init__()
        self.before = make_norm(config)
        self.after = make_norm(config)

    def forward(self, x: Tensor) -> Tensor:
        """The input norm, so that a parallel or pre-norm caller can treat a sandwich like one norm."""
        out: Tensor = self.before(x)
        return out


class TanhGate(nn.Module):
    """A learned scalar g that scales a sublayer's output by tanh(g) before the residual add (Flamingo, Alayrac et
    al. 2022 §2.2; Mllama's ``cross_attn_attn_gate`` / ``cross_attn_mlp_gate``): one parameter, no matmul."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(1))

    def forward(self, x: Tensor) -> Tensor:
        return self.weight.tanh() * x  # (B, T, d)


def gated(transform: Callable[[Tensor], Tensor], gate: TanhGate | None) -> Callable[[Tensor], Tensor]:
    """``transform`` with its output scaled by ``gate`` (unchanged without one)."""
    if gate is None:
        return transform
    return lambda h: gate(transform(h))


def sublayer_norm(config: ResolvedShape) -> nn.Module:
    """The norm(s) one sublayer owns under the config's placement (a :class:`SandwichNorm` for sandwich)."""
    return SandwichNorm(config) if config.resolved_norm_placement == "sandwich" else make_norm(config)


def residual(x: Tensor, norm: nn.Module, transform: Callable[[Tensor], Tensor], placement: str) -> Tensor:
    """One sublayer with its residual connection: pre, post or sandwich; (B, T, d) in and out."""
    if placement == "post":
        out: Tensor = norm(x + transform(x))
        return out
    if isinstance(norm, SandwichNorm):
        sandwiched: Tensor = norm.after(transform(norm.before(x)))
        return x + sandwiched
    normed: Tensor = norm(x)
    return x + transform(normed)
