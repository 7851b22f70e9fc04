"""The roofline: per component, FLOPs, bytes moved and the time bound they give on a device (DESIGN.md §10, §14).
The result types and conventions are in :mod:`.estimate` and the bytes each phase moves in :mod:`.traffic`; this
module re-exports the names other modules use from both. The largest batch and context that fit are a memory
question (:mod:`embedcalc.analysis.memory.capacity_search`); the times per phase, the bound beside the expected
time, are the time model's (:mod:`embedcalc.analysis.time.estimate`).
"""

from embedcalc.analysis.roofline.estimate import (
    ComponentTime,
    Efficiency,
    Phase,
    RooflineEstimate,
    Schedule,
    TimeModel,
)
from embedcalc.analysis.roofline.lengths import decode_lengths, prefill_lengths
from embedcalc.analysis.roofline.traffic import (
    Traffic,
    decode_step_flops,
    experts_reached,
    matmul_flops,
    phase_traffic,
    prefill_flops,
    weights_of,
)

__all__ = [
    "ComponentTime",
    "Efficiency",
    "Phase",
    "RooflineEstimate",
    "Schedule",
    "TimeModel",
    "Traffic",
    "decode_lengths",
    "decode_step_flops",
    "experts_reached",
    "matmul_flops",
    "phase_traffic",
    "prefill_flops",
    "prefill_lengths",
    "weights_of",
]
