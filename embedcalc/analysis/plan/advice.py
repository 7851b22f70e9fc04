"""The one line on top of a plan: the best layout, or why none and what to change — naming the real limit (the
layout that came closest) and only the flags that would change something (never one already set that way)."""

from __future__ import annotations

import math
from typing import Any

from embedcalc.analysis.plan.rows import MAX_DEVICES, Layout, ServingRow, TrainingRow
from embedcalc.units import amount, dollars, seconds


def _money(value: float | None) -> str:
    return "no price" if value is None else dollars(value)


def _where(layout: Layout, dtype: str) -> str:
    return f"{layout.devices} × {layout.device} ({layout.label}, {dtype})"


def _dtypes(row: ServingRow, settings: dict[str, Any]) -> str:
    """The row's dtype, and its KV cache's where several KV dtypes were planned (each row has its own)."""
    several = isinstance(settings.get("kv_dtype"), list)
    return f"{row.dtype}, KV {row.kv_dtype or 'as activations'}" if several else row.dtype


def _serving_fixes(settings: dict[str, Any], load: bool) -> str:
    """What to change, naming only flags that would change something (never one already at that value)."""
    fixes = []
    if load and (settings.get("concurrency") or settings.get("rate")):
        fixes.append("lower --concurrency/--rate")
    budget = settings.get("max_devices")
    if isinstance(budget, int) and budget < MAX_DEVICES:
        fixes.append(f"allow more devices (--max-devices {min(2 * budget, MAX_DEVICES)})")
    w = settings.get("workload") or {}
    if w.get("dtype") in ("fp32", "bf16", "fp16"):
        fixes.append("hold less (--dtype fp8 or int8)")
    kv = settings.get("kv_dtype")
    if not {"fp8", "int8", "nvfp4"} & set(kv if isinstance(kv, list) else [kv]):
        fixes.append("a smaller KV cache (--kv-dtype fp8)")
    utilization = settings.get("memory_utilization")
    if isinstance(utilization, float) and utilization < 0.95:
        fixes.append("--memory-utilization 0.95")
    fixes.append("shorter --seq-len or --gen-tokens")
    return ", ".join(fixes)


def _closest(rows: tuple[ServingRow, ...]) -> ServingRow:
    """The layout that came closest to holding the load: the most sequences that fit, then the most devices."""
    return max(rows, key=lambda r: (r.memory is not None, r.max_concurrency or 0, r.layout.devices))


def _serving_line(rows: tuple[ServingRow, ...], settings: dict[str, Any]) -> str:
    ok = [r for r in rows if r.ok]
    if ok:
        best, t = ok[0], ok[0].times
        assert t is not None
        cost = best.cost_per_million_tokens
        price = (
            f"{_money(cost)} per million output tokens"
            if cost is not None
            else f"no price for {best.layout.device} (--price-per-hour {best.layout.device}=P for the cost)"
        )
        return (f"Serve on {_where(best.layout, _dtypes(best, settings))}: {price}, {amount(t.tokens_per_s)} tokens/s "
                f"({amount(t.tokens_per_s / best.layout.devices)} per device), TTFT {seconds(t.ttft_s)}, TPOT "
                f"{seconds(t.tpot_s)} at {t.concurrency:,.4g} in flight")  # fmt: skip
    served = [r for r in rows if r.times is not None]
    if served:
        near = served[0]
        where = _where(near.layout, _dtypes(near, settings))
        return (f"No layout meets every objective; the cheapest that fits, {where}, "
                f"misses: {'; '.join(near.reasons)}. Relax the objective, or "
                f"{_serving_fixes(settings, True)}")  # fmt: skip
    if rows and all(r.memory is None for r in rows):  # no device planned runs the dtype
        return "No device planned runs this dtype: " + "; ".join(r.reasons[0] for r in rows if r.reasons)
    if not rows:
        return "No layout to evaluate"
    near = _closest(rows)
    why = near.reasons[0] if near.reasons else "it does not hold the load"
    return (f"No layout holds the model and the load; the closest, {_where(near.layout, near.dtype)}: {why}. "
            f"Change: {_serving_fixes(settings, True)}")  # fmt: skip


def _training_line(rows: tuple[TrainingRow, ...]) -> str:
    ok = [r for r in rows if r.ok]
    if ok:
        fastest = ok[0]
        cheapest = min(ok, key=lambda r: (r.cost if r.cost is not None else math.inf, r.device_hours or 0.0))

        def line(r: TrainingRow) -> str:
            cost = f", {_money(r.cost)}" if r.cost is not None else ""
            return (f"{_where(r.layout, r.dtype)} in {seconds(r.wall_s or 0.0)}, {amount(r.device_hours or 0.0)} "
                    f"device-hours{cost}")  # fmt: skip

        text = f"Fastest: {line(fastest)}"
        return text if cheapest is fastest else f"{text}; cheapest: {line(cheapest)}"
    fits = [r for r in rows if r.fits]
    if fits:
        near = fits[0]
        wall, deadline = near.wall_s or 0.0, near.deadline_s or 1.0
        # throughput scales at best linearly with the replicas: the fewest devices that could meet it, in powers of 2
        needed = 1 << max(0, math.ceil(math.log2(near.layout.devices * wall / deadline)))
        return (f"No layout meets the deadline; the fastest, {_where(near.layout, near.dtype)}, takes "
                f"{seconds(wall)} ({seconds(wall - deadline)} over). Allow at least {needed:,} devices "
                f"(--max-devices {needed}), extend --deadline to {seconds(wall)}, or train on fewer "
                "tokens")  # fmt: skip
    if rows and all(r.memory_bytes is None and r.reasons and "peak" in r.reasons[0] for r in rows):
        return "No device planned runs this dtype: " + "; ".join(r.reasons[0] for r in rows)
    return (
        "No training layout fits in memory: "
        + (rows[0].reasons[0] if rows and rows[0].reasons else "no layout to evaluate")
        + ". Allow more devices (--max-devices), a shorter --seq-len or a smaller --batch-size"
    )


def recommend(mode: str, rows: tuple[ServingRow, ...] | tuple[TrainingRow, ...],
              settings: dict[str, Any] | None = None) -> str:  # fmt: skip
    """The one line on top: the best layout, or why none and what to change (naming only the flags that are not
    already set that way: ``settings`` are the plan's)."""
    if mode == "training":
        return _training_line(rows)  # type: ignore[arg-type]
    return _serving_line(rows, settings or {})  # type: ignore[arg-type]
