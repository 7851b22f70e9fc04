"""How the benchmarks judge a prediction against a published figure, written once for all of them.

A ratio here is a time ratio, predicted time / published time (> 1: the prediction is slower than the run); the
scripts turn throughputs into it (published / predicted). The summary of a set of ratios is its median |ratio − 1|,
its worst max(r, 1 / r) and how many lie within 1.5× either way. ``python benchmarks/bench_*.py`` finds this module
beside the script (the script's folder is on ``sys.path``)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

WITHIN = 1.5


def median_error(ratios: Sequence[float]) -> float:
    """The median |ratio − 1|."""
    return statistics.median(abs(r - 1) for r in ratios)


def worst(ratios: Sequence[float]) -> float:
    """The largest max(r, 1 / r)."""
    return max(max(r, 1 / r) for r in ratios)


def within(ratios: Sequence[float]) -> int:
    """How many ratios lie within 1.5× either way."""
    return sum(1 / WITHIN <= r <= WITHIN for r in ratios)


def summary(name: str, ratios: Sequence[float], width: int = 16) -> str:
    """One line: the set's size, median |error|, worst ratio and count within 1.5×."""
    return (f"{name:<{width}} {len(ratios):>4} rows  median |error| {100 * median_error(ratios):5.1f}%  "
            f"worst {worst(ratios):.2f}x  within 1.5x {within(ratios)}/{len(ratios)}")  # fmt: skip


def tp_row(result: Any, tp: int) -> Any:
    """The one row of a ``plan`` result that is TP ``tp`` on a single replica (no PP, EP or disaggregation): the
    layout a published run names."""
    [row] = [r for r in result.rows if r.layout.tp == tp and r.layout.replicas == 1 and r.layout.pp == 1
             and r.layout.ep == 1 and r.layout.disaggregated is None]  # fmt: skip
    return row


def ep_row(result: Any, ranks: int) -> Any:
    """The one row of a ``plan`` result that is attention DP ``ranks`` · EP ``ranks`` on a single replica (TP 1,
    no PP or disaggregation): the layout of a run with ``enable_attention_dp`` and ``--ep ranks``."""
    [row] = [r for r in result.rows if r.layout.dp == ranks and r.layout.ep == ranks and r.layout.tp == 1
             and r.layout.replicas == 1 and r.layout.pp == 1 and r.layout.disaggregated is None]  # fmt: skip
    return row
