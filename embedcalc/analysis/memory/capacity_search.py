"""Capacity and the KV cache dtype: the largest batch and context that fit a device's memory (or --max-memory),
searched on :func:`~embedcalc.analysis.memory.estimate_memory`, and the memory estimate with its KV cache held in
--kv-dtype (fp8, nvfp4, int8, bf16, fp16, fp32) instead of the activation dtype. The KV bytes are exact integers:
the activation-dtype count times the KV dtype's bytes per value (9/16 for nvfp4: config.dtypes.KV_ELEMENT_BYTES),
floored — exact because nvfp4 is given only to models whose cached vectors are whole 16-value blocks
(:func:`kv_dtype_problem`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any, Literal

from embedcalc.analysis.memory import MemoryEstimate, estimate_memory
from embedcalc.analysis.workload import Workload
from embedcalc.config.dtypes import BLOCK_FORMATS, FP4_KV_DTYPES, KV_ELEMENT_BYTES
from embedcalc.config.resolved import ResolvedShape


@dataclass(frozen=True)
class Capacity:
    """The largest batch and context that fit ``limit_bytes`` (the device's memory or --max-memory)."""

    limit_bytes: int
    limit_source: str
    max_batch_size: int | None  # None: not even batch 1 fits
    max_context: int | None
    context_limited_by: Literal["memory", "max_seq_len"] | None


def kv_element_bytes(w: Workload, kv_dtype: str | None) -> int | Fraction:
    """Bytes per cached value: the activations' without a KV dtype, else the KV dtype's (a fraction for nvfp4)."""
    return w.activation_bytes if kv_dtype is None else KV_ELEMENT_BYTES[kv_dtype]


def kv_scaled(activation_bytes: int, w: Workload, kv_dtype: str | None) -> int:
    """KV bytes counted in the activation dtype, held in ``kv_dtype`` instead (exact: module docstring)."""
    return int(activation_bytes * kv_element_bytes(w, kv_dtype) // w.activation_bytes)


def kv_dtype_problem(config: ResolvedShape, kv_dtype: str | None) -> str | None:
    """Why ``config``'s cache cannot be held in ``kv_dtype`` (None: it can). nvfp4 stores each cached K and V vector
    (MLA: the latent and its RoPE key) in blocks of 16 values: every such width must be a multiple of 16."""
    if kv_dtype not in FP4_KV_DTYPES:
        return None
    values = BLOCK_FORMATS[kv_dtype].block  # values of a cached vector sharing one scale
    for name, block in config.named_blocks.items():
        a = block.attention
        if a is None or a.kv_shared or a.kv_external:
            continue
        if a.latent:
            widths = {"kv_lora_rank": a.kv_lora_rank, "qk_rope_head_dim": a.qk_rope_head_dim}
        else:
            widths = {"head_dim": a.head_dim, "v_head_dim": a.v_head_dim or a.head_dim}
        if a.indexer:
            widths["index_head_dim"] = a.index_head_dim
        for field, width in widths.items():
            if width % values:
                return (f"--kv-dtype {kv_dtype} stores each cached vector in blocks of {values} values, but "
                        f"block {name!r} caches {field} = {width} values (not a multiple of {values}); "
                        "use --kv-dtype fp8")  # fmt: skip
    return None


def kv_adjusted_total(memory: MemoryEstimate, w: Workload, kv_dtype: str | None) -> int:
    """Per-device bytes with the KV cache held in ``kv_dtype`` (exact: the estimate's KV bytes are elements × the
    activation bytes)."""
    return memory.total_bytes - memory.kv_cache_bytes + kv_scaled(memory.kv_cache_bytes, w, kv_dtype)


def with_kv_dtype(memory: MemoryEstimate, w: Workload, kv_dtype: str | None) -> MemoryEstimate:
    """The memory estimate with its KV cache (and each stage's) held in ``kv_dtype``."""
    if kv_dtype is None:
        return memory
    stages = [replace(s, kv_cache_bytes=kv_scaled(s.kv_cache_bytes, w, kv_dtype)) for s in memory.stages]
    return replace(memory, kv_cache_bytes=kv_scaled(memory.kv_cache_bytes, w, kv_dtype), stages=stages)


_MAX_BATCH = 1 << 40


def largest(fits: Any, lo: int, hi: int) -> int:
    """The largest value in [lo, hi] with fits(value), given fits(lo) and a monotone fits (bisection)."""
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def capacity(
    config: ResolvedShape, w: Workload, limit_bytes: int, source: str, kv_dtype: str | None
) -> Capacity:
    """The largest batch (at this context) and the largest context (at this batch) within ``limit_bytes`` per
    device; the context is prompt + generated tokens, at most max_seq_len (with --cp, a whole number of 2·cp
    chunks)."""

    def fits(trial: Workload) -> bool:
        return kv_adjusted_total(estimate_memory(config, trial), trial, kv_dtype) <= limit_bytes

    batch: int | None = None
    if fits(replace(w, batch_size=1)):
        hi = 1
        while hi < _MAX_BATCH and fits(replace(w, batch_size=2 * hi)):
            hi *= 2
        batch = largest(lambda b: fits(replace(w, batch_size=b)), hi, min(2 * hi, _MAX_BATCH))
    extra = w.gen_tokens if config.architecture == "decoder" else 0
    # context parallelism splits a sequence into 2·cp equal chunks: the contexts searched are whole chunks
    unit = 2 * w.parallel.cp if w.parallel.cp > 1 else 1
    cap = (config.max_seq_len - extra) // unit
    context: int | None = None
    limited: Literal["memory", "max_seq_len"] | None = None
    if cap >= 1 and fits(replace(w, seq_len=unit)):
        if fits(replace(w, seq_len=cap * unit)):
            context, limited = cap * unit + extra, "max_seq_len"
        else:
            context = largest(lambda n: fits(replace(w, seq_len=n * unit)), 1, cap) * unit + extra
            limited = "memory"
    return Capacity(limit_bytes, source, batch, context, limited)
