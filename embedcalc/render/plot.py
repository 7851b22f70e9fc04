"""Sweep renderings: rich tables for the terminal, and seq-len plots (PNG, SVG or PDF) with matplotlib.

matplotlib is an optional extra (``pip install 'embedcalc[plot]'``) and is imported only when a plot is drawn,
through its object-oriented API (no pyplot, no global backend switch). Plot files are written atomically: to a
temporary file in the target directory, then ``os.replace``; on any failure the temporary file is removed and
an existing file of that name is left as it was.
"""

from __future__ import annotations

import contextlib
import math
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from rich.markup import escape
from rich.table import Table

from embedcalc.analysis.sweep import CONFIG_AXES, FLAGS, SeqLenCurve, SweepResult
from embedcalc.errors import EmbedcalcError, ExitCode, UnsupportedEnvironmentError
from embedcalc.render import units
from embedcalc.render.fit import FitTable

PLOT_INSTALL = "pip install 'embedcalc[plot]'"
PLOT_FORMATS = ("png", "svg", "pdf")
MAX_CURVES = 8
_BAR_WIDTH = 30


# --- terminal -----------------------------------------------------------------------------------------------------


def _cell(value: Any, fmt: Callable[[Any], str]) -> str:
    return "—" if value is None else fmt(value)


def sweep_table(result: SweepResult, max_rows: int) -> Table:
    """The first ``max_rows`` points: swept values, params, FLOPs with the score share, memory, validity.

    At a narrow terminal the swept values share one wrapped "point" column (see :class:`FitTable`)."""
    w = result.workload
    crossover = (
        "" if result.crossover_seq_len is None else f"; crossover n* = {result.crossover_seq_len} tokens"
    )
    valid = int(result.valid.sum())
    rows = min(result.size, max_rows)
    axes = list(result.axes)
    title = (
        f"Sweep — {escape(result.target)}: {result.size:,} points, {valid:,} valid; {w.dtype}, attention "
        f"{w.attention}{crossover}"
    )
    caption = (
        "FLOPs: forward, 2 per MAC, matmuls only, full n×n scores; ★ share = attention scores (Q·Kᵀ, A·V) "
        "/ forward. Memory: inference (weights + KV cache + peak activations) and training (+ gradients, "
        "optimizer, saved activations)."
        + (
            f" Showing {max_rows:,} of {result.size:,} points; --format csv or json lists all."
            if result.size > max_rows
            else ""
        )
    )
    values = ["params", "forward FLOPs", "★ share", "inference", "training"]
    if set(CONFIG_AXES) & set(axes):
        values.append("n*")  # per point: a config axis moves the crossover
    show_problems = not bool(result.valid[:rows].all())
    if show_problems:
        caption += _problem_legend(result, rows)
    drop = ("training", "★ share")  # narrow terminals: --format csv or json has every column
    narrow = FitTable(title=title, caption=caption, title_justify="left", drop=drop, keep=1)
    narrow.add_column("point")
    # as wide as the title where the terminal allows, so that "crossover n* = ..." stays on its line
    table = FitTable(
        title=title, caption=caption, title_justify="left", drop=drop, narrow=narrow, min_width=len(title)
    )
    for axis in axes:
        table.add_column(FLAGS[axis].lstrip("-"), justify="right", whole=True)
    for part in (table, narrow):
        for name in values:
            part.add_column(name, justify="right", whole=True)
        if show_problems:
            part.add_column("problem")
    for swept, cells, style in _sweep_rows(result, rows, "n*" in values):
        table.add_row(*swept, *cells, style=style)
        point = " ".join(f"{FLAGS[a].lstrip('-')}={v}" for a, v in zip(axes, swept, strict=True))
        narrow.add_row(point, *cells, style=style)
    return table


