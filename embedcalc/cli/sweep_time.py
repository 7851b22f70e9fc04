"""``sweep --hardware``: the roofline time of every valid point, by the per-config path (pydantic + analyze)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from embedcalc.analysis.report import analyze
from embedcalc.analysis.roofline import RooflineEstimate
from embedcalc.analysis.sweep import SweepError, SweepResult
from embedcalc.cli.hardware_options import TimeFlags, apply_time

MAX_TIMED_POINTS = 2_000


def sweep_times(
    result: SweepResult, overrides: list[str] | None, options: TimeFlags
) -> list[RooflineEstimate | None]:
    """Per point, its estimate (None for invalid points); a usage error past MAX_TIMED_POINTS valid points."""
    valid = int(result.valid.sum())
    if valid > MAX_TIMED_POINTS:
        raise SweepError(f"--hardware times each point: {valid:,} valid points is more than {MAX_TIMED_POINTS:,}; "
                         "narrow the axes", "too_many_timed_points")  # fmt: skip
    base = _load_base(result.target, overrides or [])
    columns = {a: result.axis_column(a).tolist() for a in result.axes}
    out: list[RooflineEstimate | None] = []
    for i in range(result.size):
        if not result.valid[i]:
            out.append(None)
            continue
        point = {a: int(values[i]) for a, values in columns.items()}
        config = base.config_at(point, tuple(point))
        w = result.workload
        workload = replace(
            w, batch_size=point.get("batch_size", w.batch_size), seq_len=point.get("seq_len", w.seq_len)
        )
        _, estimate = apply_time(analyze(result.target, config, workload), options)
        out.append(estimate)
    return out


def _load_base(target: str, overrides: list[str]) -> Any:
    """The sweep's base config (``load_base``), from wherever it lives: it is moving from analysis to the CLI."""
    import importlib

    for module in ("embedcalc.cli.sweep_load", "embedcalc.analysis.sweep"):
        try:
            load_base = importlib.import_module(module).load_base
        except (ImportError, AttributeError):
            continue
        return load_base(target, overrides)
    raise ImportError("embedcalc: no sweep loader (load_base) found")


def with_times(entry: dict[str, Any], times: list[RooflineEstimate | None]) -> dict[str, Any]:
    """The sweep's JSON result with a ``time`` object on each point (null for invalid points)."""
    for point, estimate in zip(entry["points"], times, strict=True):
        point["time"] = None if estimate is None else estimate.as_json()
    return entry


def labelled(
    result: SweepResult, times: list[RooflineEstimate | None], limit: int = 8
) -> list[tuple[str, Any]]:
    """(label, estimate) of up to ``limit`` valid points, evenly spread, for the plot and the table."""
    columns = {a: result.axis_column(a).tolist() for a in result.axes}
    valid = [i for i, e in enumerate(times) if e is not None]
    step = max(1, -(-len(valid) // limit))
    return [(", ".join(f"{a} {columns[a][i]}" for a in columns) or result.target, times[i])
            for i in valid[::step]]  # fmt: skip


def write_roofline_plot(result: SweepResult, times: list[RooflineEstimate | None], plot: Any) -> None:
    """Beside the seq-len plot, ``FILE.roofline.SUFFIX``: every component of up to 8 points on the roofline."""
    from embedcalc.cli import output
    from embedcalc.render.roofline_plot import plot_roofline, roofline_plot_path

    path = roofline_plot_path(plot)
    plot_roofline(labelled(result, times), path, f"{result.target}: roofline, {result.workload.dtype}")
    output.stderr.print(f"embedcalc: wrote {path}", soft_wrap=True, highlight=False, markup=False)


def print_time_table(result: SweepResult, times: list[RooflineEstimate | None], max_rows: int) -> None:
    from embedcalc.cli import output
    from embedcalc.render.roofline import sweep_time_table

    columns = {a: result.axis_column(a).tolist() for a in result.axes}
    rows = [([str(columns[a][i]) for a in columns], e) for i, e in enumerate(times[:max_rows])]
    output.stdout.print(sweep_time_table(result.target, list(columns), rows))
