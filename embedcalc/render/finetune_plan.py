"""The table of a fine-tuning plan: method × device, memory per device against the device's, step, wall time,
device-hours and cost, and why a method is out (embedcalc/analysis/plan/finetune.py states the conventions)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rich.markup import escape
from rich.table import Table

from embedcalc.analysis.plan.rows import REASON_CODES, reason_code
from embedcalc.render import units
from embedcalc.render.fit import FitTable

if TYPE_CHECKING:
    from embedcalc.api.finetune_plan import FinetunePlan

CAPTION = (
    "Memory per device with the first recompute level that fits (a paged optimizer's state may stay on the host); "
    "step = full training's expected step scaled to the fine-tune's matmul FLOPs (frozen weights: input gradients "
    "only), plus NF4 dequantization and offload transfers."
)


def finetune_plan_table(plan: FinetunePlan, top: int = 0) -> Table:
    w = plan.settings["workload"]
    rows = plan.rows[:top] if top else plan.rows
    table = FitTable(
        title=f"Fine-tuning plan — {escape(plan.target)}: {plan.settings['train_tokens']:,} tokens, batch "
        f"{w['batch_size']} × {w['seq_len']} tokens, {w['dtype']}, optimizer {w['optimizer']}",
        caption=CAPTION + escape(_legend(rows)),
        title_justify="left",
        drop=("trainable", "step", "n", "recompute"),
    )
    for name, justify in (("device", "left"), ("method", "left"), ("n", "right"), ("recompute", "left"),
                          ("memory / device", "right"), ("trainable", "right"), ("step", "right"),
                          ("wall", "right"), ("cost", "right"), ("status", "left")):  # fmt: skip
        table.add_column(name, justify="left" if justify == "left" else "right",
                         whole=name not in ("method", "status"))  # fmt: skip
    for r in rows:
        memory = "" if r.memory_bytes is None else (
            f"{units.binary_bytes(r.memory_bytes)} / {units.binary_bytes(r.memory_limit_bytes or 0)}")  # fmt: skip
        cost = "" if r.cost is None else f"${r.cost:,.2f}"
        status = "fits" if r.fits else escape(" ".join(dict.fromkeys(reason_code(x) for x in r.reasons)))
        table.add_row(escape(r.device), escape(r.method), str(r.replicas), r.recompute or "", memory,
                      units.si(r.trainable_params) if r.trainable_params else "",
                      units.seconds(r.step_s) if r.step_s is not None else "",
                      units.seconds(r.wall_s) if r.wall_s is not None else "", cost, status)  # fmt: skip
    return table


def _legend(rows: Sequence[Any]) -> str:
    """What the status codes of ``rows`` mean (the JSON keeps each reason's sentence)."""
    codes = dict.fromkeys(reason_code(x) for r in rows if not r.fits for x in r.reasons)
    if not codes:
        return ""
    meaning = {**REASON_CODES, "memory": "the memory per device exceeds the device's even with recompute full",
               "untimed": "the device cannot time it (no peak for the dtype, or no host link for offload)",
               "other": "the method cannot be planned for this model (--format json says why)"}  # fmt: skip
    return " Status: " + "; ".join(f"{code}: {meaning.get(code, meaning['other'])}" for code in codes) + "."
