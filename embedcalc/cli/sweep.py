"""``embedcalc sweep TARGET``: params, FLOPs and memory over a grid of shapes and workloads; the crossover; plots."""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from embedcalc.cli import output
from embedcalc.cli.common import SetOption, check_plot_file, handle_errors, plot_option
from embedcalc.cli.hardware_options import TimeFlags
from embedcalc.cli.options import bounded_int, flags, only
from embedcalc.cli.workload_options import WorkloadFlags
from embedcalc.config.limits import INT_BOUND, MAX_INT_DIGITS
from embedcalc.errors import ConfigError, EmbedcalcError, ExitCode, Problem

if TYPE_CHECKING:  # numpy and the grid load only when a sweep runs, not for `embedcalc --help` or `analyze`
    from embedcalc.analysis.roofline import RooflineEstimate
    from embedcalc.analysis.sweep import SweepResult
    from embedcalc.api.bench import MeasureRequest

# The axes in grid order (embedcalc.analysis.sweep.AXES; a test keeps the two equal).
AXES = ("embed_dim", "num_heads", "num_layers", "ffn_dim", "batch_size", "seq_len")

# The grid is bounded by what each output costs per point (issue 24: one count refused a 110,592-point grid that
# the table path answers in 1.4 s of CPU). Measured here, gpt2 over 110,592 points: the table (the vectorised grid
# and the first --max-rows rows) 1.4 s and 94 MB in all, ~13 us and ~0.5 KiB a point; JSON 11.5 s and 876 MB, ~0.1 ms
# and ~7.5 KiB a point (every point is an object); CSV writes the same rows. The default lets each answer within
# about a second of CPU per 10^5 points and under 1 GiB; --max-points raises it up to the hard limit (about 2 GiB).
DEFAULT_MAX_POINTS = {"table": 1_000_000, "json": 100_000, "csv": 100_000}
HARD_MAX_POINTS = {"table": 2_000_000, "json": 250_000, "csv": 250_000}
BYTES_PER_POINT = {"table": 512, "json": 7_680, "csv": 7_680}


class SweepFormat(StrEnum):
    table = "table"
    json = "json"
    csv = "csv"


@dataclass(frozen=True)
class AxisValues:
    """The parsed values of one axis flag."""

    values: tuple[int, ...]


def _axis_parser(value: str) -> AxisValues:
    from embedcalc.analysis.sweep import AxisError, parse_axis

    try:
        return AxisValues(parse_axis(value))
    except AxisError as exc:
        raise typer.BadParameter(str(exc)) from None


def _axis_option(flag: str, what: str, example: str, *short: str) -> Any:
    return typer.Option(flag, *short, parser=_axis_parser, metavar="VALUES", help=f"{what}, e.g. {example}.")


SeqAxis = Annotated[
    AxisValues | None,
    _axis_option("--seq-len", "Tokens per sequence (encoder side)", "128,512,2048 or 64:16384:x2", "-n"),
]
BatchAxis = Annotated[
    AxisValues | None, _axis_option("--batch-size", "Sequences per batch", "1,8,32 or 1:64:x2", "-b")
]
EmbedAxis = Annotated[AxisValues | None, _axis_option("--embed-dim", "Model width", "384:12288:+384")]
HeadsAxis = Annotated[AxisValues | None, _axis_option("--num-heads", "Query heads", "8,12,16")]
LayersAxis = Annotated[
    AxisValues | None, _axis_option("--num-layers", "Blocks (encoder-decoder: encoder blocks)", "1:96:+1")
]
FfnAxis = Annotated[AxisValues | None, _axis_option("--ffn-dim", "Inner FFN width", "2048:4096:+512")]


