"""The result types of the API that have no home in a lower layer: :class:`Comparison` (several analyses for one
workload, :func:`embedcalc.compare`), :class:`Sweep` (the grid of :func:`embedcalc.sweep`, its points as dicts) and
:class:`AnalysisReport` (an analysis with its time estimate and budget verdict: ``embedcalc analyze``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from embedcalc.analysis.report import Analysis
from embedcalc.analysis.workload import Workload
from embedcalc.errors import Problem

if TYPE_CHECKING:  # numpy loads only with a sweep, the roofline model only with time
    from embedcalc.analysis.memory.serving import ServingMemory
    from embedcalc.analysis.roofline import RooflineEstimate
    from embedcalc.analysis.sweep import SweepResult
    from embedcalc.api.finetune import FinetuneResult

__all__ = ["AnalysisReport", "Comparison", "Sweep"]


@dataclass(frozen=True)
class Comparison:
    """Several configs analysed for one workload, in the order given (``embedcalc compare``)."""

    results: tuple[Analysis, ...]
    workload: Workload

    def __iter__(self) -> Iterator[Analysis]:
        return iter(self.results)

    def __len__(self) -> int:
        return len(self.results)

    def __getitem__(self, index: int) -> Analysis:
        return self.results[index]

    def to_json(self) -> list[dict[str, Any]]:
        """The ``results`` list of ``embedcalc compare --format json``: one entry per config."""
        return [a.to_json() for a in self.results]


@dataclass(frozen=True)
class Sweep:
    """Every point of a sweep (``embedcalc sweep``): ``points`` as dicts, the crossover, and the raw grid."""

    result: SweepResult

    @property
    def target(self) -> str:
        return self.result.target

    @property
    def crossover_seq_len(self) -> int | float | None:
        """n* of the config as given: the seq_len where one layer's score FLOPs equal its projections + FFN."""
        return self.result.crossover_seq_len

    @property
    def points(self) -> list[dict[str, Any]]:
        """One dict per point (the swept values, ``valid``, ``params``/``flops``/``memory``, ``problems``)."""
        points: list[dict[str, Any]] = self.to_json()["points"]
        return points

    def to_json(self) -> dict[str, Any]:
        """The ``results[]`` entry of ``embedcalc sweep --format json`` (DESIGN.md §5)."""
        from embedcalc.analysis.sweep import result_json

        return result_json(self.result)


@dataclass(frozen=True)
class AnalysisReport:
    """One analysed target with what ``embedcalc analyze`` adds: its time estimate and serving memory (on the
    analysis, as :func:`embedcalc.analyze` returns them), the fine-tune, and one problem per budget limit it
    exceeds."""

    analysis: Analysis
    over_budget: list[Problem] = field(default_factory=list)
    finetune: FinetuneResult | None = None  # --peft / --freeze

    @property
    def time(self) -> RooflineEstimate | None:
        """The time estimate (None unless a device or a memory limit was given)."""
        return self.analysis.time

    @property
    def serving(self) -> ServingMemory | None:
        """The serving memory (--concurrency / --memory-utilization), or None."""
        return self.analysis.serving

    def to_json(self) -> dict[str, Any]:
        """The ``results[]`` entry of ``embedcalc analyze --format json``: the analysis (with ``time`` and
        ``memory.serving`` when asked for; with a fine-tune, ``finetune`` and the memory keys of the fine-tune's
        device memory)."""
        out = self.analysis.to_json()
        if self.finetune is not None:
            out["finetune"] = self.finetune.to_json()
            out["memory"] |= self.finetune.memory.device_kinds()
        return out
