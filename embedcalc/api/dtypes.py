"""``analyze --dtype all``: one model's memory in every dtype embedcalc counts, one row each, as accelerate's
``estimate-memory`` shows every dtype in one table: the weights, the largest layer (what ``device_map="auto"`` and
offloading need free on one device: :mod:`embedcalc.analysis.memory.largest`), the workload's inference memory and
the memory of a training step with AdamW on the same batch (mixed precision in the row's dtype; none for the
inference-only formats). Each figure is ``analyze``'s own for that dtype."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from embedcalc.analysis.checked import analyze_loaded
from embedcalc.analysis.memory.largest import LargestLayer, largest_layer
from embedcalc.analysis.workload import Workload
from embedcalc.config.dtypes import DTYPES
from embedcalc.errors import EmbedcalcError
from embedcalc.sources.loading import LoadedConfig

__all__ = ["DtypeRow", "MemoryByDtype", "memory_by_dtype"]


@dataclass(frozen=True)
class DtypeRow:
    """One dtype: its weights, largest layer, inference and training memory per device (None: it cannot run that
    way here, ``why`` says so)."""

    dtype: str
    weights_bytes: int | None = None
    largest_layer: LargestLayer | None = None
    inference_bytes: int | None = None
    training_bytes: int | None = None
    why: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"dtype": self.dtype, "weights_bytes": self.weights_bytes,
                "largest_layer": None if self.largest_layer is None else self.largest_layer.to_json(),
                "inference_total_bytes": self.inference_bytes, "training_total_bytes": self.training_bytes,
                "problems": self.why}  # fmt: skip


@dataclass(frozen=True)
class MemoryByDtype:
    """Every dtype's row for one target and workload (``results[]`` entry of ``analyze --dtype all``)."""

    target: str
    workload: Workload
    rows: list[DtypeRow]

    def to_json(self) -> dict[str, Any]:
        w = self.workload.as_dict()
        w.pop("dtype", None)
        w.pop("dtype_source", None)
        return {"target": self.target, "workload": w, "dtypes": [r.to_json() for r in self.rows]}


def _total(loaded: LoadedConfig, run: Workload) -> tuple[int, Any]:
    analysis = analyze_loaded(loaded, run)
    return analysis.memory.total_bytes, analysis


def memory_by_dtype(loaded: LoadedConfig, target: str, workload: Workload) -> MemoryByDtype:
    """``workload`` (inference, its batch and lengths) in each dtype of :data:`DTYPES`, and a training step of the
    same batch; a dtype that cannot run one of them gets the reason instead of the figure."""
    rows = []
    for dtype in DTYPES:
        try:
            run = replace(workload, dtype=dtype, dtype_source="flag", mode="inference")
            inference, analysis = _total(loaded, run)
        except EmbedcalcError as exc:
            rows.append(DtypeRow(dtype, why=[exc.message]))
            continue
        row = DtypeRow(dtype, analysis.memory.weights_bytes, largest_layer(analysis.config, run), inference)
        try:
            row = replace(row, training_bytes=_total(loaded, replace(run, mode="training", gen_tokens=0))[0])
        except EmbedcalcError as exc:
            row = replace(row, why=[f"training: {exc.message}"])
        rows.append(row)
    return MemoryByDtype(target, workload, rows)