def _sweep_rows(
    result: SweepResult, rows: int, per_point_crossover: bool
) -> Iterator[tuple[list[str], list[str], str | None]]:
    """(swept values, value cells with the problem cell if any point shown is invalid, row style) per point."""
    axes = list(result.axes)
    axis_values = {a: result.axis_column(a)[:rows].tolist() for a in axes}
    crossover_col = result.crossover_column()[:rows].tolist()
    show_problems = not bool(result.valid[:rows].all())
    grid = result.grid
    columns: dict[str, list[Any]] = {}
    if grid is not None:
        for key in (
            "params",
            "flops_forward",
            "flops_attention_scores",
            "inference_total_bytes",
            "training_total_bytes",
        ):
            columns[key] = grid[key][:rows].tolist() if key in grid.columns else [None] * rows
    for i in range(rows):
        swept = [str(axis_values[a][i]) for a in axes]
        if result.valid[i] and grid is not None:
            forward, scores = columns["flops_forward"][i], columns["flops_attention_scores"][i]
            cells = [
                units.si(columns["params"][i]),
                units.si(forward),  # the header names the unit
                units.percent(scores / forward if forward else 0.0),
                units.binary_bytes(columns["inference_total_bytes"][i]),
                _cell(columns["training_total_bytes"][i], units.binary_bytes),
            ]
            if per_point_crossover:
                cells.append(str(crossover_col[i]))
            yield swept, cells + [""] * show_problems, None
        else:
            cells = ["—"] * (5 + per_point_crossover)
            cells.append(escape(" ".join(dict.fromkeys(p.code for p in result.problems_at(i)))))
            yield swept, cells, "dim"


def _problem_legend(result: SweepResult, rows: int) -> str:
    """What each problem code of the first ``rows`` points means: the message of the first point with it (the
    table shows the codes; --format json or csv has every point's messages)."""
    first: dict[str, str] = {}
    for i in range(rows):
        for problem in result.problems_at(i):
            first.setdefault(problem.code, problem.message)
    shown = "; ".join(f"{code}: {message}" for code, message in first.items())
    return f" Problems (the first point's message per code; --format json has each point's): {escape(shown)}."


def _bar(share: float) -> str:
    filled = round(share * _BAR_WIDTH)
    return "█" * filled + "·" * (_BAR_WIDTH - filled)


def score_share_table(curve: SeqLenCurve) -> Table:
    """Attention-score share of forward FLOPs against seq_len as a bar chart, the crossover marked."""
    bar = "0%" + " " * (_BAR_WIDTH - 6) + "100%"
    table = FitTable(
        title=f"Attention-score share of forward FLOPs — {escape(curve.label)}",
        title_justify="left",
        caption="no n* (no softmax attention layer: nothing grows as n²)"
        if curve.crossover_seq_len is None
        else f"n* = {curve.crossover_seq_len}: one layer's Q·Kᵀ + A·V FLOPs equal its projections "
        "+ FFN (crossover.py); the whole model also counts pooler / LM head.",
        drop=("rest FLOPs", bar, "score FLOPs", "share"),  # at 60 columns the numbers before the bar chart
    )
    table.add_column("seq_len", justify="right", whole=True)
    table.add_column("score FLOPs", justify="right", whole=True)
    table.add_column("rest FLOPs", justify="right", whole=True)
    table.add_column("share", justify="right", whole=True)
    table.add_column(bar, whole=True)
    table.add_column("")  # the n* marker: may wrap
    marked = False
    for n, scores, other in zip(curve.seq_len, curve.score_flops, curve.other_flops, strict=True):
        marker = ""
        if not marked and curve.crossover_seq_len is not None and n >= curve.crossover_seq_len:
            marker, marked = f"◀ n* = {curve.crossover_seq_len}", True
        if scores is None or other is None:
            table.add_row(str(n), "—", "—", "invalid", "", marker, style="dim")
            continue
        share = scores / (scores + other) if scores + other else 0.0
        table.add_row(str(n), units.si(scores), units.si(other), units.percent(share), _bar(share), marker)
    return table


# --- files --------------------------------------------------------------------------------------------------------