@handle_errors("sweep")
@flags
def sweep_command(
    target: Annotated[str, typer.Argument(help="Preset name or config file (YAML/JSON).")],
    seq_len: SeqAxis = None,
    batch_size: BatchAxis = None,
    embed_dim: EmbedAxis = None,
    num_heads: HeadsAxis = None,
    num_layers: LayersAxis = None,
    ffn_dim: FfnAxis = None,
    *,
    # --batch-size and --seq-len are axes here; a point not on them has Workload's defaults (1 and 128)
    run: Annotated[
        WorkloadFlags, only("tgt_len", "dtype", "mode", "attention", "optimizer", "recompute", "gen_tokens")
    ],
    timing: TimeFlags,
    overrides: SetOption = None,
    format: Annotated[SweepFormat, typer.Option("--format", "-f", help="Output format.")] = SweepFormat.table,
    plot: Annotated[
        Path | None,
        plot_option(
            "Also draw FLOPs (attention scores vs the rest) and memory against --seq-len on log axes, the "
            "crossover marked, to FILE (.png, .svg, .pdf; needs matplotlib: pip install 'embedcalc[plot]')."
        ),
    ] = None,
    max_rows: Annotated[int, typer.Option("--max-rows", min=1, help="Table format: points shown.")] = 50,
    measure: Annotated[
        bool,
        typer.Option(
            "--measure",
            help="Also time real forward passes at each --seq-len (torch) with and without the attention core "
            "and show the measured attention/rest split and crossover beside the prediction.",
        ),
    ] = False,
    device: Annotated[str, typer.Option("--device", help="With --measure: auto, cpu or cuda.")] = "auto",
    repeat: Annotated[
        int, typer.Option("--repeat", min=1, help="With --measure: timed pairs per point.")
    ] = 3,
    max_points: Annotated[
        int | None,
        typer.Option(
            "--max-points",
            min=1,
            callback=bounded_int,
            help="Refuse (exit 2) a grid of more points than this, before building it. Default by the output's cost "
            "per point: 1,000,000 for the table (~0.5 KiB a point), 100,000 for JSON and CSV (~7.5 KiB); at most "
            "2,000,000 and 250,000.",
        ),
    ] = None,
) -> None:
    """Cost over a grid: each axis flag takes a list 128,256,512, an arithmetic range 384:12288:+384 or a
    geometric one 64:16384:x2 (bounds inclusive); several axes form their cartesian product.

    Each point is TARGET with the swept fields set as by --set (a written ffn_dim stays fixed while --embed-dim
    varies; --set ffn_dim=null makes it 4 × embed_dim). Points that make an invalid config or workload are listed
    with the reason. Per point: params, forward FLOPs split into attention scores (Q·Kᵀ, A·V) and the rest,
    memory for --mode (both the inference and training totals beside it), and the crossover seq_len n* where one
    layer's score FLOPs equal its projection + FFN FLOPs. The grid is evaluated with numpy, exactly (int64 where
    it provably cannot overflow, else Python ints, with a note). --seq-len defaults to 128, --batch-size to 1.
    """
    given = {
        "seq_len": seq_len,
        "batch_size": batch_size,
        "embed_dim": embed_dim,
        "num_heads": num_heads,
        "num_layers": num_layers,
        "ffn_dim": ffn_dim,
    }
    axes = {a: v.values for a in AXES if (v := given[a]) is not None}
    _check_grid_request(axes, max_points, format.value)
    workload = run.workload()
    if plot is not None:
        _check_plot_request(plot, axes, format)
    measured = _measure_request(axes, device, repeat) if measure else None
    from embedcalc.api.sweep import sweep_report

    report = sweep_report(target, overrides, axes, workload, timing.options(), measured)
    result, times = report.result, report.times
    _report_notes(result)
    if plot is not None:
        _write_plot(result, plot)
        if times is not None:
            _write_roofline_plot(result, times, plot)
    if format is SweepFormat.json:
        from embedcalc.analysis.sweep import workload_json

        output.emit_json(
            "sweep",
            [report.to_json()],
            workload_json(result),
            axes={a: list(v) for a, v in result.axes.items()},
        )
    elif format is SweepFormat.csv:
        from embedcalc.render.sweep_output import write_csv

        write_csv(result, sys.stdout)
        sys.stdout.flush()
    else:
        _print_tables(result, max_rows)
        if times is not None:
            _print_time_table(result, times, max_rows)
        if report.measured:
            from embedcalc.render.tables import measure_table

            output.stdout.print(measure_table(target, report.measured))


