"""Sweeps of ``embedcalc sweep`` and ``compare --plot``: the cartesian grid of points with their validity and the
seq-len curves (:mod:`.points`), the vectorised validity rules (:mod:`.rules`), axis parsing (:mod:`.axes`), the
per-config reference path the grid is tested against (:mod:`.reference`) and the DESIGN.md §5 JSON of a sweep
(:mod:`.json_output`).

This module re-exports the names other modules use. Importing it loads numpy: the CLI imports it only inside the
commands that sweep.
"""

from embedcalc.analysis.sweep.axes import AxisError, axis_values, parse_axis
from embedcalc.analysis.sweep.json_output import MEMORY_COLUMNS, result_json, workload_json
from embedcalc.analysis.sweep.points import (
    AXES,
    CONFIG_AXES,
    SeqLenCurve,
    SweepBase,
    SweepError,
    SweepResult,
    seq_len_curves,
    sweep_target,
)
from embedcalc.analysis.sweep.reference import evaluate_point
from embedcalc.analysis.sweep.rules import FLAGS

__all__ = [
    "AXES",
    "CONFIG_AXES",
    "FLAGS",
    "MEMORY_COLUMNS",
    "AxisError",
    "SeqLenCurve",
    "SweepBase",
    "SweepError",
    "SweepResult",
    "axis_values",
    "evaluate_point",
    "parse_axis",
    "result_json",
    "seq_len_curves",
    "sweep_target",
    "workload_json",
]