def require_matplotlib() -> None:
    """Exit 4 (environment) with the install command when matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UnsupportedEnvironmentError(
            f"--plot needs matplotlib, which is not installed: {PLOT_INSTALL}", "no_matplotlib"
        ) from None


def plot_format(path: Path) -> str:
    """The file format from the suffix (png, svg or pdf); ValueError otherwise."""
    suffix = path.suffix.lower().lstrip(".")
    if suffix not in PLOT_FORMATS:
        raise ValueError(f"{path}: the file name must end in .png, .svg or .pdf")
    return suffix


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomically(path: Path, write: Callable[[IO[bytes]], None]) -> None:
    """Write ``path`` through a temporary file in its directory and ``os.replace``; never leave a partial file."""
    directory = path.parent if str(path.parent) else Path(".")
    try:
        fd, tmp_name = tempfile.mkstemp(dir=directory, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise EmbedcalcError(
            f"cannot write {path}: {exc.strerror or exc}", ExitCode.RUNTIME, code="io_error"
        ) from None
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp_name, 0o666 & ~_umask())
        os.replace(tmp_name, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        if isinstance(exc, OSError):
            raise EmbedcalcError(
                f"cannot write {path}: {exc.strerror or exc}", ExitCode.RUNTIME, code="io_error"
            ) from None
        raise


def _series(values: Sequence[int | None]) -> list[float]:
    return [math.nan if v is None else float(v) for v in values]


def _binary_tick(value: float) -> str:
    """``2**30`` -> ``1 GiB``, ``1.5 * 2**20`` -> ``1.5 MiB``: binary units without trailing zeros."""
    for exponent, suffix in ((50, "PiB"), (40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")):
        if value >= 2**exponent:
            return f"{value / 2**exponent:.4g} {suffix}"
    return f"{value:.4g} B"


def _crossover_groups(curves: Sequence[SeqLenCurve]) -> list[tuple[int | float, str, str]]:
    """(n*, colour, label) per distinct crossover: the curve's colour if only one curve has it, else black."""
    groups: dict[int | float, list[int]] = {}
    for i, curve in enumerate(curves):
        if curve.crossover_seq_len is not None:
            groups.setdefault(curve.crossover_seq_len, []).append(i)
    out = []
    for value, members in groups.items():
        if len(members) == 1:
            out.append((value, f"C{members[0] % 10}", f"{curves[members[0]].label}: crossover n* = {value}"))
        else:
            who = "all" if len(members) == len(curves) else ", ".join(curves[i].label for i in members)
            out.append((value, "black", f"crossover n* = {value} ({who})"))
    return out


def plot_seq_len_curves(curves: Sequence[SeqLenCurve], path: Path, title: str | None = None) -> None:
    """FLOPs (attention scores vs the rest) and memory against seq_len on log axes, one colour per curve, each
    crossover n* marked; written atomically to ``path`` (.png, .svg or .pdf)."""
    require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    fmt = plot_format(path)
    figure = Figure(figsize=(13, 5.5), dpi=110, layout="constrained")
    FigureCanvasAgg(figure)
    flops_ax, memory_ax = figure.subplots(1, 2)
    for i, curve in enumerate(curves):
        color = f"C{i % 10}"
        x = [float(n) for n in curve.seq_len]
        series = [
            (flops_ax, curve.other_flops, "-", "o", "projections + FFN + head"),
            (flops_ax, curve.score_flops, "--", "s", "attention scores (n²)"),
            (memory_ax, curve.inference_bytes, "-", "o", "inference"),
            (memory_ax, curve.training_bytes, "--", "s", "training"),
        ]
        for ax, values, style, marker, what in series:  # solid: the first of a pair, dashed: the second
            if values is not None:
                ax.plot(x, _series(values), color=color, linestyle=style, marker=marker, markersize=3,
                        label=f"{curve.label}: {what}")  # fmt: skip
    for k, (value, color, label) in enumerate(_crossover_groups(curves)):
        flops_ax.axvline(float(value), color=color, linestyle=":", linewidth=1.2, label=label)
        flops_ax.annotate(
            f"n* = {value}",
            xy=(float(value), 0.02 + 0.05 * k),
            xycoords=("data", "axes fraction"),
            xytext=(4, 0),
            textcoords="offset points",
            color=color,
            fontsize="small",
        )
    seq_formatter = FuncFormatter(lambda v, _pos: f"{v:,.0f}" if v >= 1 else f"{v:g}")
    for ax, ylabel, heading in (
        (flops_ax, "forward FLOPs (2 per MAC)", "Forward FLOPs: attention scores vs the rest"),
        (memory_ax, "bytes", "Memory: inference and training totals"),
    ):
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(seq_formatter)
        ax.set_xlabel("seq_len (tokens)")
        ax.set_ylabel(ylabel)
        ax.set_title(heading)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize="x-small", loc="upper left")
    flops_ax.set_yscale("log")
    memory_ax.set_yscale("log", base=2)
    memory_ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: _binary_tick(v)))
    if title:
        figure.suptitle(title)
    write_atomically(path, lambda handle: figure.savefig(handle, format=fmt))
