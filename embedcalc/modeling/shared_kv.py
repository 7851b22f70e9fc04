"""Layers that reuse an earlier layer's keys and values (Gemma 3n and Gemma 4 ``num_kv_shared_layers``;
transformers' ``Gemma4TextAttention`` with ``kv_sharing_mode == "reuse"``): they project and normalise their own
queries, attend to the keys and values the source layer attended with, and project out; they have no key/value
projections, no key norm and no KV cache of their own (transformers gives them a ``DummyLayer`` cache).

The source of a sharing layer is the nearest earlier layer, not sharing itself, with the same window, chunk and head
shape (transformers: the last layer of the same ``layer_types`` entry before the shared ones). The source keeps
what it attended with (:meth:`Attention._keep`) only when a layer links to it, so no other model holds more.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from embedcalc.config.layer_plan import Attention as ResolvedAttention
from embedcalc.config.resolved import ResolvedShape
from embedcalc.modeling.attention import Attention, AttentionImpl, Rotary
from embedcalc.modeling.attention_parts import expand_kv, split_heads
from embedcalc.modeling.drafter import stand_in
from embedcalc.modeling.kv_cache import CrossCache, LayerCache
from embedcalc.modeling.positions import apply_rotary


class QueryProjection(nn.Module):
    """A sharing layer's ``qkv``: the query projection ``q`` alone, called as one module so its FLOPs land on the
    ``attention/qkv`` key as every other layer's do."""

    def __init__(self, q: nn.Linear) -> None:
        super().__init__()
        self.q = q

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.q(x)  # (B, T, q_dim)
        return out


class SharedKVAttention(Attention):
    """Standard attention over an earlier layer's keys and values (module docstring)."""

    def __init__(
        self, config: ResolvedShape, spec: ResolvedAttention, *, impl: AttentionImpl, causal: bool
    ) -> None:
        super().__init__(config, spec, impl=impl, causal=causal, cross=False, relative_bias=False)
        self._source: list[Attention] = []  # a list, so the source is not registered as a submodule
        self.qkv = QueryProjection(self.qkv.q)  # type: ignore[assignment]

    def _queries(self, x: Tensor, rotary: Rotary | None) -> Tensor:
        """The queries with their norm and rotary positions: (B, T, d) -> (B, h, T, d_head)."""
        q: Tensor = self.qkv(x)  # (B, T, q_dim)
        if self.qk_norm is not None and self.qk_norm.full:
            q = self.qk_norm.q(q)
        q = split_heads(q, self.num_heads)  # (B, h, T, d_head)
        if self.qk_norm is not None and not self.qk_norm.full:
            q = self.qk_norm.q(q)
        if rotary is not None:
            cos, sin = rotary[self.rotary_width]
            q = apply_rotary(q, cos, sin)
        return q

    def attend(
        self, x: Tensor, memory: Tensor | None, bias: Tensor | None, rotary: Rotary | None,
        cache: LayerCache | CrossCache | None = None, position: int = 0,
    ) -> Tensor:  # fmt: skip
        if not self._source or self._source[0].shared_kv is None:
            raise RuntimeError("a layer sharing keys and values needs its source layer to run first")
        keys, values, blocked, full = self._source[0].shared_kv  # (B, h_kv, S, d_head) each
        q = self._queries(x, rotary)  # (B, h, T, d_head)
        if full:  # no cache, or the prefill: the source's own core, with this layer's queries
            k, v = expand_kv(keys, self.num_heads), expand_kv(values, self.num_heads)  # (B, h, S, d_head)
            context = self._core(q, k, v, bias)  # (B, h, T, d_head)
        else:
            context = self._cached_core(q, keys, values, bias, blocked)  # (B, h, T, d_head)
        return self._output(x, context)


class ExternalKVAttention(SharedKVAttention):
    """Standard attention whose keys and values are another model's, of the same positions (``kv_external``):
    its queries (and their norm and rotary positions), the scores and context over those keys, the output
    projection; no key/value projections, no key norm, no KV cache."""

    def attend(
        self, x: Tensor, memory: Tensor | None, bias: Tensor | None, rotary: Rotary | None,
        cache: LayerCache | CrossCache | None = None, position: int = 0,
    ) -> Tensor:  # fmt: skip
        batch, length = x.shape[:2]
        q = self._queries(x, rotary)  # (B, h, T, d_head)
        inner = (self.num_kv_heads, self.head_dim)
        keys = stand_in(x, batch, 0, position + length, *inner).transpose(1, 2)  # (B, h_kv, S, d_head)
        values = stand_in(x, batch, 0, position + length, *inner).transpose(1, 2)
        if cache is None or position == 0:
            k, v = expand_kv(keys, self.num_heads), expand_kv(values, self.num_heads)  # (B, h, S, d_head)
            context = self._core(q, k, v, bias)  # (B, h, T, d_head)
        else:
            query = torch.arange(position, position + length, device=x.device)[:, None]  # (T, 1)
            key = torch.arange(position + length, device=x.device)[None, :]  # (1, S)
            context = self._cached_core(q, keys, values, bias, self._blocked_at(query, key))
        return self._output(x, context)


def _shape(spec: Attention) -> tuple[int | None, int | None, int, int]:
    return spec.window, spec.chunk, spec.head_dim, spec.num_kv_heads


def link_shared_kv(attentions: list[object]) -> None:
    """Point every :class:`SharedKVAttention` of a stack (in layer order) at its source (module docstring)."""
    latest: dict[tuple[int | None, int | None, int, int], Attention] = {}
    for attention in attentions:
        if isinstance(attention, ExternalKVAttention):  # another model's keys and values: nothing to link
            continue
        if isinstance(attention, SharedKVAttention):
            source = latest.get(_shape(attention))
            if source is None:
                raise ValueError(
                    "a layer with kv_shared needs an earlier layer of its shape with its own K and V"
                )
            source.keeps_kv = True
            attention._source = [source]
        elif isinstance(attention, Attention) and not attention.cross:
            latest[_shape(attention)] = attention
