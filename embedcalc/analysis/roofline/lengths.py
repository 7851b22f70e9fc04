"""What one phase's attention sees: query and key tokens per stack, and the KV cache bytes a decode step reads (the
memory model's cache at that length, in the KV dtype). The traffic of :mod:`embedcalc.analysis.roofline.traffic`
reads these; the conventions are stated in :mod:`embedcalc.analysis.roofline`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction

from embedcalc.analysis.memory import kv_cache_bytes
from embedcalc.analysis.workload import Parallelism, Workload
from embedcalc.config.resolved import ResolvedShape


@dataclass(frozen=True)
class Lengths:
    """Per stack: query tokens per sequence m and key tokens n of self- and cross-attention, in one phase."""

    self_m: dict[str, int]
    self_n: dict[str, int]
    cross_n: int
    lookups: int  # tokens looked up in the token table per sequence
    self_cache_bytes: int | None = None  # decode: the self-attention KV cache read per step (all layers)
    index_cache_bytes: int = 0  # decode: the sparse layers' indexer keys read per step (all of them)


def prefill_lengths(config: ResolvedShape, w: Workload) -> Lengths:
    if config.architecture == "encoder-decoder":
        tgt = w.tgt_len if w.tgt_len is not None else w.seq_len
        m = {"encoder": w.seq_len, "decoder": tgt}
        return Lengths(m, dict(m), w.seq_len, w.seq_len + tgt)
    stack = "encoder" if config.architecture == "encoder" else "decoder"
    return Lengths({stack: w.seq_len}, {stack: w.seq_len}, 0, w.seq_len)


def decode_lengths(
    config: ResolvedShape, w: Workload, kv_len: int, kv_bytes: int | Fraction | None = None
) -> Lengths:
    """One query per sequence against ``kv_len`` cached tokens. The bytes read are the memory model's KV cache at
    that length (per-layer windows and chunks, latent attention's compressed cache) in the KV dtype, less an
    encoder-decoder's cross-attention part, which the cross cores read. A sparse layer's indexer reads all its
    cached keys and its core only the index_topk latent entries selected (DeepSeek-V3.2-Exp §2.2: the core's cost
    no longer grows with the context)."""
    self_bytes, _ = cache_bytes(config, w, kv_len, kv_bytes)
    element = w.activation_bytes if kv_bytes is None else kv_bytes
    unread, index = _sparse_reads(config, w, kv_len, element)
    read = self_bytes - unread - index + _borrowed_reads(config, w, kv_len, element)
    return Lengths({"decoder": 1}, {"decoder": kv_len}, w.seq_len, 1, read, index)


def _borrowed_reads(config: ResolvedShape, w: Workload, kv_len: int, element_bytes: int | Fraction) -> int:
    """Bytes of keys and values held by another layer or model that layers without a cache of their own read in one
    decode step, every sequence of the batch: a ``kv_shared`` layer attends to an earlier layer's cache (Gemma 3n's
    and Gemma 4's last num_kv_shared_layers read the last non-shared layer of their type), a ``kv_external`` one to
    the target model's (a drafter's: Gemma 4's assistant). Neither cache is the layer's own, so the memory model does
    not count it, but its ``kv_len`` tokens (at most the layer's window) are read all the same, at the layer's own
    KV heads and widths (those of the cache it reads)."""
    total = 0
    for block, layers in config.stack_plan("decoder").counts() if config.architecture != "encoder" else ():
        a = block.attention
        if a is None or not (a.kv_external or a.kv_shared):
            continue
        limit = a.cache_limit
        tokens = kv_len if limit is None else min(kv_len, limit)
        total += layers * tokens * a.num_kv_heads * (a.head_dim + a.value_head_dim)
    return int(w.batch_size * total * element_bytes)


def _sparse_reads(
    config: ResolvedShape, w: Workload, kv_len: int, element_bytes: int | Fraction
) -> tuple[int, int]:
    """(cached latent bytes the sparse layers' cores do not read, indexer key bytes their indexers read) in one
    decode step at ``kv_len`` cached tokens, every sequence of the batch."""
    unread = index = 0
    for block, layers in config.stack_plan("decoder").counts() if config.architecture != "encoder" else ():
        a = block.attention
        if a is None or a.kind != "sparse":
            continue
        unread += layers * max(kv_len - a.index_topk, 0) * (a.kv_lora_rank + a.qk_rope_head_dim)
        index += layers * kv_len * a.index_cache_width
    return int(w.batch_size * unread * element_bytes), int(w.batch_size * index * element_bytes)


def cache_bytes(
    config: ResolvedShape, w: Workload, kv_len: int, kv_bytes: int | Fraction | None = None
) -> tuple[int, int]:
    """(self-attention, cross-attention) KV cache bytes of the whole model (every TP rank's share together) with
    ``kv_len`` tokens cached per sequence: the memory model's :func:`kv_cache_bytes`, in the KV dtype."""
    # the whole model; per_device splits it
    at = replace(at_kv_len(config, w, kv_len), parallel=Parallelism())
    total = kv_cache_bytes(config, at)
    cross = 0
    if config.architecture == "encoder-decoder":
        cross = (
            2
            * w.batch_size
            * w.seq_len
            * config.resolved_decoder_layers
            * config.kv_dim
            * at.activation_bytes
        )
    scale = at.activation_bytes if kv_bytes is None else kv_bytes
    return int((total - cross) * scale // at.activation_bytes), int(cross * scale // at.activation_bytes)


def at_kv_len(config: ResolvedShape, w: Workload, n: int) -> Workload:
    """``w`` with ``n`` tokens in the decoder's cache and nothing to generate (a decode step's length)."""
    if config.architecture == "encoder-decoder":
        return replace(w, tgt_len=n, gen_tokens=0)
    return replace(w, seq_len=n, gen_tokens=0)


def prompt_len(config: ResolvedShape, w: Workload) -> int:
    """Tokens in the decoder's cache after prefill (the target prompt of an encoder-decoder)."""
    if config.architecture == "encoder-decoder":
        return w.tgt_len if w.tgt_len is not None else w.seq_len
    return w.seq_len
