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
distributed optimizer, before 2 before 3; no ZeRO without DP).

**Serving rows are a layout × a replica count within the device budget** (``--max-devices``): R independent
copies of a TP × PP group, the load spread evenly (the busiest engine holds ceil(C / engines) of the C in flight,
a rate is split R ways); for each layout the fewest replicas that meet every objective (the throughput per device
falls as the load spreads, so the fewest is the cheapest), else the most the budget allows, with what it misses.
For mixture-of-experts models the search adds **attention data-parallel + expert-parallel** groups of 2, 4 or 8
devices (:mod:`embedcalc.analysis.plan.expert_parallel`): each rank holds the whole attention and its own requests'
KV, the routed experts are spread over the ranks. KV capacity is what each rank really holds: under TP an MLA
model's compressed latent is on every rank (``analyze``'s memory model), under attention DP once per request.
With a latency objective and a load, each TP layout is also tried disaggregated (x prefill + y decode replicas,
:mod:`embedcalc.analysis.plan.disaggregated`), its row beside the aggregated one.

**Serving under continuous batching**: latency under load comes from the scheduler of
:mod:`embedcalc.analysis.plan.scheduler` (token budget per step, chunked prefill mixed with decodes, admission by
KV blocks, preemption, closed loop ``--concurrency`` or open loop ``--rate``), stepped with the per-step times of
:mod:`embedcalc.analysis.plan.steps` (T_p ``analyze``'s ``prefill_s`` at batch 1, T_d(B) its
``decode_s_per_token_mean`` at batch B). A row's TTFT, TPOT and latency are the scheduler's means (p50/p90/p99 in
the JSON); ``prefill_s`` and ``decode_step_s`` (at the busiest engine's batch) are ``analyze``'s own numbers.

With neither ``--concurrency`` nor ``--rate``, each engine serves as many sequences as fit, at most its
``max_num_seqs`` (vLLM's default on the device: 1024 on devices of 70 GiB or more other than the A100, else 256);
with ``--max-ttft``/``--max-tpot``, the most of those whose TTFT and TPOT still meet them (both grow with the
sequences in flight), so a row says what load the layout serves within the objectives.

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

from embedcalc.units import amount, seconds

NODE_DEVICES = 8  # devices per node: HGX/DGX H100/H200/B200, MI300X platforms; TP stays inside one
DEFAULT_MAX_DEVICES = 64
DEFAULT_MAX_TRAINING_DEVICES = 1024
MAX_DEVICES = 1 << 20  # beyond the largest clusters built (~10^5 accelerators); bounds the training search


class Reason(str):
    """Why a layout is out: the sentence (a row's ``reasons[]`` in the JSON, and what the recommendation quotes),
    with a short ``code`` for the table's status column (its legend: :data:`REASON_CODES`) and a ``brief`` for
    the table that folds the layouts that do not hold the model (the figure that decides, without the
    explanation). A plain ``str`` reason reads as code ``other``."""

    code: str
    brief: str

    def __new__(cls, code: str, text: str, brief: str | None = None) -> Reason:
        self = super().__new__(cls, text)
        self.code = code
        self.brief = text if brief is None else brief
        return self

    def __reduce__(
        self,
    ) -> tuple[type[Reason], tuple[str, str, str]]:  # copy, deepcopy and pickle keep the code
        return (Reason, (self.code, str(self), self.brief))


# The status codes of plan's table, and what each means (the table's legend).
REASON_CODES: dict[str, str] = {
    "weights": "the weights alone exceed the usable memory per device",
    "workspace": "the weights and one prompt's activation workspace exceed the usable memory",
    "KV": "the KV cache holds fewer sequences than are in flight (the rest wait for KV slots)",
    "rate": "the engines cannot sustain the request rate (the queue grows without bound)",
    "load": "no request completes within the scheduler's bound (the engine preempts on every step)",
    "TTFT": "misses --max-ttft",
    "TPOT": "misses --max-tpot",
    "tok/s": "misses --min-tokens-per-s",
    "dtype": "the device has no peak for the dtype",
    "memory": "the training memory per device exceeds the device's memory even with recompute and ZeRO",
    "batch": "--global-batch is not a multiple of micro-batch × DP",
    "deadline": "misses --deadline",
    "other": "see --format json",
}


def reason_code(reason: str) -> str:
    """The status code of ``reason`` (``other`` for a reason without one)."""
    return getattr(reason, "code", "other")


def reason_brief(reason: str) -> str:
    """The short form of ``reason`` (the reason itself when it has none)."""
    return getattr(reason, "brief", reason)


@dataclass(frozen=True)
class Layout:
    """How one replica is spread (Megatron-LM conventions), and the training memory choices that make it fit."""

    device: str
    tp: int = 1
    pp: int = 1
    dp: int = 1  # training: data-parallel replicas; serving: attention data-parallel ranks of one EP group
    zero: int = 0
    recompute: Literal["none", "selective", "full"] = "none"
    ep: int = 1  # serving: expert-parallel ranks (the routed experts spread over the dp ranks)
    replicas: int = 1  # serving: independent copies of the layout, the load spread evenly over them
    disaggregated: tuple[int, int] | None = (
        None  # serving: (prefill, decode) replicas of a disaggregated pool
    )
    cp: int = 1  # training: context-parallel ranks each sequence is split over

    @property
    def replica_devices(self) -> int:
        """Devices of one replica."""
        return self.tp * self.cp * self.pp * self.dp

    @property
    def devices(self) -> int:
        if self.disaggregated is not None:
            return self.replica_devices * sum(self.disaggregated)
        return self.replica_devices * self.replicas

    @property
    def label(self) -> str:
        if self.ep > 1:
            parts = [
                f"DP {self.dp} · EP {self.ep}"
                if self.tp == 1
                else f"TP {self.tp} · DP {self.dp} · EP {self.ep}"
            ]
        else:
            parts = [f"TP {self.tp}"] + ([f"CP {self.cp}"] if self.cp > 1 else [])
            parts += [f"DP {self.dp}"] if self.dp > 1 else []
        parts += [f"PP {self.pp}"] if self.pp > 1 else []
        text = " · ".join(parts)
        if self.disaggregated is not None:
            return f"{self.disaggregated[0]}P{self.disaggregated[1]}D × ({text})"
        return f"{self.replicas} × ({text})" if self.replicas > 1 else text

    def to_json(self) -> dict[str, Any]:
        return {"device": self.device, "devices": self.devices, "tp": self.tp, "pp": self.pp, "dp": self.dp,
                "ep": self.ep, "cp": self.cp, "replicas": self.replicas, "zero": self.zero, "recompute": self.recompute,
                "disaggregated": None if self.disaggregated is None else
                {"prefill_replicas": self.disaggregated[0], "decode_replicas": self.disaggregated[1]}}  # fmt: skip


@dataclass(frozen=True)
class Price:
    """A price per device-hour and where it comes from (the catalogue's default, or --price-per-hour)."""

    per_device_hour: float
    source: str

    def to_json(self) -> dict[str, Any]:
        return {"per_device_hour": self.per_device_hour, "source": self.source}


# --- serving times under continuous batching --------------------------------------------------------------------


@dataclass(frozen=True)
class ServingTimes:
    """A serving layout under its load: the scheduler's figures (:mod:`embedcalc.analysis.plan.scheduler`) for
    one engine (a replica, or one attention-DP rank), and the whole layout's throughput."""

    concurrency: float  # requests in flight over the whole layout (the mean running for a rate)
    batch: int  # requests in flight on one engine (the busiest: ceil of the even split)
    engines: int  # engines the load is spread over (replicas × attention-DP ranks)
    prefill_s: float  # T_p: analyze's prefill_s of one prompt (the computed tokens)
    decode_step_s: float  # T_d(batch): analyze's decode_s_per_token_mean at batch ``batch``
    ttft_s: float  # means over the measured requests
    tpot_s: float
    tokens_per_s: float  # output tokens per second, the whole layout
    requests_per_s: float
    latency_s: float
    load: Any = None  # the scheduler's Load (percentiles, queue, preemptions)
    engine: Any = None  # the scheduler's Engine limits
    kv_transfer_s: float = 0.0  # disaggregated: the KV cache of one prompt over the link

    def to_json(self) -> dict[str, Any]:
        return {
            "concurrency": self.concurrency, "batch": self.batch, "engines": self.engines,
            "prefill_s": self.prefill_s, "decode_step_s": self.decode_step_s, "ttft_s": self.ttft_s,
            "tpot_s": self.tpot_s, "tokens_per_s": self.tokens_per_s, "requests_per_s": self.requests_per_s,
            "latency_s": self.latency_s, "kv_transfer_s": self.kv_transfer_s,
            "scheduler": None if self.load is None else self.load.to_json(),
            "engine": None if self.engine is None else self.engine.to_json(),
        }  # fmt: skip


# --- rows ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Objectives:
    """What a serving layout must reach (None: no objective)."""

    max_ttft_s: float | None = None
    max_tpot_s: float | None = None
    min_tokens_per_s: float | None = None

    def misses(self, t: ServingTimes) -> list[str]:
        """One reason per objective ``t`` misses, with the figure that misses."""
        out: list[str] = []
        if self.max_ttft_s is not None and t.ttft_s > self.max_ttft_s:
            out.append(Reason("TTFT", f"TTFT {seconds(t.ttft_s)} > {seconds(self.max_ttft_s)}"))
        if self.max_tpot_s is not None and t.tpot_s > self.max_tpot_s:
            out.append(Reason("TPOT", f"TPOT {seconds(t.tpot_s)} > {seconds(self.max_tpot_s)}"))
        if self.min_tokens_per_s is not None and t.tokens_per_s < self.min_tokens_per_s:
            out.append(
                Reason("tok/s", f"{amount(t.tokens_per_s)} tokens/s < {amount(self.min_tokens_per_s)}")
            )
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
    kv_dtype: str | None = None  # the KV cache's dtype on this layout (None: the activations')

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
            "layout": self.layout.to_json(), "dtype": self.dtype, "kv_dtype": self.kv_dtype, "ok": self.ok,
            "reasons": [str(r) for r in self.reasons],  # plain str in JSON, not Reason
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
            "layout": self.layout.to_json(), "dtype": self.dtype, "ok": self.ok,
            "reasons": [str(r) for r in self.reasons],  # plain str in JSON, not Reason
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
