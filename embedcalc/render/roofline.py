"""Tables for the roofline time estimate: the headline times, and each phase component by component."""

from __future__ import annotations

from typing import Any

from rich.markup import escape
from rich.table import Table

from embedcalc.analysis.report import Analysis
from embedcalc.analysis.roofline import Phase, RooflineEstimate
from embedcalc.render import units
from embedcalc.render.fit import FitTable
from embedcalc.render.units import seconds

CAPTION = (
    "Expected: per component max(FLOPs / (peak × achieved fraction), bytes / (bandwidth × achieved fraction)), "
    "summed, plus kernel overhead, element-wise traffic, communication and the pipeline bubble (time.terms). "
    "Bound: the same components at peak, element-wise ops fused, nothing else."
)


def _rate(value: float | None, unit: str) -> str:
    return "—" if value is None else f"{value:,.1f} {unit}"


def summary_rows(j: dict[str, Any]) -> list[tuple[str, str]]:
    """(quantity, value) rows of a ``time`` JSON object, only those that apply."""
    rows: list[tuple[str, str]] = []
    if j["hardware"] is not None:
        rows.append(("device", f"{j['hardware']} ({j['dtype']}: {units.si(j['peak_flops_per_s'], 'FLOP/s')}, "
                               f"{units.si(j['memory_bandwidth_bytes_per_s'], 'B/s')})"))  # fmt: skip
        model, eff = j["model"], j["efficiency"]
        if model is not None and model["efficiency_override"] is not None:
            rows.append(("efficiency", f"compute {eff['compute']:g}, memory {eff['memory']:g} ({eff['source']})"))
        if model is not None:
            rows.append(("time model", _model_line(model)))
    named = [
        ("forward", "forward_s" if j["prefill_s"] is None else None, seconds),
        ("prefill (time to first token)", "prefill_s", seconds),
        (f"decode per token at KV length {j['decode_kv_len']}", "decode_s_per_token", seconds),
        ("decode per token, mean over --gen-tokens", "decode_s_per_token_mean", seconds),
        ("decode tokens/s per sequence", "decode_tokens_per_s", lambda v: _rate(v, "tokens/s")),
        ("decode tokens/s, whole batch", "batch_decode_tokens_per_s", lambda v: _rate(v, "tokens/s")),
        ("total generation (prefill + decode)", "total_generation_s", seconds),
        ("training step", "step_s", seconds),
    ]
    bound = j.get("lower_bound") or {}
    for label, key, fmt in named:
        if key is not None and j.get(key) is not None:
            peak = bound.get(key)
            rows.append((label, fmt(j[key]) + ("" if peak is None else f" (bound {fmt(peak)})")))
    if j["memory_limit_bytes"] is not None:
        limit = f"{units.binary_bytes(j['memory_limit_bytes'])}, {j['memory_limit_source']}"
        batch = j["max_batch_size"]
        rows.append((f"largest batch in {limit}", "does not fit" if batch is None else f"{batch:,}"))
        context = j["max_context"]
        why = f" (limited by {j['max_context_limited_by']})" if context is not None else ""
        rows.append(
            (f"largest context in {limit}", "does not fit" if context is None else f"{context:,}{why}")
        )
    schedule = j.get("schedule")
    if schedule is not None:
        rows.append(("accumulation steps (micro-batches per replica per step)",
                     f"{schedule['accumulation_steps']:,} (global batch {schedule['global_batch']:,}, "
                     f"pipeline bubble {units.percent(schedule['bubble_fraction'])})"))  # fmt: skip
    for phase, terms in (j.get("terms") or {}).items():
        total = sum(terms.values()) or 1.0
        for name, value in terms.items():
            if value:
                rows.append((f"  {phase}: {name}", f"{seconds(value)} ({units.percent(value / total)})"))
    run = j["train"]
    if run is not None:
        lb = bound.get("train") or {}
        shown = f" (bound {seconds(lb['wall_s'])})" if lb else ""
        rows.append((f"training run: {units.si(run['tokens'])} tokens on {run['devices']:,} devices",
                     f"{seconds(run['wall_s'])}{shown}, {run['device_hours']:,.0f} device-hours"
                     + (f", cost {run['cost']:,.0f}" if run["cost"] is not None else "")))  # fmt: skip
    if j["bound"]:
        rows.append(("bound", ", ".join(f"{phase} {bound}" for phase, bound in j["bound"].items())))
    return rows


