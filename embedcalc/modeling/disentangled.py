"""DeBERTa's disentangled attention in plain PyTorch (He et al. 2021, "DeBERTa", §3.1, eq. 4; transformers'
``DisentangledSelfAttention`` of ``models/deberta_v2``), for encoders.

The stack's relative-position table (2·span x d, ``layers.0.attention.rel_embeddings``, with its norm when the
config norms it) is read once per forward by the stack (:meth:`DisentangledAttention.relative_embeddings`) and
handed to every layer in place of an additive bias. Each layer projects it once (``pos_proj``: its own biased
``key`` / ``query`` linears, or the content ``q`` / ``k`` weights when ``share_keys``), scores queries against the
position keys (c2p) and keys against the position queries (p2c) in ``pos_scores`` (two matmuls of (B, h, n, hd) by
(h, hd, 2·span)), gathers each pair's entry at its relative position, and adds both to the content scores, each
divided by sqrt(hd x (1 + terms)) as transformers divides them (a 0-dim tensor each, so autograd saves what
transformers' saves: analysis/memory/disentangled.py). The core is always eager. Module paths meet the analytic keys
``attention/rel_embeddings`` (the table and its norm), ``attention/pos_proj`` and ``attention/pos_scores``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from embedcalc.config.layer_plan import Attention as ResolvedAttention
from embedcalc.config.resolved import ResolvedShape
from embedcalc.config.spec_shapes import DisentangledShape
from embedcalc.modeling.attention import Attention, AttentionImpl
from embedcalc.modeling.attention_parts import QKV, Context, Scores, embedding_table
from embedcalc.modeling.norms import make_norm


def relative_positions(length: int, spec: DisentangledShape, device: torch.device) -> Tensor:
    """(T, T) query-minus-key distances, log-bucketed when ``spec.bucketed`` (transformers'
    ``build_relative_position`` and ``make_log_bucket_position``)."""
    ids = torch.arange(length, device=device)
    rel = ids[:, None] - ids[None, :]  # (T, T)
    if not spec.bucketed:
        return rel
    mid = spec.span // 2
    sign = torch.sign(rel)
    inside = (rel < mid) & (rel > -mid)
    absolute = torch.where(inside, torch.full_like(rel, mid - 1), rel.abs())
    log_pos = (
        torch.ceil(torch.log(absolute / mid) / math.log((spec.max_distance - 1) / mid) * (mid - 1)) + mid
    )
    return torch.where(absolute <= mid, rel.to(log_pos.dtype), log_pos * sign).long()  # (T, T)


class RelativeTable(nn.Module):
    """The stack's relative-position table and its optional norm (``attention/rel_embeddings``); one module, so that
    FSDP2 gathers both when the stack reads it, before the first block runs."""

    def __init__(self, config: ResolvedShape, spec: DisentangledShape) -> None:
        super().__init__()
        self.table = embedding_table(spec.rows, config.embed_dim)
        self.norm = make_norm(config) if spec.norm else None

    def forward(self) -> Tensor:
        table: Tensor = self.table.weight  # (2·span, d)
        return self.norm(table) if self.norm is not None else table


class PositionProjections(nn.Module):
    """The table's projections to position keys and queries, (h, 2·span, hd) each (``attention/pos_proj``)."""

    def __init__(self, config: ResolvedShape, spec: DisentangledShape, q_dim: int) -> None:
        super().__init__()
        self.spec = spec
        own = not spec.share_keys
        self.key = nn.Linear(config.embed_dim, q_dim) if own and spec.c2p else None
        self.query = nn.Linear(config.embed_dim, q_dim) if own and spec.p2c else None

    def forward(self, rel: Tensor, qkv: QKV, heads: int) -> tuple[Tensor | None, Tensor | None]:
        def split(x: Tensor) -> Tensor:  # (2·span, h·hd) -> (h, 2·span, hd)
            return x.view(x.shape[0], heads, -1).transpose(0, 1)

        if self.spec.share_keys:  # transformers projects both with the content weights whatever the terms
            if qkv.k is None:  # pragma: no cover - DeBERTa's attention projects its own keys
                raise RuntimeError("disentangled attention needs its key projection")
            keys = split(F.linear(rel, qkv.k.weight, qkv.k.bias))
            queries = split(F.linear(rel, qkv.q.weight, qkv.q.bias))
            return (keys if self.spec.c2p else None), (queries if self.spec.p2c else None)
        return (split(self.key(rel)) if self.key is not None else None,
                split(self.query(rel)) if self.query is not None else None)  # fmt: skip


def divisor(like: Tensor, value: float) -> Tensor:
    """A 0-dim tensor of ``value`` in ``like``'s dtype: transformers divides each score term by its own
    ``scaled_size_sqrt(...).to(dtype)``, and autograd saves each (one value per division)."""
    return torch.full((), value, dtype=like.dtype, device=like.device)