# --- checks and notes ---------------------------------------------------------------------------------------------


def _check_grid_request(axes: dict[str, tuple[int, ...]], max_points: int | None, fmt: str) -> None:
    """Size the grid before it is built, by the output's cost per point (module constants): exit 2 with its size,
    the memory it would take and the flag to raise the limit; every axis value within the digit bound that config
    values have."""
    for axis, values in axes.items():
        if values and max(values) >= INT_BOUND:
            raise typer.BadParameter(
                f"values have at most {MAX_INT_DIGITS} digits (10^{MAX_INT_DIGITS} is beyond any model size)",
                param_hint=f"'--{axis.replace('_', '-')}'",
            )
    size = math.prod(len(v) for v in axes.values())
    hard = HARD_MAX_POINTS[fmt]
    limit = min(max_points, hard) if max_points is not None else DEFAULT_MAX_POINTS[fmt]
    if size <= limit:
        return
    dims = " x ".join(f"--{a.replace('_', '-')} {len(v):,}" for a, v in axes.items())
    need = size * BYTES_PER_POINT[fmt] / 2**30
    if size > hard:
        fix = "narrow an axis" + (" or use --format table (~0.5 KiB a point)" if fmt != "table" else "")
        why = f"more than the {hard:,} a {fmt} sweep holds (it would need about {need:,.1f} GiB); {fix}"
    else:
        shown = "the default" if max_points is None else "--max-points"
        why = f"more than {shown} {limit:,} for --format {fmt} (about {need:,.2f} GiB); narrow an axis or raise the " \
              f"limit with --max-points {size}"  # fmt: skip
    message = f"the grid has {size:,} points ({dims}), {why}"
    raise EmbedcalcError(message, ExitCode.USAGE, [Problem("--max-points", message, "grid_too_large")],
                         "grid_too_large")  # fmt: skip


def _check_plot_request(plot: Path, axes: dict[str, tuple[int, ...]], format: SweepFormat) -> None:
    from embedcalc.render.plot import MAX_CURVES, require_matplotlib

    check_plot_file(plot)
    if len(axes.get("seq_len", ())) < 2:
        raise typer.BadParameter(
            "plots are against seq_len: give --seq-len with at least two values", param_hint="'--plot'"
        )
    curves = 1
    for axis, values in axes.items():
        curves *= len(values) if axis != "seq_len" else 1
    if curves > MAX_CURVES:
        raise typer.BadParameter(
            f"one line per combination of the other axes: {curves} is more than {MAX_CURVES}; narrow them",
            param_hint="'--plot'",
        )
    require_matplotlib()  # exit 4 with the install command (handle_errors reports it)


def _measure_request(axes: dict[str, tuple[int, ...]], device: str, repeat: int) -> MeasureRequest:
    """``--measure`` times one model over --seq-len: the other axes single-valued, a device this machine has."""
    others = [a for a, v in axes.items() if a != "seq_len" and len(v) > 1]
    if "seq_len" not in axes or others:
        raise typer.BadParameter(
            "--measure times one model over --seq-len: give --seq-len values and at most one value for "
            f"{', '.join(others) or 'the other axes'}",
            param_hint="'--measure'",
        )
    from embedcalc.api.bench import MeasureRequest
    from embedcalc.api.torch_env import require_torch
    from embedcalc.cli.torch_env import require_device

    require_torch()
    require_device(device)  # before any work: cuda without CUDA is exit 4, as in bench
    return MeasureRequest(device, repeat, output.progress)


