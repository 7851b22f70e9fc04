"""Attention sublayers: standard multi-head (GQA/MQA) attention and DeepSeek's multi-head latent attention (MLA),
with their cores (eager ``scores`` + ``context`` or fused ``sdpa``), masks (causal, sliding window, chunked),
additive biases (T5 relative buckets, ALiBi), q/k norms and attention sinks.

Every matmul runs inside the submodule named after the breakdown key it is counted under (docs/layers.md):
``qkv`` (separate ``q``, ``k``, ``v`` as transformers lays them out), ``out``, ``scores``, ``context``; for MLA
``q_a``, ``q_a_norm``, ``q_b`` (or ``q``), ``kv_a``, ``kv_a_norm``, ``kv_b``. Parameter-only parts have their own
modules too: ``qk_norm`` (``q``, ``k``), ``sinks``, ``norm`` (the sublayer's norms), ``relative_bias``.
The parts themselves (projections, cores, norms, sinks, head reshapes) are in :mod:`embedcalc.modeling.attention_parts`.

Sources: Vaswani et al. 2017 §3.2 (softmax(Q·Kᵀ / sqrt(d) + bias) · V); Ainslie et al. 2023 (GQA); DeepSeek-V2
report §2.1 and transformers' ``DeepseekV3Attention`` (MLA: low-rank Q and KV, the rope part of the key one vector
shared by every head); OpenAI's gpt-oss model card and transformers' ``GptOssAttention`` (a learned sink logit per
head joins the softmax as an extra column, which is then dropped); Dehghani et al. 2023 (q/k norms).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from embedcalc.config.layer_plan import Attention as ResolvedAttention
from embedcalc.config.resolved import ResolvedShape
from embedcalc.modeling.attention_parts import (
    QKV,
    Context,
    FusedCore,
    QKNorm,
    Scores,
    Sinks,
    embedding_table,
    expand_kv,
    output_projection,
    split_heads,
)
from embedcalc.modeling.kv_cache import CrossCache, LayerCache
from embedcalc.modeling.norms import TanhGate, gated, residual, sublayer_norm
from embedcalc.modeling.positions import apply_rotary, relative_position_bucket

AttentionImpl = Literal["sdpa", "eager"]
RotaryAngles = tuple[Tensor, Tensor]  # cos, sin: (T, rotary width) each
Rotary = dict[int, RotaryAngles]  # rotary width -> its angles (standard heads and MLA's rope dims may differ)


class AttentionBase(nn.Module):
    """What every attention sublayer shares: its norm and residual, the core, masks, sinks, the relative bias.

    Subclasses project queries, keys and values in :meth:`attend`. Causal self-attention masks future keys, keys
    ``window`` or more tokens back (sliding window) and keys outside the query's chunk (chunked attention).
    With sinks the core is eager under either implementation: SDPA has no way to add a softmax column (and
    transformers' gpt-oss does not support SDPA either).
    """

    def __init__(
        self,
        config: ResolvedShape,
        spec: ResolvedAttention,
        *,
        impl: AttentionImpl,
        causal: bool,
        cross: bool,
        relative_bias: bool,
        qk_head_dim: int,
        v_head_dim: int,
    ) -> None:
        super().__init__()
        self.num_heads = spec.num_heads
        self.impl, self.causal, self.cross = impl, causal, cross
        self_causal = causal and not cross
        self.window = spec.window if self_causal else None
        self.full_cache = spec.full_cache  # the KV cache keeps every token; the mask does the windowing
        self.chunk = spec.chunk if self_causal else None
        self.placement = config.resolved_norm_placement
        self.norm = sublayer_norm(config)
        self.scale = 1.0 / math.sqrt(qk_head_dim)
        eager = impl == "eager" or spec.sinks
        self.scores: Scores | None = Scores() if eager else None
        self.context: Context | None = Context() if eager else None
        self.sdpa: FusedCore | None = None if eager else FusedCore(qk_head_dim, v_head_dim)
        self.sinks = Sinks(spec.num_heads) if spec.sinks else None
        self.num_buckets = config.relative_attention_num_buckets
        self.max_distance = config.relative_attention_max_distance
        self.relative_bias = embedding_table(self.num_buckets, spec.num_heads) if relative_bias else None
        self.tanh_gate = TanhGate() if spec.tanh_gates else None  # Mllama's cross_attn_attn_gate

    def position_bias(self, query_len: int, key_len: int, query_offset: int = 0) -> Tensor:
        """T5's relative position bias, (1, h, T, S), for queries at positions ``query_offset`` on (cached decode)
        and keys at 0 .. S - 1; only the module that owns the table can compute it."""
        if self.relative_bias is None:
            raise RuntimeError("this attention layer has no relative position table")
        device = self.relative_bias.weight.device
        query = torch.arange(query_offset, query_offset + query_len, device=device)[:, None]  # (T, 1)
        key = torch.arange(key_len, device=device)[None, :]  # (1, S)
        # (T, S)
        buckets = relative_position_bucket(
            key - query,
            bidirectional=not self.causal,
            num_buckets=self.num_buckets,
            max_distance=self.max_distance,
        )
        bias: Tensor = self.relative_bias(buckets)  # (T, S, h)
        return bias.permute(2, 0, 1).unsqueeze(0)  # (1, h, T, S)

    def _blocked(self, query_len: int, key_len: int, device: torch.device) -> Tensor:
        """(T, S) True where a causal query may not look: future keys, keys a window or more back, other chunks."""
        query = torch.arange(query_len, device=device)[:, None]  # (T, 1)
        key = torch.arange(key_len, device=device)[None, :]  # (1, S)
        return self._blocked_at(query, key)

    def _blocked_at(self, query: Tensor, key: Tensor) -> Tensor:
        """(T, S) True where a causal query at position ``query`` (T, 1) may not see the key at ``key`` (1, S)."""
        blocked = key > query  # (T, S)
        if self.window is not None:
            blocked = blocked | (query - key >= self.window)
        if self.chunk is not None:
            blocked = blocked | (query // self.chunk != key // self.chunk)
        return blocked

    def _core(self, q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None) -> Tensor:
        """softmax(Q·Kᵀ / sqrt(d_qk) + bias, masked) · V: (B, h, T, d_qk), (B, h, S, d_qk), (B, h, S, d_v) ->
        (B, h, T, d_v)."""
        causal = self.causal and not self.cross
        query_len, key_len = q.shape[-2], k.shape[-2]
        limited = self.window is not None or self.chunk is not None
        if self.sdpa is not None:
            mask: Tensor | None = None if bias is None else bias.to(q.dtype)  # (1, h, T, S)
            if causal and (bias is not None or limited):
                blocked = self._blocked(query_len, key_len, q.device)  # (T, S)
                mask = ~blocked if mask is None else mask.masked_fill(blocked, float("-inf"))
                causal = False
            out: Tensor = self.sdpa(q, k, v, mask, causal)  # (B, h, T, d_v)
            return out
        return self._eager(q, k, v, bias, self._blocked(query_len, key_len, q.device) if causal else None)

    def _eager(self, q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None, blocked: Tensor | None) -> Tensor:
        """The eager core: scores, bias, the ``blocked`` (T, S) mask, sinks, softmax, context. K and V may have one
        head that broadcasts (latent attention's absorbed decode)."""
        if self.scores is None or self.context is None:
            raise RuntimeError("eager attention needs its scores and context modules")
        query_len, key_len = q.shape[-2], k.shape[-2]
        scores = self.scores(q, k) * self.scale  # (B, h, T, S)
        if bias is not None:
            scores = scores + bias
        if blocked is not None:
            scores = scores.masked_fill(blocked, float("-inf"))
        if self.sinks is not None:
            batch, heads = scores.shape[:2]
            sink = self.sinks.logits.to(scores.dtype).view(1, heads, 1, 1).expand(batch, heads, query_len, 1)
            scores = torch.cat((scores, sink), dim=-1)  # (B, h, T, S + 1): the sink is one more column
        weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(v.dtype)  # (B, h, T, S [+ 1])
        if self.sinks is not None:
            weights = weights[..., :key_len]  # (B, h, T, S): the sink's share is dropped
        context: Tensor = self.context(weights, v)  # (B, h, T, d_v)
        return context

    def _cached_blocked(
        self, cache: LayerCache, position: int, length: int, device: torch.device
    ) -> Tensor | None:
        """The (T, S) mask of ``length`` new queries from ``position`` against the cache's filled slots, or None
        when every slot is visible (one query: the slots hold only past keys within the window; a chunk still
        masks the previous chunk's slots of a rolling buffer, and a window over a cache that keeps every token
        masks the keys behind it)."""
        window_masked = self.window is not None and not cache.rolling
        if length == 1 and not (self.chunk is not None and cache.rolling) and not window_masked:
            return None
        query = torch.arange(position, position + length, device=device)[:, None]  # (T, 1)
        key = cache.key_positions(position + length, device)[None, :]  # (1, S)
        return self._blocked_at(query, key)

    def _cached_core(
        self, q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None, blocked: Tensor | None
    ) -> Tensor:
        """The core of a cached step: q (B, h, T, d), k and v (B, h_kv, S, d) unexpanded -> (B, h, T, d_v)."""
        if self.sdpa is not None:
            mask: Tensor | None = None if bias is None else bias.to(q.dtype)  # (1, h, T, S)
            if blocked is not None:
                mask = ~blocked if mask is None else mask.masked_fill(blocked, float("-inf"))
            out: Tensor = self.sdpa(q, k, v, mask, False)  # (B, h, T, d_v)
            return out
        k, v = expand_kv(k, self.num_heads), expand_kv(v, self.num_heads)  # (B, h, S, d)
        return self._eager(q, k, v, bias, blocked)

    def attend(
        self, x: Tensor, memory: Tensor | None, bias: Tensor | None, rotary: Rotary | None,
        cache: LayerCache | CrossCache | None = None, position: int = 0,
    ) -> Tensor:  # fmt: skip
        """The sublayer's transform without norm or residual: (B, T, d) -> (B, T, d). With ``cache`` the new
        tokens start at ``position``: their keys and values are written to it and the queries attend to it."""
        raise NotImplementedError

    def forward(
        self, x: Tensor, memory: Tensor | None = None, bias: Tensor | None = None, rotary: Rotary | None = None,
        cache: LayerCache | CrossCache | None = None, position: int = 0,
    ) -> Tensor:  # fmt: skip
        transform = gated(lambda h: self.attend(h, memory, bias, rotary, cache, position), self.tanh_gate)
        return residual(x, self.norm, transform, self.placement)


class Attention(AttentionBase):
    """Standard multi-head (grouped-query) attention, self or cross, with optional q/k norms and sinks.

    Rotary positions rotate the first ``rotary_dim`` channels of each query and key head (all of head_dim
    by default); cross-attention gets none.
    """

    def __init__(
        self, config: ResolvedShape, spec: ResolvedAttention, *, impl: AttentionImpl, causal: bool, cross: bool,
        relative_bias: bool,
    ) -> None:  # fmt: skip
        super().__init__(
            config, spec, impl=impl, causal=causal, cross=cross, relative_bias=relative_bias,
            qk_head_dim=spec.head_dim, v_head_dim=spec.value_head_dim,
        )  # fmt: skip
        self.num_kv_heads, self.head_dim = spec.num_kv_heads, spec.head_dim
        self.value_head_dim = spec.value_head_dim  # head_dim unless the layer has its own (MiMo-V2-Flash)
        self.rotary_width = config.rotary_dim or spec.head_dim
        kv = 0 if spec.kv_shared else 1 if spec.values_from_keys else 2
        self.qkv = QKV(config.embed_dim, spec.q_dim, spec.kv_dim, spec.qkv_bias, kv, spec.v_kv_dim)
        self.shared_kv: tuple[Tensor, Tensor, Tensor | None, bool] | None = None  # what it attended with
        self.keeps_kv = False  # a later layer reuses its keys and values (modeling/shared_kv.py)
        self.qk_norm = QKNorm(config, spec) if spec.qk_norm != "none" else None
        self.gate = nn.Linear(config.embed_dim, spec.q_dim, bias=spec.qkv_bias) if spec.output_gate else None
        # Laguna's per-head gate: softplus(g(x)) scales each head's context
        self.head_gate = nn.Linear(config.embed_dim, spec.num_heads, bias=False) if spec.head_gate else None
        self.out = output_projection(
            spec.value_dim, config.embed_dim, spec.out_groups, spec.out_rank, spec.out_bias
        )

    def _project(
        self, x: Tensor, memory: Tensor | None, rotary: Rotary | None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Queries, keys and values with q/k norms and rotary positions applied: q (B, h, T, d_head) from ``x``;
        k, v (B, h_kv, S, d_head) from ``memory`` (cross-attention) or ``x``."""
        q, k, v = self._qkv(x, memory if self.cross else None)  # (B, T, q_dim), (B, S, kv_dim) x2
        if self.qk_norm is not None and self.qk_norm.full:
            q, k = self.qk_norm.q(q), self.qk_norm.k(k)  # over all heads: (B, T, q_dim), (B, S, kv_dim)
        q, k, v = (
            split_heads(q, self.num_heads),
            split_heads(k, self.num_kv_heads),
            split_heads(v, self.num_kv_heads),
        )
        # q (B, h, T, d_head); k, v (B, h_kv, S, d_head)
        if self.qk_norm is not None and not self.qk_norm.full:
            q, k = self.qk_norm.q(q), self.qk_norm.k(k)  # per head, over d_head
        if rotary is not None and not self.cross:
            cos, sin = rotary[self.rotary_width]
            q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        return q, k, v

    def _qkv(self, x: Tensor, memory: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
        """The Q, K and V projections (a shared block's use adds its adapters: modeling/shared_block.py)."""
        q, k, v = self.qkv(x, memory)  # (B, T, q_dim), (B, S, kv_dim) x2
        return q, k, v

    def _cross_queries(self, x: Tensor) -> Tensor:
        """Cross-attention queries alone (the source's keys and values are cached): (B, h, T, d_head)."""
        q: Tensor = self.qkv.q(x)  # (B, T, q_dim)
        if self.qk_norm is not None and self.qk_norm.full:
            q = self.qk_norm.q(q)
        q = split_heads(q, self.num_heads)  # (B, h, T, d_head)
        if self.qk_norm is not None and not self.qk_norm.full:
            q = self.qk_norm.q(q)
        return q

    def _attend_cached(
        self, x: Tensor, memory: Tensor | None, bias: Tensor | None, rotary: Rotary | None,
        cache: LayerCache | CrossCache, position: int,
    ) -> Tensor:  # fmt: skip
        """Attention through the cache: (B, h, T, d_head) context of the new tokens."""
        if isinstance(cache, CrossCache):
            if cache.ready:
                q = self._cross_queries(x)
            else:
                if memory is None:
                    raise ValueError("cross-attention needs the encoder output (memory) at prefill")
                q, k, v = self._project(x, memory, None)
                cache.keys.copy_(k)  # (B, h_kv, S, d_head)
                cache.values.copy_(v)
                cache.ready = True
            return self._cached_core(q, cache.keys, cache.values, None, None)
        q, k, v = self._project(x, None, rotary)
        length = x.shape[1]
        cache.write(k, v, position)
        if position == 0:  # prefill: the prompt attends to itself, as without a cache
            self._keep(k, v, None, True)
            k, v = expand_kv(k, self.num_heads), expand_kv(v, self.num_heads)  # (B, h, T, d_head)
            return self._core(q, k, v, bias)
        if cache.rolling and length > 1:
            raise ValueError(
                "a rolling (windowed or chunked) cache decodes one token at a time after the prompt"
            )
        keys, values = cache.read(position + length)  # (B, h_kv, S, d_head) each
        if values is None:  # pragma: no cover - a standard layer's cache has values
            raise RuntimeError("standard attention needs a K and a V cache")
        blocked = self._cached_blocked(cache, position, length, q.device)
        self._keep(keys, values, blocked, False)
        return self._cached_core(q, keys, values, bias, blocked)

    def _keep(self, k: Tensor, v: Tensor, blocked: Tensor | None, full: bool) -> None:
        """Keep the keys and values (B, h_kv, S, d_head) this layer attends with, and the mask of a cached step
        (``full``: no cache, or the prefill), for the later layers that reuse them."""
        if self.keeps_kv:
            self.shared_kv = (k, v, blocked, full)

    def attend(
        self, x: Tensor, memory: Tensor | None, bias: Tensor | None, rotary: Rotary | None,
        cache: LayerCache | CrossCache | None = None, position: int = 0,
    ) -> Tensor:  # fmt: skip
        if self.cross and memory is None and not (isinstance(cache, CrossCache) and cache.ready):
            raise ValueError("cross-attention needs the encoder output (memory)")
        if cache is not None:
            context = self._attend_cached(x, memory, bias, rotary, cache, position)  # (B, h, T, d_head)
        else:
            q, k, v = self._project(x, memory, rotary)
            self._keep(k, v, None, True)
            k, v = expand_kv(k, self.num_heads), expand_kv(v, self.num_heads)  # (B, h, S, d_head)
            context = self._core(q, k, v, bias)  # (B, h, T, d_head)
        return self._output(x, context)

    def _output(self, x: Tensor, context: Tensor) -> Tensor:
        """The heads' context (B, h, T, d_v) merged, gated (Qwen3-Next) and projected out: (B, T, d)."""
        batch, length, _ = x.shape
        # (B, T, h x d_v)
        merged = context.transpose(1, 2).reshape(batch, length, self.num_heads * self.value_head_dim)
        if self.gate is not None:  # gated attention (Qwen3-Next): sigmoid(gate(x)) per channel
            merged = merged * torch.sigmoid(self.gate(x))
        if (
            self.head_gate is not None
        ):  # Laguna: softplus(g(x)) per head, (B, T, h, 1) over each head's channels
            gate = F.softplus(self.head_gate(x).float()).to(merged.dtype).unsqueeze(-1)
            merged = (merged.view(batch, length, self.num_heads, -1) * gate).view(batch, length, -1)
        out: Tensor = self.out(merged)  # (B, T, d)
        return out


def rotary_widths(config: ResolvedShape, specs: list[ResolvedAttention]) -> set[int]:
    """The rotary widths the attention layers of ``specs`` rotate (rotary_dim or head_dim; MLA's rope dims)."""
    return {s.qk_rope_head_dim if s.latent else config.rotary_dim or s.head_dim for s in specs}
