"""Block-sparse attention (MiniMax-M3's sparse attention, transformers' ``MiniMaxM3VLAttention`` with its
``MiniMaxM3VLIndexer``): standard (GQA) attention whose queries see only the key blocks a block indexer selects.

The indexer: ``index_q`` (embed_dim -> index_heads x index_head_dim) and one key per token ``index_k`` (embed_dim ->
index_head_dim), each RMS-normalised over index_head_dim (``index_q_norm``, ``index_k_norm``) and rotated like the
attention's heads (the first rotary channels). ``index_scores`` takes the dot product of every query head with every
key (B, H_I, T, S), masks future keys, max-pools the scores over blocks of ``index_block_size`` keys and keeps, per
query and indexer head, the ``index_topk`` best blocks, the query's own block always among them (transformers'
``index_local_blocks``: its score is raised to +inf). Each indexer head's selection applies to its group of
num_heads / index_heads attention heads. The core is the standard one over every key with the unselected blocks
masked (what transformers' eager and SDPA paths compute), so ``FlopCounterMode`` counts n² pairs; a query's useful
keys are those of its blocks (analysis/flops.py's causal count).

The indexer runs without autograd: the core depends on its scores only through which blocks are kept. Decoding, the
cache holds the keys and values and the indexer's key of every token (B, L, index_head_dim), what transformers'
``MiniMaxM3VLSparseCacheLayer`` holds; each new query scores all of them.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from embedcalc.config.layer_plan import Attention as ResolvedAttention
from embedcalc.config.resolved import ResolvedShape
from embedcalc.modeling.attention import Attention, AttentionImpl, Rotary
from embedcalc.modeling.attention_parts import expand_kv
from embedcalc.modeling.kv_cache import CrossCache, LayerCache
from embedcalc.modeling.positions import apply_rotary


class BlockScores(nn.Module):
    """The indexer's dot products, counted as ``attention/index_scores``: q (B, H_I, T, D_I), k (B, S, D_I) ->
    (B, H_I, T, S)."""

    def forward(self, q: Tensor, k: Tensor) -> Tensor:
        return torch.matmul(q, k.unsqueeze(1).transpose(-2, -1))  # (B, H_I, T, S)


class BlockSparseAttention(Attention):
    """Standard attention over the key blocks a block indexer selects per query (module docstring)."""

    def __init__(
        self, config: ResolvedShape, spec: ResolvedAttention, *, impl: AttentionImpl, causal: bool,
        relative_bias: bool,
    ) -> None:  # fmt: skip
        super().__init__(config, spec, impl=impl, causal=causal, cross=False, relative_bias=relative_bias)
        d, heads, width = config.embed_dim, spec.index_heads, spec.index_head_dim
        self.index_heads, self.index_width = heads, width
        self.block, self.topk = spec.index_block_size, spec.index_topk
        self.index_q = nn.Linear(d, heads * width, bias=False)
        self.index_k = nn.Linear(d, width, bias=False)
        self.index_q_norm = nn.RMSNorm(width, eps=1e-6)  # over each query head
        self.index_k_norm = nn.RMSNorm(width, eps=1e-6)
        self.index_scores = BlockScores()

    def _rotate(self, x: Tensor, rotary: Rotary | None) -> Tensor:
        """(B, ·, T, D_I) with its first rotary channels rotated (as many as the attention heads rotate, at most
        D_I)."""
        if rotary is None:
            return x
        cos, sin = rotary[self.rotary_width]
        width = min(cos.shape[-1], x.shape[-1])
        return apply_rotary(x, cos[..., :width], sin[..., :width])

    def _index_keys(self, x: Tensor, rotary: Rotary | None) -> Tensor:
        """The indexer's keys of ``x`` (B, T, d): (B, T, D_I), normalised and rotated."""
        k = self.index_k_norm(self.index_k(x))  # (B, T, D_I)
        return self._rotate(k.unsqueeze(1), rotary).squeeze(1)

    def _kept(self, x: Tensor, keys: Tensor, rotary: Rotary | None, position: int) -> Tensor:
        """(B, h, T, S) True where a query of ``x`` (B, T, d), at positions ``position`` on, may see a key of
        ``keys`` (B, S, D_I): an earlier key in one of the blocks its indexer head keeps."""
        batch, length, _ = x.shape
        q = self.index_q_norm(self.index_q(x).view(batch, length, self.index_heads, self.index_width))
        q = self._rotate(q.transpose(1, 2), rotary)  # (B, H_I, T, D_I)
        scores = self.index_scores(q, keys).float()  # (B, H_I, T, S)
        span = keys.shape[1]
        query = torch.arange(position, position + length, device=x.device)[:, None]  # (T, 1)
        future = torch.arange(span, device=x.device)[None, :] > query  # (T, S)
        scores = scores.masked_fill(future, float("-inf"))
        count = -(-span // self.block)  # key blocks, the last one partial
        padded = nn.functional.pad(scores, (0, count * self.block - span), value=float("-inf"))
        best = padded.view(batch, self.index_heads, length, count, self.block).amax(-1)  # (B, H_I, T, blocks)
        own = (query // self.block).expand(batch, self.index_heads, length, 1)  # each query's own block
        best = best.scatter(-1, own, float("inf"))  # always kept
        top, picked = best.topk(min(self.topk, count), dim=-1)  # (B, H_I, T, k)
        keep = torch.zeros_like(best, dtype=torch.bool).scatter(-1, picked, top > float("-inf"))
        keep = keep.repeat_interleave(self.block, dim=-1)[..., :span]  # (B, H_I, T, S)
        keep = keep & ~future
        return keep.repeat_interleave(self.num_heads // self.index_heads, dim=1)  # (B, h, T, S)

    def attend(
        self, x: Tensor, memory: Tensor | None, bias: Tensor | None, rotary: Rotary | None,
        cache: LayerCache | CrossCache | None = None, position: int = 0,
    ) -> Tensor:  # fmt: skip
        if bias is not None:
            raise ValueError("block-sparse attention takes no additive position bias")
        if isinstance(
            cache, CrossCache
        ):  # pragma: no cover - make_attention builds it for self-attention only
            raise ValueError("block-sparse attention is self-attention")
        q, k, v = self._project(x, None, rotary)
        length = x.shape[1]
        with torch.no_grad():  # the indexer only selects (module docstring)
            index_keys = self._index_keys(x, rotary)  # (B, T, D_I)
        if cache is None or position == 0:
            if cache is not None:
                cache.write(k, v, position)
                cache.write_index(index_keys, position)
            with torch.no_grad():
                kept = self._kept(x, index_keys, rotary, 0)  # (B, h, T, T)
            k, v = expand_kv(k, self.num_heads), expand_kv(v, self.num_heads)  # (B, h, T, d_head)
            context = self._masked_core(q, k, v, ~kept)
        else:
            cache.write(k, v, position)
            cache.write_index(index_keys, position)
            keys, values = cache.read(position + length)  # (B, h_kv, S, d_head) each
            if values is None:  # pragma: no cover - a standard layer's cache has values
                raise RuntimeError("standard attention needs a K and a V cache")
            with torch.no_grad():
                kept = self._kept(x, cache.read_index(position + length), rotary, position)  # (B, h, T, S)
            context = self._cached_core(q, keys, values, None, ~kept)
        return self._output(x, context)

    def _masked_core(self, q: Tensor, k: Tensor, v: Tensor, blocked: Tensor) -> Tensor:
        """The core with the (B, h, T, S) ``blocked`` mask, under the layer's implementation."""
        if self.sdpa is not None:
            out: Tensor = self.sdpa(q, k, v, ~blocked, False)  # (B, h, T, d_v)
            return out
        return self._eager(q, k, v, None, blocked)