def _report_notes(result: SweepResult) -> None:
    output.warn(result.warnings, result.target)
    if result.grid is not None and result.grid.method == "python-int":
        output.stderr.print(
            f"embedcalc: note: values on this grid may reach 2**{result.grid.bound.bit_length()}, beyond what int64 "
            "holds exactly; evaluating it with Python integers (exact, slower)",
            soft_wrap=True,
        )
    invalid = result.size - int(result.valid.sum())
    if invalid:
        codes = sorted({r.code for r in result.rules if r.failed.any()})
        output.stderr.print(
            f"embedcalc: note: {invalid:,} of {result.size:,} points are invalid "
            f"({', '.join(codes)}); they are listed with the reason",
            soft_wrap=True,
        )


def _write_plot(result: SweepResult, path: Path) -> None:
    from embedcalc.analysis.sweep import seq_len_curves
    from embedcalc.render.plot import plot_seq_len_curves

    if not result.valid.any():
        codes = ", ".join(sorted({r.code for r in result.rules if r.failed.any()}))
        message = f"--plot: nothing to draw, all {result.size:,} points are invalid ({codes})"
        raise ConfigError(message, [Problem("--plot", message, "nothing_to_plot")], "nothing_to_plot")
    w = result.workload
    title = f"{result.target}: {w.dtype}, attention {w.attention}, --mode {w.mode}"
    plot_seq_len_curves(seq_len_curves(result), path, title)
    output.stderr.print(f"embedcalc: wrote {path}", soft_wrap=True, highlight=False, markup=False)


def _labelled(
    result: SweepResult, times: list[RooflineEstimate | None], limit: int = 8
) -> list[tuple[str, Any]]:
    """(label, estimate) of up to ``limit`` valid points, evenly spread, for the plot and the table."""
    columns = {a: result.axis_column(a).tolist() for a in result.axes}
    valid = [i for i, e in enumerate(times) if e is not None]
    step = max(1, -(-len(valid) // limit))
    return [(", ".join(f"{a} {columns[a][i]}" for a in columns) or result.target, times[i])
            for i in valid[::step]]  # fmt: skip


def _write_roofline_plot(result: SweepResult, times: list[RooflineEstimate | None], plot: Path) -> None:
    """Beside the seq-len plot, ``FILE.roofline.SUFFIX``: every component of up to 8 points on the roofline."""
    from embedcalc.render.roofline_plot import plot_roofline, roofline_plot_path

    path = roofline_plot_path(plot)
    plot_roofline(_labelled(result, times), path, f"{result.target}: roofline, {result.workload.dtype}")
    output.stderr.print(f"embedcalc: wrote {path}", soft_wrap=True, highlight=False, markup=False)


# --- table --------------------------------------------------------------------------------------------------------


def _print_tables(result: SweepResult, max_rows: int) -> None:
    from embedcalc.analysis.sweep import seq_len_curves
    from embedcalc.render.plot import score_share_table, sweep_table

    output.stdout.print(sweep_table(result, max_rows))
    if len(result.axes.get("seq_len", ())) >= 2:
        curves = seq_len_curves(result)
        for curve in curves[:4]:
            output.stdout.print(score_share_table(curve))
        if len(curves) > 4:
            output.stderr.print(
                f"embedcalc: note: score-share charts for the first 4 of {len(curves)} "
                "combinations of the other axes; --plot FILE draws up to 8",
                soft_wrap=True,
            )


def _print_time_table(result: SweepResult, times: list[RooflineEstimate | None], max_rows: int) -> None:
    from embedcalc.render.roofline import sweep_time_table

    columns = {a: result.axis_column(a).tolist() for a in result.axes}
    rows = [([str(columns[a][i]) for a in columns], e) for i, e in enumerate(times[:max_rows])]
    output.stdout.print(sweep_time_table(result.target, list(columns), rows))


def __getattr__(name: str) -> Any:
    """The output writers live in :mod:`embedcalc.render.sweep_output` (imported lazily, with numpy)."""
    if name in ("CSV_COLUMNS", "result_csv", "result_json", "write_csv", "workload_json"):
        from embedcalc.render import sweep_output

        return getattr(sweep_output, name)
    raise AttributeError(name)
