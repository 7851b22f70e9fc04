"""The largest layer: the most weight bytes that must sit on one device together when a model is placed or
streamed layer by layer.

accelerate's ``estimate-memory`` reports it beside the total ("Largest Layer"): ``device_map="auto"`` places whole
modules that must not be split (a decoder layer, the embedding) on one device, and offloading streams them one at a
time, so the largest is the least free memory either needs (accelerate's ``calculate_maximum_sizes``). Here a unit
is one layer of a block kind (every tensor of that block, its experts included) or a tensor outside the layers
(the token embedding, an untied LM head, a final norm), each in the bytes ``workload.dtype`` stores it in
(:func:`~embedcalc.analysis.memory.inference.stored_bytes`: a quantized format's scales included, the layers it
leaves in the activation dtype too).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from embedcalc.analysis.memory.inference import stored_bytes
from embedcalc.analysis.params import param_tensors
from embedcalc.analysis.workload import Workload
from embedcalc.config.resolved import ResolvedShape


@dataclass(frozen=True)
class LargestLayer:
    """The largest unit (``name``: ``decoder layer (block default)`` or a tensor's key), its parameters and bytes."""

    name: str
    params: int
    bytes: int

    def to_json(self) -> dict[str, int | str]:
        return {"name": self.name, "params": self.params, "bytes": self.bytes}


def largest_layer(config: ResolvedShape, workload: Workload) -> LargestLayer:
    """The unit of ``config`` with the most weight bytes in ``workload.dtype`` (ties: the first in model order)."""
    units: dict[str, list[int]] = {}
    for t in param_tensors(config):
        if t.per_layer:
            name, copies = f"{t.stack} layer (block {t.block})", t.per_layer_copies
        else:
            name, copies = t.key, int(t.copies)
        unit = units.setdefault(name, [0, 0])
        unit[0] += int(prod(t.shape)) * copies
        unit[1] += int(stored_bytes(t.key, t.shape, copies, workload, config.quantized))
    name, (params, size) = max(units.items(), key=lambda item: item[1][1])
    return LargestLayer(name, params, size)
