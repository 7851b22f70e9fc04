"""DeepSeek Sparse Attention (DSA; DeepSeek-V3.2-Exp report §2.1-2.2, transformers' ``DeepseekV32Attention`` and
``GlmMoeDsaAttention``): multi-head latent attention whose every query attends only to the ``index_topk`` keys a
lightning indexer selects.

The indexer (``DeepseekV32Indexer``): queries ``index_q`` from the normalised query latent (q_lora_rank ->
index_heads x index_head_dim), one key per token ``index_k`` (embed_dim -> index_head_dim) with its LayerNorm
``index_k_norm``, per-head weights ``index_weights`` (embed_dim -> index_heads); both rotate their first
qk_rope_head_dim channels. ``index_scores`` computes I(t, s) = sum_j w(t, j) ReLU(q(t, j) . k(s)) for every query
and every earlier token (two matmuls), causal positions masked, and the top min(index_topk, S) tokens are kept
(ties to the earlier token).
The MLA core then runs on those keys only: each query's keys and values are gathered from the decompressed K and V
(a plain ``torch.gather``, no custom kernel) and ``scores`` and ``context`` multiply (B, h, T, 1, d) by
(B, h, T, k, d), so ``FlopCounterMode`` counts n x min(n, k) pairs, the analytic count. A selected slot a query
may not see (a query at position i < k - 1 has only i + 1 earlier tokens) is masked.

The indexer runs without autograd: the core depends on its scores only through the integer top-k indices, so no
gradient of the model's loss reaches it (DeepSeek-V3.2-Exp §2.1 detaches the indexer's input and trains it by its
own KL objective, which embedcalc does not model), and its tensors — the (B, T, H_I, S) ReLU'd dot products, the
(B, T, S) scores and their sort — are transient, never saved for the backward pass.

A layer with ``index_shared`` (GLM-5) has no indexer: it reuses the selection of the previous layer that has one
(linked by :func:`link_shared_selections`). Decoding, the cache holds the MLA latent and rope key and, for a layer
with an indexer, its keys (B, L, index_head_dim), what transformers' ``DynamicIndexedLayer`` holds: the indexer
reads all of them, the core only the latent entries it selected (absorbed, as :class:`LatentAttention` decodes).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from embedcalc.config.layer_plan import Attention as ResolvedAttention
from embedcalc.config.resolved import ResolvedShape
from embedcalc.modeling.attention import AttentionImpl, Rotary
from embedcalc.modeling.attention_parts import QueryScale, split_heads
from embedcalc.modeling.kv_cache import CrossCache, LayerCache
from embedcalc.modeling.latent_attention import LatentAttention
from embedcalc.modeling.positions import apply_rotary


class IndexScores(nn.Module):
    """The indexer's scores, counted as ``attention/index_scores``: q (B, T, H_I, D_I), k (B, S, D_I), weights
    (B, T, H_I) -> (B, T, S), sum_j w_j ReLU(q_j . k) (the ReLU'd dot products, then their weighted sum)."""

    def __init__(self, heads: int, width: int) -> None:
        super().__init__()
        self.scale, self.head_scale = width**-0.5, heads**-0.5

    def forward(self, q: Tensor, k: Tensor, weights: Tensor) -> Tensor:
        batch, length, heads, width = q.shape
        # one (B, T H_I, D_I) x (B, D_I, S) product: broadcasting k over T would copy it T times; in place, the
        # selection runs without autograd
        dots = torch.matmul(q.reshape(batch, length * heads, width), k.transpose(-2, -1))  # (B, T H_I, S)
        dots = dots.mul_(self.scale).relu_().view(batch, length, heads, -1)  # (B, T, H_I, S)
        summed = torch.matmul((weights * self.head_scale).unsqueeze(-2), dots)  # (B, T, 1, S)
        return summed.squeeze(-2)  # (B, T, S)


class SparseAttention(LatentAttention):
    """MLA over the ``index_topk`` keys the lightning indexer selects per query (module docstring)."""

    def __init__(
        self,
        config: ResolvedShape,
        spec: ResolvedAttention,
        *,
        impl: AttentionImpl,
        causal: bool,
        relative_bias: bool,
    ) -> None:
        # the gathered core is eager: SDPA cannot take a different key set per query
        super().__init__(config, spec, impl="eager", causal=causal, relative_bias=relative_bias)
        d, heads, width = config.embed_dim, spec.index_heads, spec.index_head_dim
        self.topk, self.index_heads, self.index_width = spec.index_topk, heads, width
        self.shared = spec.index_shared
        self.index_q = (
            nn.Linear(spec.q_lora_rank or d, heads * width, bias=False) if not self.shared else None
        )
        # without a query rank (Mistral Large 4) the indexer reads the input through a LayerNorm
        self.index_input_norm = (
            nn.LayerNorm(d, eps=1e-6) if spec.q_lora_rank is None and not self.shared else None
        )
        self.index_query_scale = QueryScale(heads) if spec.query_scale and not self.shared else None
        self.index_k = nn.Linear(d, width, bias=False) if not self.shared else None
        self.index_k_norm = nn.LayerNorm(width, eps=1e-6) if not self.shared else None
        self.index_weights = nn.Linear(d, heads, bias=False) if not self.shared else None
        self.index_scores = IndexScores(heads, width) if not self.shared else None
        self.selection: Tensor | None = None  # the last (B, T, k) selection, which sharing layers reuse
        self._source: list[SparseAttention] = []  # index_shared: the layer whose selection this one reuses

    # --- the indexer ----------------------------------------------------------------------------------------------

    def _index_keys(self, x: Tensor, rotary: Rotary | None) -> Tensor:
        """The indexer's keys of ``x`` (B, T, d): (B, T, D_I), normalised, the first rope channels rotated."""
        if (
            self.index_k is None or self.index_k_norm is None
        ):  # pragma: no cover - only indexer layers call it
            raise RuntimeError("a layer sharing its selection has no indexer keys")
        k = self.index_k_norm(self.index_k(x))  # (B, T, D_I)
        return self._rotate(k.unsqueeze(1), rotary).squeeze(1)  # (B, T, D_I)

    def _rotate(self, x: Tensor, rotary: Rotary | None) -> Tensor:
        """(B, ·, T, D_I) with its first qk_rope_head_dim channels rotated."""
        if rotary is None:
            return x
        cos, sin = rotary[self.rope]
        rot, rest = torch.split(x, [self.rope, x.shape[-1] - self.rope], dim=-1)
        return torch.cat((apply_rotary(rot, cos, sin), rest), dim=-1)

    def _select(
        self, x: Tensor, q_latent: Tensor, keys: Tensor, rotary: Rotary | None, blocked: Tensor, position: int
    ) -> tuple[Tensor, Tensor]:
        """The top min(k, S) keys of each query: x (B, T, d), q_latent (B, T, r_q), keys (B, S, D_I), blocked
        (T, S) -> indices (B, T, k) and (B, T, k) True where the selected key is one the query may not see."""
        if self.index_q is None or self.index_weights is None or self.index_scores is None:
            if not self._source or self._source[0].selection is None:
                raise RuntimeError(
                    "a layer sharing its selection runs after the layer whose selection it reuses"
                )
            indices = self._source[0].selection  # (B, T, k)
        else:
            batch, length, _ = x.shape
            # (B, T, H_I, D_I)
            q = self.index_q(q_latent).view(batch, length, self.index_heads, self.index_width)
            q = self._rotate(q.transpose(1, 2), rotary)  # (B, H_I, T, D_I)
            if self.index_query_scale is not None:
                q = self.index_query_scale(q, position)
            q = q.transpose(1, 2)  # (B, T, H_I, D_I)
            scores = self.index_scores(q, keys, self.index_weights(x))  # (B, T, S)
            scores = scores.masked_fill(blocked, float("-inf"))
            # the top k, ties (ReLU's zeros) to the earlier token: a stable sort, so a prompt and its cached decode
            # select alike (topk's order among equal scores depends on the shape)
            order = scores.sort(dim=-1, descending=True, stable=True).indices  # (B, T, S)
            indices = order[
                ..., : min(self.topk, scores.shape[-1])
            ].contiguous()  # (B, T, k): frees the (B, T, S)
        self.selection = indices
        hidden = torch.gather(blocked.expand(indices.shape[0], -1, -1), -1, indices)  # (B, T, k)
        return indices, hidden

    # --- the core over the selected keys ----------------------------------------------------------------------------

    def _gathered(self, q: Tensor, k: Tensor, v: Tensor, indices: Tensor, hidden: Tensor) -> Tensor:
        """softmax over each query's selected keys: q (B, h', T, d_qk), k (B, h', S, d_qk), v (B, h', S, d_v) with
        h' = h or 1 (one latent shared by every head), indices and hidden (B, T, k) -> (B, h, T, d_v)."""
        if self.scores is None or self.context is None:  # pragma: no cover - built eager
            raise RuntimeError("sparse attention needs its scores and context modules")
        batch, _, length, _ = q.shape
        kk = indices.shape[-1]

        def pick(t: Tensor) -> Tensor:  # (B, h', S, w) -> (B, h', T, k, w): each query's selected rows
            where = indices[:, None, :, :, None].expand(batch, t.shape[1], length, kk, t.shape[-1])
            return torch.gather(t.unsqueeze(2).expand(-1, -1, length, -1, -1), 3, where)

        scores = self.scores(q.unsqueeze(-2), pick(k)) * self.scale  # (B, h, T, 1, k)
        scores = scores.masked_fill(hidden[:, None, :, None, :], float("-inf"))
        weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(v.dtype)  # (B, h, T, 1, k)
        context: Tensor = self.context(weights, pick(v))  # (B, h, T, 1, d_v)
        return context.squeeze(-2)  # (B, h, T, d_v)

    def attend(
        self, x: Tensor, memory: Tensor | None, bias: Tensor | None, rotary: Rotary | None,
        cache: LayerCache | CrossCache | None = None, position: int = 0,
    ) -> Tensor:  # fmt: skip
        if bias is not None:
            raise ValueError("sparse attention takes no additive position bias")
        batch, length, _ = x.shape
        h = self.num_heads
        if self.q_a is not None and self.q_a_norm is not None and self.q_b is not None:
            q_latent = self.q_a_norm(self.q_a(x))  # (B, T, r_q): the indexer's input too
            q = split_heads(self.q_b(q_latent), h)  # (B, h, T, nope + rope)
        else:  # one full-rank q; the indexer reads the normalised input (Mistral Large 4)
            norm = self.index_input_norm
            q_latent = norm(x) if norm is not None else x  # (B, T, d)
            q = split_heads(self._queries(x), h)  # (B, h, T, nope + rope)
        if self.query_scale is not None:
            q = self.query_scale(q, position)
        q_nope, q_rope = torch.split(q, [self.nope, self.rope], dim=-1)
        # (B, T, r), (B, T, rope)
        latent, k_rope = torch.split(self.kv_a(x), [self.latent_dim, self.rope], dim=-1)
        latent = self.kv_a_norm(latent)  # (B, T, r_kv)
        k_rope = k_rope.unsqueeze(1)  # (B, 1, T, rope)
        if rotary is not None:
            cos, sin = rotary[self.rope]
            q_rope, k_rope = apply_rotary(q_rope, cos, sin), apply_rotary(k_rope, cos, sin)
        with torch.no_grad():  # the indexer only selects (module docstring: no gradient reaches it)
            index_keys = self._index_keys(x, rotary) if not self.shared else None  # (B, T, D_I)
        if isinstance(cache, LayerCache):
            cache.write(torch.cat((latent, k_rope.squeeze(1)), dim=-1), None, position)  # (B, T, r_kv + rope)
            if index_keys is not None:
                cache.write_index(index_keys, position)
            if position > 0:
                return self._decode(x, q_latent, q_nope, q_rope, rotary, cache, position)
        blocked = self._blocked(length, length, x.device)  # (T, S)
        keys = index_keys if index_keys is not None else x.new_empty(0)
        with torch.no_grad():
            indices, hidden = self._select(x, q_latent, keys, rotary, blocked, position)  # (B, T, k) each
        kv = split_heads(self.kv_b(latent), h)  # (B, h, T, nope + v)
        k_nope, v = torch.split(kv, [self.nope, self.v_dim], dim=-1)
        k = torch.cat((k_nope, k_rope.expand(batch, h, length, self.rope)), dim=-1)  # (B, h, T, nope + rope)
        context = self._gathered(torch.cat((q_nope, q_rope), dim=-1), k, v, indices, hidden)  # (B, h, T, v)
        out: Tensor = self.out(context.transpose(1, 2).reshape(batch, length, h * self.v_dim))  # (B, T, d)
        return out

    def _decode(
        self, x: Tensor, q_latent: Tensor, q_nope: Tensor, q_rope: Tensor, rotary: Rotary | None, cache: LayerCache,
        position: int,
    ) -> Tensor:  # fmt: skip
        """New tokens from ``position`` against the cache: the indexer reads every cached key, the core the
        selected latent entries only, absorbed (W_UK into the queries, W_UV after the context)."""
        batch, length, _ = x.shape
        end = position + length
        cached, _ = cache.read(end)  # (B, S, r_kv + rope)
        query = torch.arange(position, end, device=x.device)[:, None]  # (T, 1)
        blocked = torch.arange(end, device=x.device)[None, :] > query  # (T, S)
        keys = cache.read_index(end) if not self.shared else x.new_empty(0)  # (B, S, D_I)
        with torch.no_grad():
            indices, hidden = self._select(x, q_latent, keys, rotary, blocked, position)  # (B, T, k)
        # (h, nope + v, r)
        weight = self.kv_b.weight.view(self.num_heads, self.nope + self.v_dim, self.latent_dim)
        w_uk, w_uv = weight[:, : self.nope], weight[:, self.nope :]  # (h, nope, r), (h, v, r)
        absorbed = torch.cat((torch.matmul(q_nope, w_uk), q_rope), dim=-1)  # (B, h, T, r + rope)
        latents = cached.unsqueeze(1)  # (B, 1, S, r + rope): one latent key shared by every head
        # (B, h, T, r)
        context = self._gathered(absorbed, latents, latents[..., : self.latent_dim], indices, hidden)
        context = torch.matmul(context, w_uv.transpose(-2, -1))  # (B, h, T, v)
        out: Tensor = self.out(context.transpose(1, 2).reshape(batch, length, self.num_heads * self.v_dim))
        return out


def link_shared_selections(attentions: list[nn.Module | None]) -> None:
    """Point every sparse layer with ``index_shared`` at the nearest earlier sparse layer with an indexer (in
    layer order), as transformers' GLM-MoE-DSA passes ``prev_topk_indices`` down the stack."""
    source: SparseAttention | None = None
    for attention in attentions:
        if not isinstance(attention, SparseAttention):
            continue
        if not attention.shared:
            source = attention
        elif source is None:
            raise ValueError("a sparse layer with index_shared needs an earlier sparse layer with an indexer")
        else:
            attention._source = [source]
