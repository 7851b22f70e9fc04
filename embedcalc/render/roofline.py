"""Tables for the roofline time estimate: the headline times, and each phase component by component."""

from __future__ import annotations

from collections.abc import Callable

from rich.markup import escape
from rich.table import Table

from embedcalc.analysis.report import Analysis
from embedcalc.analysis.roofline import Phase, RooflineEstimate, TimeModel
from embedcalc.devices.catalogue import peak_dtype
from embedcalc.render import units
from embedcalc.render.fit import FitTable
from embedcalc.render.units import seconds

CAPTION = (
    "Expected: per component max(FLOPs / (peak × achieved fraction), bytes / (bandwidth × achieved fraction)), "
    "summed, plus kernel overhead, element-wise traffic, an MoE layer's token dispatch, communication and the "
    "pipeline bubble (time.terms). Bound: the same components at peak, element-wise ops fused, nothing else."
)


def _rate(value: float | None, unit: str) -> str:
    return "—" if value is None else f"{value:,.1f} {unit}"


def summary_rows(e: RooflineEstimate) -> list[tuple[str, str]]:
    """(quantity, value) rows of one time estimate, only those that apply."""
    rows: list[tuple[str, str]] = []
    if e.hardware is not None:
        rows.append(("device", f"{e.hardware}, {e.dtype}"))
        rows.append((f"peak ({e.dtype})", f"{units.si(e.peak_flops_per_s or 0.0, 'FLOP/s')}, "
                                        f"{units.si(e.bandwidth_bytes_per_s or 0.0, 'B/s')}"))  # fmt: skip
        model, eff = e.model, e.efficiency
        if model is not None and model.override is not None:
            rows.append(("efficiency", f"compute {eff.compute:g}, memory {eff.memory:g} ({eff.source})"))
        if model is not None:  # the calibration's name here, its fit and error in the caption (model_note)
            rows.append(("time model", model.name))
    rate: Callable[[float], str] = lambda v: _rate(v, "tokens/s")  # noqa: E731
    named: list[tuple[str, Callable[[RooflineEstimate], float | None], Callable[[float], str]]] = [
        ("forward", lambda x: x.forward_s if x.prefill_s is None else None, seconds),
        ("prefill (time to first token)", lambda x: x.prefill_s, seconds),
        (f"decode per token at KV length {e.decode_kv_len}", lambda x: x.decode_s_per_token, seconds),
        ("decode per token, mean over --gen-tokens", lambda x: x.decode_s_per_token_mean, seconds),
        ("decode tokens/s per sequence", lambda x: x.decode_tokens_per_s, rate),
        ("decode tokens/s, whole batch", lambda x: x.batch_decode_tokens_per_s, rate),
        ("total generation (prefill + decode)", lambda x: x.total_generation_s, seconds),
        ("training step", lambda x: x.step_s, seconds),
    ]
    bound = e.lower_bound
    for label, read, fmt in named:
        value = read(e)
        if value is not None:
            peak = None if bound is None else read(bound)
            rows.append((label, fmt(value) + ("" if peak is None else f" (bound {fmt(peak)})")))
    cap = e.capacity
    if cap is not None:
        limit = f"{units.binary_bytes(cap.limit_bytes)}, {cap.limit_source}"
        batch = cap.max_batch_size
        rows.append((f"largest batch in {limit}", "does not fit" if batch is None else f"{batch:,}"))
        context = cap.max_context
        why = f" (limited by {cap.context_limited_by})" if context is not None else ""
        rows.append(
            (f"largest context in {limit}", "does not fit" if context is None else f"{context:,}{why}")
        )
    schedule = e.schedule
    if schedule is not None:
        rows.append(
            ("accumulation steps (micro-batches per replica per step)", f"{schedule.accumulation_steps:,}")
        )
        rows.append(("  global batch (sequences per step)", f"{schedule.global_batch:,}"))
        rows.append(("  pipeline bubble", units.percent(schedule.bubble_fraction)))
    for phase, terms in e.terms().items():
        total = sum(terms.values()) or 1.0
        for name, value in terms.items():
            if value:
                rows.append((f"  {phase}: {name}", f"{seconds(value)} ({units.percent(value / total)})"))
    run = e.training
    if run is not None:
        lb = None if bound is None else bound.training
        shown = f" (bound {seconds(lb.wall_s)})" if lb is not None else ""
        rows.append((f"training run: {units.si(run.tokens)} tokens on {run.devices:,} devices",
                     f"{seconds(run.wall_s)}{shown}"))  # fmt: skip
        rows.append(("  device-hours", f"{run.device_hours:,.0f}"))
        if run.cost is not None:
            rows.append(("  cost", f"{run.cost:,.0f}"))
    if e.phases:
        rows.append(("bound", ", ".join(f"{phase} {b}" for phase, b in e.bounds.items())))
    return rows


def model_note(model: TimeModel | None) -> str:
    """The calibration behind the expected times and its measured error on runs it was not fitted on (a
    caption's sentence; the table names the calibration)."""
    if model is None:
        return ""
    line = (f"Time model {model.name}: fitted on {len(model.fitted_on)} published runs, median error "
            f"{units.percent(model.held_out_median_error)} (worst {model.held_out_max_ratio:.2f}x) on "
            f"{len(model.held_out)} others")  # fmt: skip
    if model.override is not None:
        line += f"; achieved fractions from {model.override}"
    return line + ". "


