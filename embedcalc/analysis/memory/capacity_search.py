"""Capacity and the KV cache dtype: the largest batch and context that fit a device's memory (or --max-memory),
searched on :func:`~embedcalc.analysis.memory.estimate_memory`, and the memory estimate with its KV cache held in
--kv-dtype (fp8, int8, bf16, fp16, fp32) instead of the activation dtype.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

from embedcalc.analysis.memory import MemoryEstimate, estimate_memory
from embedcalc.analysis.workload import DTYPE_BYTES, Workload
from embedcalc.config.dtypes import KV_DTYPES
from embedcalc.config.resolved import ResolvedShape

KV_DTYPE_BYTES: dict[str, int] = {name: int(DTYPE_BYTES[name]) for name in KV_DTYPES}


@dataclass(frozen=True)
class Capacity:
    """The largest batch and context that fit ``limit_bytes`` (the device's memory or --max-memory)."""

    limit_bytes: int
    limit_source: str
    max_batch_size: int | None  # None: not even batch 1 fits
    max_context: int | None
    context_limited_by: Literal["memory", "max_seq_len"] | None


def kv_element_bytes(w: Workload, kv_dtype: str | None) -> int:
    return w.activation_bytes if kv_dtype is None else KV_DTYPE_BYTES[kv_dtype]


def kv_adjusted_total(memory: MemoryEstimate, w: Workload, kv_dtype: str | None) -> int:
    """Per-device bytes with the KV cache held in ``kv_dtype`` (exact: the estimate's KV bytes are elements × the
    activation bytes)."""
    kv = memory.kv_cache_bytes * kv_element_bytes(w, kv_dtype) // w.activation_bytes
    return memory.total_bytes - memory.kv_cache_bytes + kv


def with_kv_dtype(memory: MemoryEstimate, w: Workload, kv_dtype: str | None) -> MemoryEstimate:
    """The memory estimate with its KV cache (and each stage's) held in ``kv_dtype``."""
    if kv_dtype is None:
        return memory
    scale, per = kv_element_bytes(w, kv_dtype), w.activation_bytes
    stages = [replace(s, kv_cache_bytes=s.kv_cache_bytes * scale // per) for s in memory.stages]
    return replace(memory, kv_cache_bytes=memory.kv_cache_bytes * scale // per, stages=stages)


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
    device; the context is prompt + generated tokens, at most max_seq_len."""

    def fits(trial: Workload) -> bool:
        return kv_adjusted_total(estimate_memory(config, trial), trial, kv_dtype) <= limit_bytes

    batch: int | None = None
    if fits(replace(w, batch_size=1)):
        hi = 1
        while hi < _MAX_BATCH and fits(replace(w, batch_size=2 * hi)):
            hi *= 2
        batch = largest(lambda b: fits(replace(w, batch_size=b)), hi, min(2 * hi, _MAX_BATCH))
    extra = w.gen_tokens if config.architecture == "decoder" else 0
    cap = config.max_seq_len - extra
    context: int | None = None
    limited: Literal["memory", "max_seq_len"] | None = None
    if cap >= 1 and fits(replace(w, seq_len=1)):
        if fits(replace(w, seq_len=cap)):
            context, limited = cap + extra, "max_seq_len"
        else:
            context = largest(lambda n: fits(replace(w, seq_len=n)), 1, cap) + extra
            limited = "memory"
    return Capacity(limit_bytes, source, batch, context, limited)
