"""``plan``: the inverse question — which devices, how many, with what parallel layout, how fast and at what cost.

Every number of a plan row is one ``analyze`` computes for that device, layout and workload, by the same
functions: weights, KV and activations per device by :func:`~embedcalc.analysis.memory.estimate_memory` (serving
memory by :mod:`embedcalc.analysis.memory.serving`), the prefill and decode-step times by
:func:`~embedcalc.analysis.time.estimate.estimate_time`, a training run's wall time by the same call with the
token budget. What plan adds is the search and, for serving, the queue model below. Conventions, stated once:

**Layouts searched** (:mod:`embedcalc.analysis.plan.serving`, :mod:`embedcalc.analysis.plan.training`):
tensor parallelism within a node (a node holds ``NODE_DEVICES`` = 8 devices, as an HGX/DGX or MI300X platform;
TPU slices too), only at degrees ``analyze`` accepts (dividing the heads and FFN widths, KV heads split or
replicated); pipeline stages across nodes; data parallelism for the rest. Both add pipeline stages (with TP over
the whole node) only where they are needed: serving when one node does not hold the model and the load, training
(DP in powers of two) doubling PP ∈ {2, 4, ...} until the layout fits. Per training layout, the first ZeRO stage
and recompute level that make it fit (recompute none before selective before full; ZeRO 1, Megatron's
distributed optimizer, before 2 before 3; no ZeRO without DP). ``--max-devices`` bounds the count. Expert
parallelism is not searched (ep 1).

**Serving under continuous batching**: the queue model (closed loop ``--concurrency``, open loop ``--rate``) is
:mod:`embedcalc.analysis.plan.queue`'s; a request is a prefill of P prompt tokens and G decode steps, T_p and
T_d(B) ``analyze``'s ``prefill_s`` at batch 1 and ``decode_s_per_token_mean`` at batch B.

With neither ``--concurrency`` nor ``--rate``, each layout serves as many sequences as fit, at most
``DEFAULT_MAX_SEQS`` = 256 (vLLM's ``--max-num-seqs``); with ``--max-ttft``/``--max-tpot``, the most of those whose
TTFT and TPOT still meet them (both grow with the sequences in flight), so a row says what load the layout serves
within the objectives.

Memory is judged as servers do (:mod:`embedcalc.analysis.memory.serving`: ``--memory-utilization``, paged KV in
blocks of 16 tokens, the activation workspace); the times are the time model's, so they carry its assumptions
(:mod:`embedcalc.analysis.roofline`). With PP, inference runs the stages one after another (as ``analyze``): no
micro-batch pipelining is credited.

**Cost**: devices × the price per device-hour (the catalogue's dated default, or ``--price-per-hour``); per
million output tokens = cost per hour / (3600 × tokens/s) × 10⁶. No price: the cost columns are empty and rows
sort by device-seconds per token instead.

**Training**: ``analyze --mode training``'s step and run on each layout (micro-batch ``--batch-size`` per
replica; ``--global-batch`` goes to the time model, which derives the accumulation steps; a layout whose
micro-batch × DP does not divide it is out); memory is judged against the
device's whole memory, as ``analyze``'s capacity is. Rows that fit sort fastest first, those that meet the
``--deadline`` before those that miss it (with the shortfall).

This module owns the conventions and the result types; the searches are in
:mod:`embedcalc.analysis.plan.serving` and :mod:`embedcalc.analysis.plan.training`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from embedcalc.analysis.plan.queue import ServingTimes
from embedcalc.units import amount, dollars, seconds

NODE_DEVICES = 8  # devices per node: HGX/DGX H100/H200/B200, MI300X platforms; TP stays inside one
DEFAULT_MAX_SEQS = 256  # vLLM's default --max-num-seqs
DEFAULT_MAX_DEVICES = 64
DEFAULT_MAX_TRAINING_DEVICES = 1024
MAX_DEVICES = 1 << 20  # beyond the largest clusters built (~10^5 accelerators); bounds the training search


@dataclass(frozen=True)
class Layout:
    """How one replica is spread (Megatron-LM conventions), and the training memory choices that make it fit."""

    device: str
    tp: int = 1
    pp: int = 1
    dp: int = 1
    zero: int = 0
    recompute: Literal["none", "selective", "full"] = "none"

    @property
    def devices(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def label(self) -> str:
        parts = [f"TP {self.tp}"] + ([f"PP {self.pp}"] if self.pp > 1 else [])
        parts += [f"DP {self.dp}"] if self.dp > 1 else []
        return " · ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {"device": self.device, "devices": self.devices, "tp": self.tp, "pp": self.pp, "dp": self.dp,
                "zero": self.zero, "recompute": self.recompute}  # fmt: skip


@dataclass(frozen=True)
class Price:
    """A price per device-hour and where it comes from (the catalogue's default, or --price-per-hour)."""

    per_device_hour: float
    source: str

    def to_json(self) -> dict[str, Any]:
        return {"per_device_hour": self.per_device_hour, "source": self.source}


# --- serving times under continuous batching --------------------------------------------------------------------


# --- rows ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Objectives:
    """What a serving layout must reach (None: no objective)."""

    max_ttft_s: float | None = None
    max_tpot_s: float | None = None
    min_tokens_per_s: float | None = None

    def misses(self, t: ServingTimes) -> list[str]:
        """One reason per objective ``t`` misses, with the figure that misses."""
        out = []
        if self.max_ttft_s is not None and t.ttft_s > self.max_ttft_s:
            out.append(f"TTFT {seconds(t.ttft_s)} > {seconds(self.max_ttft_s)}")
        if self.max_tpot_s is not None and t.tpot_s > self.max_tpot_s:
            out.append(f"TPOT {seconds(t.tpot_s)} > {seconds(self.max_tpot_s)}")
        if self.min_tokens_per_s is not None and t.tokens_per_s < self.min_tokens_per_s:
            out.append(f"{amount(t.tokens_per_s)} tokens/s < {amount(self.min_tokens_per_s)}")
        return out

    def to_json(self) -> dict[str, Any]:
        return {"max_ttft_s": self.max_ttft_s, "max_tpot_s": self.max_tpot_s,
                "min_tokens_per_s": self.min_tokens_per_s}  # fmt: skip


@dataclass(frozen=True)
class ServingRow:
    """One serving layout: memory per device, the most sequences that fit, times, cost, and why it is out."""

    layout: Layout
    price: Price | None
    dtype: str
    memory: Any = None  # ServingMemory at the served concurrency (None: not evaluated)
    max_concurrency: int | None = None
    times: ServingTimes | None = None
    reasons: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.reasons

    @property
    def cost_per_hour(self) -> float | None:
        return None if self.price is None else self.price.per_device_hour * self.layout.devices

    @property
    def cost_per_million_tokens(self) -> float | None:
        per_hour, t = self.cost_per_hour, self.times
        if per_hour is None or t is None or t.tokens_per_s <= 0:
            return None
        return per_hour / (3600 * t.tokens_per_s) * 1e6

    @property
    def device_s_per_token(self) -> float:
        """Device-seconds per output token: the price-free cost (inf when not served)."""
        t = self.times
        return math.inf if t is None or t.tokens_per_s <= 0 else self.layout.devices / t.tokens_per_s

    def sort_key(self) -> tuple[Any, ...]:
        cost = self.cost_per_million_tokens
        return (not self.ok, cost is None, cost or 0.0, self.device_s_per_token, self.layout.devices,
                self.layout.device, self.layout.tp)  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        return {
            "layout": self.layout.to_json(), "dtype": self.dtype, "ok": self.ok, "reasons": list(self.reasons),
            "max_concurrency": self.max_concurrency,
            "memory": None if self.memory is None else self.memory.to_json(),
            "times": None if self.times is None else self.times.to_json(),
            "price": None if self.price is None else self.price.to_json(),
            "cost_per_hour": self.cost_per_hour, "cost_per_million_tokens": self.cost_per_million_tokens,
        }  # fmt: skip


@dataclass(frozen=True)
class TrainingRow:
    """One training layout: memory per device (training), step and run time, device-hours, cost."""

    layout: Layout
    price: Price | None
    dtype: str
    memory_bytes: int | None = None  # per device, the heaviest stage
    memory_limit_bytes: int | None = None
    step_s: float | None = None
    wall_s: float | None = None
    device_hours: float | None = None
    deadline_s: float | None = None
    reasons: tuple[str, ...] = ()
    memory_choice: str = ""  # why this ZeRO stage / recompute level
    memory: dict[str, int] = field(default_factory=dict)  # analyze's memory keys (DESIGN.md §5) per device
    train: dict[str, Any] = field(default_factory=dict)  # analyze's time.train object for the run

    @property
    def fits(self) -> bool:
        return self.wall_s is not None

    @property
    def meets_deadline(self) -> bool:
        return self.fits and (self.deadline_s is None or (self.wall_s or 0) <= self.deadline_s)

    @property
    def ok(self) -> bool:
        return not self.reasons

    @property
    def cost(self) -> float | None:
        if self.price is None or self.device_hours is None:
            return None
        return self.price.per_device_hour * self.device_hours

    def sort_key(self) -> tuple[Any, ...]:
        return (not self.fits, not self.meets_deadline, self.wall_s if self.wall_s is not None else math.inf,
                self.layout.devices, self.layout.device, self.layout.tp, self.layout.pp)  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        return {
            "layout": self.layout.to_json(), "dtype": self.dtype, "ok": self.ok, "reasons": list(self.reasons),
            "fits": self.fits, "meets_deadline": self.meets_deadline, "memory_choice": self.memory_choice,
            "memory_bytes": self.memory_bytes, "memory_limit_bytes": self.memory_limit_bytes, "step_s": self.step_s,
            "wall_s": self.wall_s, "device_hours": self.device_hours,
            "price": None if self.price is None else self.price.to_json(), "cost": self.cost,
            "memory": self.memory, "train": self.train,
        }  # fmt: skip


@dataclass(frozen=True)
class PlanResult:
    """Every layout evaluated, best first, and the one-line recommendation (or, when no layout meets every
    constraint, what to change)."""

    target: str
    mode: Literal["inference", "training"]
    rows: tuple[ServingRow, ...] | tuple[TrainingRow, ...]
    recommendation: str
    settings: dict[str, Any] = field(default_factory=dict)
    warnings: tuple[Any, ...] = ()  # the config's warnings (Problem)

    @property
    def ok(self) -> bool:
        """Whether some layout meets every constraint."""
        return any(r.ok for r in self.rows)

    def to_json(self) -> dict[str, Any]:
        """The ``results[]`` entry of ``embedcalc plan --format json``: every layout evaluated, all its numbers."""
        return {
            "target": self.target, "mode": self.mode, "ok": self.ok, "recommendation": self.recommendation,
            "settings": self.settings, "layouts_evaluated": len(self.rows),
            "layouts_ok": sum(r.ok for r in self.rows), "layouts": [r.to_json() for r in self.rows],
            "warnings": [w.as_dict() for w in self.warnings],
        }  # fmt: skip


def _money(value: float | None) -> str:
    return "no price" if value is None else dollars(value)


def _where(layout: Layout, dtype: str) -> str:
    return f"{layout.devices} × {layout.device} ({layout.label}, {dtype})"


def _serving_line(rows: tuple[ServingRow, ...]) -> str:
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
        return (f"Serve on {_where(best.layout, best.dtype)}: {price}, {amount(t.tokens_per_s)} tokens/s, TTFT "
                f"{seconds(t.ttft_s)}, TPOT {seconds(t.tpot_s)} at {t.concurrency:,.3g} in flight")  # fmt: skip
    served = [r for r in rows if r.times is not None]
    if served:
        near = served[0]
        return (f"No layout meets every objective; the cheapest that fits, {_where(near.layout, near.dtype)}, "
                f"misses: {'; '.join(near.reasons)}. Relax the objective, lower --concurrency/--rate, or allow "
                "more devices (--max-devices)")  # fmt: skip
    if rows and all(r.memory is None for r in rows):  # no device planned runs the dtype
        return "No device planned runs this dtype: " + "; ".join(r.reasons[0] for r in rows if r.reasons)
    return ("No layout holds the model and the load: " + (rows[0].reasons[0] if rows and rows[0].reasons else "no "
            "layout to evaluate") + ". Allow more devices (--max-devices), lower --concurrency, --seq-len or "
            "--gen-tokens, or hold less (--dtype int8, --kv-dtype fp8, --memory-utilization 0.95)")  # fmt: skip


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


def recommend(mode: str, rows: tuple[ServingRow, ...] | tuple[TrainingRow, ...]) -> str:
    """The one line on top: the best layout, or why none and what to change."""
    if mode == "training":
        return _training_line(rows)  # type: ignore[arg-type]
    return _serving_line(rows)  # type: ignore[arg-type]


# --- durations and sizes in messages ------------------------------------------------------------------------------

_DURATION_UNITS = {"s": 1, "min": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


class DurationError(ValueError):
    """A duration string that does not parse; the message says what is accepted."""


def parse_duration(text: str) -> float:
    """``30d``, ``36h``, ``90min``, ``2w``, ``3600s`` -> seconds (a unit is required: ``30`` could be anything)."""
    body = text.strip().lower()
    unit = next((u for u in sorted(_DURATION_UNITS, key=len, reverse=True) if body.endswith(u)), None)
    try:
        value = float(body[: -len(unit)]) if unit else math.nan
    except ValueError:
        value = math.nan
    if unit is None or not math.isfinite(value) or value <= 0:
        raise DurationError(f"{text!r} is not a duration; write a positive number and a unit "
                            f"({', '.join(_DURATION_UNITS)}), e.g. 30d, 36h, 2w")  # fmt: skip
    return value * _DURATION_UNITS[unit]
