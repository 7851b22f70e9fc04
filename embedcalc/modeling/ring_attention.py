"""Causal attention under context parallelism, run for real on torch.distributed: the second implementation the
analyzer's ``--cp`` (:mod:`embedcalc.analysis.comm.volumes`, :func:`embedcalc.analysis.workload.context_local`) is
checked against.

The layout is TransformerEngine's load-balanced one (``AttnFuncWithCPAndKVP2P``; Megatron-core's context
parallelism): the sequence is cut into 2·W chunks and rank r holds chunks r and 2W − 1 − r, of its queries, keys and
values. Each of W steps attends the rank's query chunks to the key/value chunks it holds now — every earlier chunk
whole, its own chunk causally, later chunks not at all — merging the partial results by their log-sum-exp (the
online softmax of FlashAttention), and then passes those keys and values to rank r + 1 and takes rank r − 1's, point
to point; after W − 1 passes every query has met every key it may see. What a rank sends is counted, in bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class RingResult:
    """One rank's attention output for its two chunks, and the bytes it sent round the ring."""

    out: torch.Tensor
    sent_bytes: int
    sends: int


def local_chunks(x: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    """Rank ``rank``'s share of a full-sequence tensor (…, seq, d): chunks rank and 2·world − 1 − rank."""
    chunks = x.chunk(2 * world, dim=-2)
    return torch.cat([chunks[rank], chunks[2 * world - 1 - rank]], dim=-2)


def _partial(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of ``q`` to ``k``/``v`` (…, n, d) and its log-sum-exp per query (…, n, 1)."""
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        n = scores.shape[-1]
        scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    lse = torch.logsumexp(scores, dim=-1, keepdim=True)
    return torch.softmax(scores, dim=-1) @ v, lse


def _merge(acc: tuple[torch.Tensor, torch.Tensor] | None, part: tuple[torch.Tensor, torch.Tensor]
           ) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """Two partial attentions of the same queries over disjoint keys, merged by their log-sum-exp."""
    if acc is None:
        return part
    (o1, l1), (o2, l2) = acc, part
    lse = torch.logaddexp(l1, l2)
    return o1 * torch.exp(l1 - lse) + o2 * torch.exp(l2 - lse), lse


def ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, rank: int, world: int,
                   group: Any = None) -> RingResult:  # fmt: skip
    """Causal attention of this rank's query chunks (module docstring) over ``world`` ranks of torch.distributed's
    default (or ``group``) process group; ``q``, ``k``, ``v``: (batch, heads, 2·chunk, head_dim), the rank's two
    chunks concatenated (:func:`local_chunks`)."""
    import torch.distributed as dist

    mine = (rank, 2 * world - 1 - rank)
    q_chunks = q.chunk(2, dim=-2)
    acc: list[tuple[torch.Tensor, torch.Tensor] | None] = [None, None]
    sent = sends = 0
    for step in range(world):
        owner = (rank - step) % world
        held = (owner, 2 * world - 1 - owner)
        k_chunks, v_chunks = k.chunk(2, dim=-2), v.chunk(2, dim=-2)
        for i, qi in enumerate(mine):
            for j, kj in enumerate(held):
                if kj > qi:
                    continue  # a later chunk: masked out
                acc[i] = _merge(acc[i], _partial(q_chunks[i], k_chunks[j], v_chunks[j], causal=kj == qi))
        if step == world - 1:
            break
        received_k, received_v = torch.empty_like(k), torch.empty_like(v)
        ops = [dist.P2POp(dist.isend, k.contiguous(), (rank + 1) % world, group),
               dist.P2POp(dist.isend, v.contiguous(), (rank + 1) % world, group),
               dist.P2POp(dist.irecv, received_k, (rank - 1) % world, group),
               dist.P2POp(dist.irecv, received_v, (rank - 1) % world, group)]  # fmt: skip
        for request in dist.batch_isend_irecv(ops):
            request.wait()
        sent += k.numel() * k.element_size() + v.numel() * v.element_size()
        sends += 1
        k, v = received_k, received_v
    outputs = [a[0] for a in acc if a is not None]
    return RingResult(torch.cat(outputs, dim=-2), sent, sends)