def summary_table(a: Analysis, estimate: RooflineEstimate) -> Table:
    lower = " (expected; bound beside)" if estimate.hardware else ""
    w = a.workload
    dtype = f"{w.dtype} ({w.dtype_source})"
    # MXFP4 weights on a device with FP4 run W4A8; FP4 weights on a device without FP4 run weight-only
    if estimate.dtype is not None and peak_dtype(w.dtype) != estimate.dtype:
        dtype += (", activations in MXFP8 (W4A8, at the fp8 peak)" if w.dtype == "mxfp4" and estimate.dtype == "fp8"
                  else f", weight-only: dequantized to {estimate.dtype} (no {peak_dtype(w.dtype)} on "
                  f"{estimate.hardware})")  # fmt: skip
    table = FitTable(title=escape(f"Time — {a.target}{lower}: batch {w.batch_size}, seq_len {w.seq_len}, "
                               f"--gen-tokens {w.gen_tokens}, {dtype}"),
                  caption=model_note(estimate.model) + CAPTION if estimate.hardware else None,
                  title_justify="left")  # fmt: skip
    table.add_column("quantity")
    table.add_column(
        "value", justify="right", prefer_whole=True
    )  # the labels wrap first, a value on one line
    for label, value in summary_rows(estimate):
        table.add_row(escape(label), escape(value))
    return table


def phase_table(target: str, phase: Phase) -> Table:
    """One phase component by component: FLOPs, bytes by kind, intensity, bound, time and its share."""
    table = FitTable(title=escape(f"Roofline, {phase.name} — {target}: {seconds(phase.time_s)}, {phase.bound}-bound"),
                     title_justify="left", drop=("KV write", "activations", "share", "FLOP/B", "KV read", "bound",
                                                 "weights"))  # fmt: skip
    for name in ("component", "FLOPs", "weights", "activations", "KV read", "KV write", "FLOP/B", "bound",
                 "time", "share"):  # fmt: skip
        table.add_column(name, justify="left" if name in ("component", "bound") else "right", whole=True)
    total = phase.time_s or 1.0
    for c in phase.components:
        t = c.traffic
        table.add_row(
            escape(c.key), units.flops(t.flops), units.binary_bytes(t.weight_bytes),
            units.binary_bytes(t.activation_bytes), units.binary_bytes(t.kv_read_bytes),
            units.binary_bytes(t.kv_write_bytes), "—" if c.intensity is None else f"{c.intensity:,.1f}", c.bound,
            seconds(c.time_s), units.percent(c.time_s / total),
        )  # fmt: skip
    table.add_section()
    table.add_row("[bold]total[/]", units.flops(phase.flops), "", "", "", "", "", phase.bound,
                  f"[bold]{seconds(phase.time_s)}[/]", "")  # fmt: skip
    return table


def roofline_tables(a: Analysis, estimate: RooflineEstimate) -> list[Table]:
    """The summary, then one table per phase."""
    return [summary_table(a, estimate), *(phase_table(a.target, p) for p in estimate.phases.values())]


def compare_time_table(analyses: list[Analysis], estimates: list[RooflineEstimate]) -> Table:
    """The headline times side by side, one column per target."""
    table = FitTable(title="Time (roofline)", caption=CAPTION, title_justify="left", keep=1)
    table.add_column("quantity")
    rows: dict[str, list[str]] = {}
    for i, (a, e) in enumerate(zip(analyses, estimates, strict=True)):
        table.add_column(escape(a.target), justify="right")
        for label, value in summary_rows(e):
            label = label.split(" at KV length")[0]
            rows.setdefault(label, [""] * len(analyses))[i] = value
    for label, cells in rows.items():
        table.add_row(escape(label), *(escape(c) for c in cells))
    return table


def sweep_time_table(
    target: str, axes: list[str], rows: list[tuple[list[str], RooflineEstimate | None]]
) -> Table:
    """Per sweep point: the headline times and the bound of each phase."""
    table = FitTable(title=escape(f"Time (roofline) — {target}"), caption=CAPTION, title_justify="left",
                     keep=len(axes))  # fmt: skip
    for axis in axes:
        table.add_column(axis, justify="right", whole=True)
    for name in (
        "forward / prefill",
        "decode / token",
        "decode tokens/s",
        "training step",
        "max batch",
        "bound",
    ):
        table.add_column(name, justify="right", whole=name != "bound")
    for cells, estimate in rows:
        if estimate is None:
            table.add_row(*cells, *(["—"] * 6), style="dim")
            continue
        bound = ", ".join(f"{p} {b}" for p, b in estimate.bounds.items())
        cap = estimate.capacity
        batch = "—" if cap is None or cap.max_batch_size is None else f"{cap.max_batch_size:,}"
        table.add_row(*cells, seconds(estimate.forward_s), seconds(estimate.decode_s_per_token),
                      _rate(estimate.decode_tokens_per_s, ""), seconds(estimate.step_s), batch, bound)  # fmt: skip
    return table
