"""Load-time fusion of projections for benchmarking: one GEMM for Q, K and V, and one for a gated FFN's gate and up.

:func:`fuse_projections` replaces, in place, each self-attention :class:`~embedcalc.modeling.attention_parts.QKV` trio
by :class:`FusedQKV` (one Linear of width q_dim + 2 kv_dim whose output is split) and each
:class:`~embedcalc.modeling.ffn.GatedInput` by :class:`FusedGatedInput` (one Linear of width 2 ffn_dim). The
values are the concatenated weights (and biases), so outputs are unchanged up to floating-point summation order;
one larger GEMM reads the input once and runs closer to the matmul peak than three (or two) narrow ones.

Only ``bench`` (and the benchmarks) fuse. ``verify`` and ``diff`` never do: they need the per-tensor names and
shapes that transformers uses (``q``, ``k``, ``v``, ``gate``, ``up``) to match parameters and FLOPs per breakdown
key. Cross-attention keeps its trio (queries and keys come from different streams).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from embedcalc.modeling.attention import Attention
from embedcalc.modeling.attention_parts import QKV
from embedcalc.modeling.ffn import GatedInput


def _concat(linears: list[nn.Linear]) -> nn.Linear:
    """One Linear whose output is the outputs of ``linears`` side by side (weights and biases concatenated)."""
    first = linears[0]
    width = sum(lin.out_features for lin in linears)
    fused = nn.Linear(first.in_features, width, bias=first.bias is not None,
                      device=first.weight.device, dtype=first.weight.dtype)  # fmt: skip
    with torch.no_grad():
        fused.weight.copy_(torch.cat([lin.weight for lin in linears], dim=0))  # (sum out, in)
        if fused.bias is not None:
            fused.bias.copy_(torch.cat([lin.bias for lin in linears if lin.bias is not None]))
    return fused


class FusedQKV(nn.Module):
    """Q, K and V of self-attention from one GEMM: ``fused`` (embed_dim -> q_dim + 2 kv_dim), split."""

    def __init__(self, qkv: QKV) -> None:
        super().__init__()
        if qkv.k is None or qkv.v is None:
            raise ValueError("only a layer with its own K and V projections fuses them")
        self.widths = [qkv.q.out_features, qkv.k.out_features, qkv.v.out_features]
        self.fused = _concat([qkv.q, qkv.k, qkv.v])

    def forward(self, x: Tensor, memory: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        if memory is not None:
            raise ValueError("a fused QKV projects one stream (self-attention only)")
        q, k, v = torch.split(self.fused(x), self.widths, dim=-1)  # (B, T, q_dim), (B, T, kv_dim) x2
        return q, k, v


class FusedGatedInput(GatedInput):
    """A gated FFN's gate and up from one GEMM: ``fused`` (embed_dim -> 2 ffn_dim), split."""

    def __init__(self, gated: GatedInput) -> None:
        nn.Module.__init__(self)  # not GatedInput's: its two Linears are what this replaces
        self.width = gated.gate.out_features
        self.fused = _concat([gated.gate, gated.up])

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        gate, up = torch.split(self.fused(x), [self.width, self.width], dim=-1)  # (B, T, f) each
        return gate, up


def fuse_projections(model: nn.Module) -> int:
    """Fuse every self-attention QKV and every gated FFN input of ``model`` in place; returns how many."""
    count = 0
    for module in list(model.modules()):
        if (
            isinstance(module, Attention) and not module.cross and isinstance(module.qkv, QKV)
            and module.qkv.k is not None and module.qkv.v is not None  # values from keys, shared K/V: as built
        ):  # fmt: skip
            module.qkv = FusedQKV(module.qkv)  # type: ignore[assignment]
            count += 1
        for name, child in list(module.named_children()):
            if type(child) is GatedInput:
                setattr(module, name, FusedGatedInput(child))
                count += 1
    return count
