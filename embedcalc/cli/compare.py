"""``embedcalc compare TARGET TARGET...``: the same numbers side by side, one column per target."""

from __future__ import annotations

import csv
import io
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from embedcalc.cli import output
from embedcalc.cli.common import (
    CompareFormat,
    SetOption,
    check_plot_file,
    enforce_budget,
    handle_errors,
    plot_option,
)
from embedcalc.cli.hardware_options import TimeFlags
from embedcalc.cli.options import flags
from embedcalc.cli.workload_options import BudgetFlags, ParallelFlags, WorkloadFlags

if TYPE_CHECKING:
    from embedcalc.analysis.workload import Workload
    from embedcalc.api.results import AnalysisReport
    from embedcalc.errors import Problem


@handle_errors("compare")
@flags
def compare_command(
    targets: Annotated[list[str], typer.Argument(help="Two or more preset names or config files.")],
    run: WorkloadFlags,
    layout: ParallelFlags,
    limits: BudgetFlags,
    timing: TimeFlags,
    overrides: SetOption = None,
    plot: Annotated[
        Path | None,
        plot_option(
            "Also draw FLOPs (attention scores vs the rest) and memory against seq_len for every target, "
            "one colour each, crossovers marked (.png/.svg/.pdf; needs `pip install 'embedcalc[plot]'`)."
        ),
    ] = None,
    plot_seq_len: Annotated[
        str,
        typer.Option("--plot-seq-len", metavar="VALUES", help="seq_len values for --plot (list or range)."),
    ] = "64:16384:x2",
    format: Annotated[
        CompareFormat, typer.Option("--format", "-f", help="Output format.")
    ] = CompareFormat.table,
) -> None:
    """Params, FLOPs and memory of several configs side by side (--set applies to every target).

    Takes every workload, parallelism and budget option of `analyze`; a budget applies to each target.
    """
    if len(targets) < 2:
        raise typer.BadParameter("compare needs two or more targets; use `embedcalc analyze` for one",
                                 param_hint="'TARGETS...'")  # fmt: skip
    if plot is not None:
        check_plot_file(plot)  # as sweep: a usage error before any work
    from embedcalc.api.analyze import compare_reports

    workload = run.workload(layout)
    reports = compare_reports(targets, overrides, workload, timing.options(), limits.budget())
    for report in reports:
        output.warn(report.analysis.warnings, report.analysis.target)
    if plot is not None:
        _plot(targets, overrides, workload, plot, plot_seq_len)
    over = [p for r in reports for p in r.over_budget]
    _render(reports, format, compared_workload(workload, [r.analysis.workload for r in reports]), over)
    enforce_budget(over, json_emitted=format is CompareFormat.json)


def compared_workload(asked: Workload, analysed: list[Workload]) -> dict[str, Any]:
    """The workload of the compare JSON: the one analysed when every target ran in the same dtype, else the one
    asked with ``dtype`` and ``dtype_source`` ``per-result`` (each result names its own: targets default to their
    own dtypes)."""
    if len({(w.dtype, w.dtype_source) for w in analysed}) == 1:
        return analysed[0].as_dict()
    return asked.as_dict() | {"dtype": "per-result", "dtype_source": "per-result"}


def _render(
    reports: list[AnalysisReport], format: CompareFormat, workload: dict[str, Any], over: list[Problem]
) -> None:
    analyses = [r.analysis for r in reports]
    if format is CompareFormat.json:
        status = "error" if over else "ok"
        output.emit_json("compare", [r.to_json() for r in reports], workload, over, status)
        return
    from embedcalc.render.tables import compare_rows, compare_table

    if format is CompareFormat.table:
        output.stdout.print(compare_table(analyses))
        times = [r.time for r in reports if r.time is not None]
        if len(times) == len(reports):
            from embedcalc.render.roofline import compare_time_table

            output.stdout.print(compare_time_table(analyses, times))
        return
    rows = compare_rows(analyses)
    header = ["quantity", *(a.target for a in analyses)]
    if format is CompareFormat.markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" + "---:|" * len(analyses)]
        lines += ["| " + " | ".join([label.strip(), *cells]) + " |" for label, cells, _ in rows]
        sys.stdout.write("\n".join(lines) + "\n")
        return
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    for label, _, raw in rows:
        writer.writerow([label.strip(), *("" if v is None else v for v in raw)])
    sys.stdout.write(buffer.getvalue())


def _plot(
    targets: list[str], overrides: list[str] | None, workload: Workload, path: Path, values: str
) -> None:
    """One seq_len sweep per target, drawn together (points past a learned position table are left out)."""
    from embedcalc.analysis.sweep import AxisError, parse_axis
    from embedcalc.api.sweep import compare_curves
    from embedcalc.render.plot import plot_seq_len_curves, require_matplotlib

    try:
        seq_lens = parse_axis(values)
    except AxisError as exc:
        raise typer.BadParameter(str(exc), param_hint="'--plot-seq-len'") from None
    require_matplotlib()
    curves = compare_curves(targets, overrides, workload, seq_lens)
    # each target runs in its own dtype unless --dtype chose one: the title says one only when all agree
    dtypes = sorted({c.dtype for c in curves})
    if len(dtypes) > 1:
        curves = [replace(c, label=f"{c.label} ({c.dtype})") for c in curves]
    dtype = dtypes[0] if len(dtypes) == 1 else "each in its own dtype"
    title = f"compare: {dtype}, attention {workload.attention}, batch {workload.batch_size}"
    plot_seq_len_curves(curves, path, title)
    output.stderr.print(f"embedcalc: wrote {path}", soft_wrap=True, highlight=False, markup=False)
