"""The result types of the Python API (DESIGN.md §13) that have no home in a layer: :class:`Comparison` (several
analyses for one workload, what :func:`embedcalc.compare` returns) and :class:`Sweep` (the grid of
:func:`embedcalc.sweep`, its points as dicts). The functions that make them are in :mod:`embedcalc._api`; import
both through ``embedcalc``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from embedcalc.analysis.report import Analysis
from embedcalc.analysis.workload import Workload

if TYPE_CHECKING:  # numpy loads only with a sweep
    from embedcalc.analysis.sweep import SweepResult

__all__ = ["Comparison", "Sweep"]


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
        from embedcalc.render.sweep_output import result_json

        return result_json(self.result)
