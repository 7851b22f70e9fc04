"""``embedcalc plan`` output: the recommendation line, the table of layouts (best first; a short code in the status
column for those that miss something, with its legend below), the layouts that cannot serve folded one line per
device and reason beneath it, and the same rows as CSV or Markdown (every layout evaluated, each reason in full)."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from typing import Any

from rich.console import Group
from rich.markup import escape
from rich.text import Text

from embedcalc import units
from embedcalc.analysis.plan.rows import (
    REASON_CODES,
    PlanResult,
    ServingRow,
    TrainingRow,
    reason_brief,
    reason_code,
)
from embedcalc.render.fit import FitTable

# header, raw value, text, right-aligned
Column = tuple[str, Callable[[Any], Any], Callable[[Any], str], bool]


def _opt(fmt: Callable[[Any], str]) -> Callable[[Any], str]:
    return lambda v: "—" if v is None else fmt(v)


def _codes(row: ServingRow | TrainingRow) -> list[str]:
    return list(dict.fromkeys(reason_code(r) for r in row.reasons))


def _status(row: ServingRow | TrainingRow) -> str:
    """``ok``, or the codes of what the row misses (the legend says what each means; JSON has the sentences)."""
    return "ok" if row.ok else " ".join(_codes(row))


def _legend(rows: list[Any]) -> str:
    """The status codes the ``rows`` show, each with its meaning."""
    codes = dict.fromkeys(code for row in rows for code in _codes(row))
    if not codes:
        return ""
    return (
        " Status: "
        + "; ".join(f"{code}: {REASON_CODES.get(code, REASON_CODES['other'])}" for code in codes)
        + "."
    )


def _times(row: ServingRow, key: str) -> Any:
    return None if row.times is None else getattr(row.times, key)


def _memory(row: ServingRow, key: str) -> Any:
    return None if row.memory is None else getattr(row.memory, key)


def _kv_per_device(row: ServingRow) -> int | None:
    """The paged KV cache of the sequences served (or asked for) on the heaviest device."""
    m = row.memory
    return None if m is None else m.kv_cache_bytes + m.kv_paging_bytes


def _kv_per_sequence(row: ServingRow) -> int | None:
    return None if row.memory is None else int(row.memory.paged_kv_per_sequence_bytes)


SERVING: list[Column] = [
    ("device", lambda r: r.layout.device, str, False),
    ("devices", lambda r: r.layout.devices, str, True),
    ("layout", lambda r: r.layout.label, str, False),
    ("dtype", lambda r: r.dtype, str, False),
    ("weights/device", lambda r: _memory(r, "weights_bytes"), _opt(units.binary_bytes), True),
    ("KV/device", _kv_per_device, _opt(units.binary_bytes), True),
    ("KV/seq", _kv_per_sequence, _opt(units.binary_bytes), True),
    ("max seqs", lambda r: r.max_concurrency, _opt(lambda v: f"{v:,}"), True),
    ("in flight", lambda r: _times(r, "concurrency"), _opt(lambda v: f"{v:,.3g}"), True),
    ("tokens/s", lambda r: _times(r, "tokens_per_s"), _opt(units.amount), True),
    ("TTFT", lambda r: _times(r, "ttft_s"), units.seconds, True),
    ("TPOT", lambda r: _times(r, "tpot_s"), units.seconds, True),
    ("$/hour", lambda r: r.cost_per_hour, _opt(units.dollars), True),
    ("$/M tokens", lambda r: r.cost_per_million_tokens, _opt(units.dollars), True),
    ("status", _status, str, False),
]

TRAINING: list[Column] = [
    ("device", lambda r: r.layout.device, str, False),
    ("devices", lambda r: r.layout.devices, str, True),
    ("layout", lambda r: r.layout.label, str, False),
    ("ZeRO", lambda r: r.layout.zero, str, True),
    ("recompute", lambda r: r.layout.recompute, str, False),
    ("dtype", lambda r: r.dtype, str, False),
    ("memory/device", lambda r: r.memory_bytes, _opt(units.binary_bytes), True),
    ("tokens/step", lambda r: r.train.get("tokens_per_step"), _opt(units.si), True),
    ("step", lambda r: r.step_s, units.seconds, True),
    ("wall time", lambda r: r.wall_s, units.seconds, True),
    ("device-hours", lambda r: r.device_hours, _opt(units.amount), True),
    ("cost", lambda r: r.cost, _opt(units.dollars), True),
    ("status", _status, str, False),
]


def _columns(result: PlanResult) -> list[Column]:
    if result.mode == "training":
        return TRAINING
    if isinstance(result.settings.get("kv_dtype"), list):  # several KV dtypes planned: each row says its own
        at = next(i for i, (header, *_) in enumerate(SERVING) if header == "dtype") + 1
        return [
            *SERVING[:at],
            ("KV dtype", lambda r: r.kv_dtype or "as activations", str, False),
            *SERVING[at:],
        ]
    return SERVING


def _default_load(settings: dict[str, Any]) -> str:
    objectives = settings.get("objectives") or {}
    latency = [
        flag
        for flag, key in (("--max-ttft", "max_ttft_s"), ("--max-tpot", "max_tpot_s"))
        if objectives.get(key)
    ]
    within = f" within {' and '.join(latency)}" if latency else ""
    return f"as many in flight as fit{within} (at most the engine's max-num-seqs)"


def _caption(result: PlanResult) -> str:
    s = result.settings
    if result.mode == "training":
        deadline = s.get("deadline_s")
        batch = (f"global batch {s['global_batch']:,} sequences on every row" if s.get("global_batch") else
                 "global batch = DP x micro-batch, so rows differ in tokens per optimizer step (--global-batch "
                 "fixes one for all)")  # fmt: skip
        return (f"{s['train_tokens']:,} tokens; {batch}; TP within a node (8 devices), PP across nodes, DP the "
                "rest; the first ZeRO stage / recompute level that fits is chosen; memory judged against the device's "
                f"memory; fastest first{', within the deadline first' if deadline else ''}. Times: the time "
                "model's (analyze --mode training).")  # fmt: skip
    w = s["workload"]
    load = (f"{s['concurrency']} in flight" if s.get("concurrency") else f"{s['rate']:g} requests/s"
            if s.get("rate") else _default_load(s))  # fmt: skip
    routed = (" DP · EP rows: every rank waits for the one its router sends the most token-expert pairs (routing "
              "as measured, not balanced; no redundant experts)." if any(r.layout.ep > 1 for r in result.rows)
              else "")  # fmt: skip
    return (f"Prompt {w['seq_len']:,} + {w['gen_tokens']:,} output tokens, {load}; continuous batching (prefills "
            f"interleaved with decode steps of the running batch); memory: {s['memory_utilization']:.0%} of the "
            "device (runtime reserve), paged KV in 16-token blocks, activation workspace. Cheapest per million "
            f"output tokens first. Times: analyze's prefill and decode step on the device.{routed}")  # fmt: skip


def _shown(result: PlanResult, top: int) -> tuple[list[Any], list[tuple[Any, str]]]:
    """The rows the table shows, and the serving layouts it folds. Training: the first ``top`` layouts (0: all).
    Serving: the first ``top`` layouts that were served (ok, or missing an objective with the figure), then one
    line per device and reason for the layouts that are out on memory or dtype (the one closest to fitting, the
    largest, speaks for them; ``layout`` lists them all)."""
    rows: list[Any] = list(result.rows)
    if result.mode == "training":
        return (rows if top <= 0 else rows[:top]), []
    served = [r for r in rows if r.times is not None]
    shown = served if top <= 0 else served[:top]
    out: dict[tuple[str, str], list[Any]] = {}
    for row in rows:
        if row.times is None:
            kind = reason_code(row.reasons[0]) if row.reasons else ""
            out.setdefault((row.layout.device, kind), []).append(row)
    folded: list[tuple[Any, str]] = []
    for _, group in sorted(out.items(), key=lambda item: item[0]):
        group.sort(key=lambda r: r.layout.devices)
        if all(r.layout.pp == 1 and r.layout.ep == 1 and r.layout.replicas == 1 for r in group):
            label = "TP " + ", ".join(str(r.layout.tp) for r in group)
        else:
            label = ", ".join(r.layout.label for r in group)
        folded.append((group[-1], label))
    return shown, folded


def plan_table(result: PlanResult, top: int = 20) -> Group:
    """The best layouts as a table (serving: the first ``top`` that are served, then, in a second table, each
    device's layouts that cannot serve, one line per device and reason with the figure of the one closest to
    fitting); the captions state the conventions and what each status code means."""
    columns = _columns(result)
    shown, folded = _shown(result, top)
    left = len(result.rows) - len(shown) - sum(1 + label.count(",") for _, label in folded)
    caption = (
        _caption(result)
        + _legend(shown)
        + (f" {left} more layouts: --top 0 or --format json lists all." if left else "")
    )
    table = FitTable(
        title=f"plan — {result.target}, {result.mode}", title_justify="left", caption=caption,
        drop=("dtype", "KV/seq", "$/hour", "device-hours", "tokens/step", "step", "KV/device", "weights/device",
              "max seqs", "in flight", "recompute", "ZeRO", "memory/device", "devices", "TPOT", "TTFT"),
    )  # fmt: skip
    for header, _, _, right in columns:
        table.add_column(
            header,
            justify="right" if right else "left",
            whole=header not in ("status", "layout"),
            prefer_whole=header == "layout",
        )
    for row in shown:
        cells = [escape(text(value(row))) for _, value, text, _ in columns]
        table.add_row(*cells, style="" if row.ok else "dim")
    return Group(table, *([_out_table(folded)] if folded else []))


def _out_table(folded: list[tuple[Any, str]]) -> FitTable:
    """The layouts that cannot serve, one line per device and reason: the layouts, and the reason's figure for
    the one closest to fitting (the largest)."""
    table = FitTable(
        title="Out — layouts that cannot serve the load", title_justify="left",
        caption="Memory per device against the usable memory (the utilization above); --format json gives each "
        "layout's reasons in full.",
    )  # fmt: skip
    table.add_column("device", whole=True)
    table.add_column("layouts", prefer_whole=True)
    table.add_column("why")
    for row, label in folded:
        table.add_row(
            escape(row.layout.device), escape(label), escape(reason_brief(row.reasons[0])), style="dim"
        )
    return table


def recommendation_text(result: PlanResult) -> Text:
    return Text(result.recommendation, style="bold" if result.ok else "yellow")


def plan_csv(result: PlanResult) -> str:
    """Every layout evaluated, one line each, raw numbers (seconds, bytes, dollars)."""
    columns = _columns(result)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([header for header, *_ in columns])
    for row in result.rows:
        writer.writerow(["" if (v := value(row)) is None else v for _, value, _, _ in columns])
    return buffer.getvalue()


def plan_markdown(result: PlanResult) -> str:
    """Every layout evaluated as a Markdown table, with the recommendation above it."""
    columns = _columns(result)
    lines = [result.recommendation, "", "| " + " | ".join(h for h, *_ in columns) + " |",
             "|" + "".join("---:|" if right else "---|" for *_, right in columns)]  # fmt: skip
    for row in result.rows:
        lines.append(
            "| " + " | ".join(text(value(row)).replace("|", "\\|") for _, value, text, _ in columns) + " |"
        )
    return "\n".join(lines) + "\n"
