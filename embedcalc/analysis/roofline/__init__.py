"""The roofline: per component, FLOPs, bytes moved and the time bound they give on a device (DESIGN.md §10, §14).
The result types and conventions are in :mod:`.estimate`, the bytes each phase moves in :mod:`.traffic`, the
largest batch and context that fit and the KV cache dtype in :mod:`.capacity_search`, and the times (the bound and
the expected time) in :mod:`.timing`.

This module re-exports the names other modules use from the first three. :mod:`.timing` is imported by its own
path: it imports the expected-time model (``analysis/time_*.py``), which imports the result types from here.
"""

from embedcalc.analysis.roofline.capacity_search import (
    KV_DTYPE_BYTES,
    capacity,
    kv_adjusted_total,
    largest,
    with_kv_dtype,
)
from embedcalc.analysis.roofline.estimate import (
    ComponentTime,
    Efficiency,
    Phase,
    RooflineEstimate,
    Schedule,
    TimeModel,
)
from embedcalc.analysis.roofline.traffic import (
    Traffic,
    decode_lengths,
    decode_step_flops,
    experts_reached,
    matmul_flops,
    phase_traffic,
    prefill_lengths,
    weights_of,
)

__all__ = [
    "KV_DTYPE_BYTES",
    "ComponentTime",
    "Efficiency",
    "Phase",
    "RooflineEstimate",
    "Schedule",
    "TimeModel",
    "Traffic",
    "capacity",
    "decode_lengths",
    "decode_step_flops",
    "experts_reached",
    "kv_adjusted_total",
    "largest",
    "matmul_flops",
    "phase_traffic",
    "prefill_lengths",
    "weights_of",
    "with_kv_dtype",
]