def _model_line(model: dict[str, Any]) -> str:
    """The calibration behind the expected times and its measured error on runs it was not fitted on."""
    line = (f"expected times: calibration {model['calibration']}, fitted on {len(model['fitted_on'])} published "
            f"runs, median error {units.percent(model['held_out_median_error'])} (worst "
            f"{model['held_out_max_ratio']:.2f}x) on {len(model['held_out'])} others")  # fmt: skip
    if model["efficiency_override"] is not None:
        line += f"; achieved fractions from {model['efficiency_override']}"
    return line + "; bound: the roofline at peak"


def summary_table(a: Analysis, estimate: RooflineEstimate) -> Table:
    j = estimate.to_json()
    lower = " (expected; bound beside)" if j["hardware"] else ""
    w = a.workload
    table = Table(title=escape(f"Time — {a.target}{lower}: batch {w.batch_size}, seq_len {w.seq_len}, "
                               f"--gen-tokens {w.gen_tokens}, {w.dtype}"),
                  caption=CAPTION if j["hardware"] else None, title_justify="left")  # fmt: skip
    table.add_column("quantity")
    table.add_column("value", justify="right")
    for label, value in summary_rows(j):
        table.add_row(escape(label), escape(value))
    return table


def phase_table(target: str, phase: Phase) -> Table:
    """One phase component by component: FLOPs, bytes by kind, intensity, bound, time and its share."""
    table = FitTable(title=escape(f"Roofline, {phase.name} — {target}: {seconds(phase.time_s)}, {phase.bound}-bound"),
                     title_justify="left", drop=("KV write", "activations", "share", "FLOP/B", "KV read"))  # fmt: skip
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
    table = Table(title="Time (roofline)", caption=CAPTION, title_justify="left")
    table.add_column("quantity")
    rows: dict[str, list[str]] = {}
    for i, (a, e) in enumerate(zip(analyses, estimates, strict=True)):
        table.add_column(escape(a.target), justify="right")
        for label, value in summary_rows(e.to_json()):
            label = label.split(" at KV length")[0]
            rows.setdefault(label, [""] * len(analyses))[i] = value
    for label, cells in rows.items():
        table.add_row(escape(label), *(escape(c) for c in cells))
    return table


def sweep_time_table(
    target: str, axes: list[str], rows: list[tuple[list[str], RooflineEstimate | None]]
) -> Table:
    """Per sweep point: the headline times and the bound of each phase."""
    table = Table(title=escape(f"Time (roofline) — {target}"), caption=CAPTION, title_justify="left")
    for axis in axes:
        table.add_column(axis, justify="right")
    for name in (
        "forward / prefill",
        "decode / token",
        "decode tokens/s",
        "training step",
        "max batch",
        "bound",
    ):
        table.add_column(name, justify="right")
    for cells, estimate in rows:
        if estimate is None:
            table.add_row(*cells, *(["—"] * 6), style="dim")
            continue
        j = estimate.to_json()
        bound = ", ".join(f"{p} {b}" for p, b in j["bound"].items())
        batch = "—" if j["max_batch_size"] is None else f"{j['max_batch_size']:,}"
        table.add_row(*cells, seconds(j["forward_s"]), seconds(j["decode_s_per_token"]),
                      _rate(j["decode_tokens_per_s"], ""), seconds(j["step_s"]), batch, bound)  # fmt: skip
    return table
