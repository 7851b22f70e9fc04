"""Memory in bytes per device: the per-device estimate with its ZeRO and pipeline assembly (:mod:`.estimate`), the
inference terms (weights, KV cache, peak activations: :mod:`.inference`), the training terms (gradients, optimizer
state, saved activations: :mod:`.training`) and serving memory as inference servers hold it (:mod:`.serving`,
imported by its own path: ``analyze`` without serving options never loads it).

This module re-exports the names other modules use.
"""

from embedcalc.analysis.memory.estimate import MemoryEstimate, estimate_memory, memory_terms
from embedcalc.analysis.memory.inference import kv_cache_bytes, low_precision, stored_bytes, weight_bytes
from embedcalc.analysis.memory.training import mixed_precision

__all__ = [
    "MemoryEstimate",
    "estimate_memory",
    "kv_cache_bytes",
    "low_precision",
    "memory_terms",
    "mixed_precision",
    "stored_bytes",
    "weight_bytes",
]