class PositionScores(nn.Module):
    """c2p and p2c: (B, h, T, hd) against (h, 2·span, hd), gathered at each pair's distance and divided by ``scale``
    -> (B, h, T, T) (``attention/pos_scores``). As transformers' ``disentangled_attention_bias``, autograd saves per
    term the broadcast position keys (queries), the (B, h, T, 2·span) product (``gather`` reads its input), the
    (T, T) int64 index and the divisor; p2c also the keys ``k`` (``q`` is the contiguous one the content product
    saves)."""

    def forward(self, q: Tensor, k: Tensor, keys: Tensor | None, queries: Tensor | None, rel: Tensor,
                span: int, scale: float) -> Tensor:  # fmt: skip
        batch, heads, length, _ = q.shape
        score = torch.zeros(batch, heads, length, length, dtype=q.dtype, device=q.device)
        if keys is not None:
            c2p = torch.matmul(q, keys.transpose(-1, -2))  # (B, h, T, 2·span)
            index = torch.clamp(rel + span, 0, 2 * span - 1).expand(batch, heads, length, length)
            score = score + torch.gather(c2p, -1, index) / divisor(c2p, scale)  # (B, h, T, T)
        if queries is not None:
            p2c = torch.matmul(k, queries.transpose(-1, -2))  # (B, h, T, 2·span), rows are keys
            index = torch.clamp(-rel + span, 0, 2 * span - 1).expand(batch, heads, length, length)
            # (B, h, T(query), T(key))
            score = score + torch.gather(p2c, -1, index).transpose(-1, -2) / divisor(p2c, scale)
        return score


class DisentangledAttention(Attention):
    """Standard multi-head self-attention plus DeBERTa's position terms; layer 0 owns the stack's table."""

    def __init__(
        self, config: ResolvedShape, spec: ResolvedAttention, *, impl: AttentionImpl, owns_table: bool
    ) -> None:
        super().__init__(config, spec, impl=impl, causal=False, cross=False, relative_bias=False)
        positions = config.disentangled
        if positions is None:  # pragma: no cover - make_attention builds this only for a disentangled config
            raise ValueError("DisentangledAttention needs config.disentangled")
        self.positions = positions
        # the position terms need eager scores
        self.scores, self.context, self.sdpa = (
            Scores(),
            Context(),
            None,
        )
        self.divisor = math.sqrt(spec.head_dim * (1 + positions.terms))  # transformers' scaled_size_sqrt
        self.rel_embeddings = RelativeTable(config, positions) if owns_table else None
        self.pos_proj = PositionProjections(config, positions, spec.q_dim)
        self.pos_scores = PositionScores()

    def relative_embeddings(self) -> Tensor:
        """The stack's table as every layer reads it, normed when configured: (2·span, d)."""
        if self.rel_embeddings is None:
            raise RuntimeError("only the stack's first layer holds the relative-position table")
        table: Tensor = self.rel_embeddings()  # (2·span, d)
        return table

    def attend(self, x: Tensor, memory: Tensor | None, bias: Tensor | None, rotary: object = None,
               cache: object = None, position: int = 0) -> Tensor:  # fmt: skip
        """(B, T, d) -> (B, T, d); ``bias`` is the stack's relative-position table (2·span, d)."""
        if bias is None or cache is not None:
            raise ValueError(
                "disentangled attention needs the stack's position table and runs without a cache"
            )
        if self.scores is None or self.context is None:  # pragma: no cover - __init__ builds the eager core
            raise RuntimeError("disentangled attention runs the eager core")
        batch, length, _ = x.shape
        q, k, v = self._project(x, None, None)  # (B, h, T, hd) each
        q = q.contiguous()  # one tensor for the content and c2p products, as transformers' query_layer
        keys, queries = self.pos_proj(bias, self.qkv, self.num_heads)  # (h, 2·span, hd) or None
        rel = relative_positions(length, self.positions, x.device)  # (T, T)
        # each term divided by sqrt(hd (1 + terms)) as transformers does (the content one through K): (B, h, T, T)
        content = self.scores(q, k / divisor(k, self.divisor))
        scores = content + self.pos_scores(q, k, keys, queries, rel, self.positions.span, self.divisor)
        # in the model's dtype, as transformers' DeBERTa (no float32 upcast): (B, h, T, T)
        weights = torch.softmax(scores, dim=-1)
        context: Tensor = self.context(weights, v)  # (B, h, T, hd)
        # (B, T, q_dim)
        merged = context.transpose(1, 2).reshape(batch, length, self.num_heads * self.head_dim)
        out: Tensor = self.out(merged)  # (B, T, d)
        return out
