"""The serving search of ``plan``: every device × layout (TP degrees within a node; pipeline stages when one node
is not enough; attention data-parallel + expert-parallel for MoE models) × replica count within the device budget,
each evaluated with ``analyze``'s own functions — serving memory
(:func:`~embedcalc.analysis.memory.serving.serving_memory`), the step times
(:func:`~embedcalc.analysis.time.estimate.estimate_time`, :mod:`.steps`) — and the continuous-batching scheduler
of :mod:`.scheduler`. The conventions are stated once, in :mod:`embedcalc.analysis.plan.rows`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from embedcalc.analysis.memo import Memo
from embedcalc.analysis.memory.serving import (
    DEFAULT_UTILIZATION,
    ServingMemory,
    max_concurrency,
    serving_memory,
)
from embedcalc.analysis.parallel import parallel_problems
from embedcalc.analysis.plan.engine import Engine, default_engine
from embedcalc.analysis.plan.expert_parallel import has_routed_experts, num_experts, rank_times
from embedcalc.analysis.plan.rows import (
    NODE_DEVICES,
    Layout,
    Objectives,
    Price,
    Reason,
    ServingRow,
    ServingTimes,
    reason_brief,
    reason_code,
)
from embedcalc.analysis.plan.scheduler import simulate
from embedcalc.analysis.plan.steps import KvAdmission, Speculation, StepCost, computed_prompt
from embedcalc.analysis.roofline import RooflineEstimate
from embedcalc.analysis.time.capability import gemm_peak_dtype
from embedcalc.analysis.time.estimate import TimeRequest, estimate_time
from embedcalc.analysis.workload import Parallelism, Workload
from embedcalc.config.resolved import ResolvedShape
from embedcalc.devices.catalogue import Device
from embedcalc.units import binary_bytes


@dataclass(frozen=True)
class ServingRequest:
    """The workload to serve, the engine's settings and what the layouts must reach."""

    workload: (
        Workload  # seq_len: the prompt, gen_tokens: the output, dtype; its batch size and layout are ignored
    )
    concurrency: int | None = None
    rate: float | None = None  # requests per second
    kv_dtype: str | None = None
    utilization: float = DEFAULT_UTILIZATION
    objectives: Objectives = field(default_factory=Objectives)
    max_devices: int = 64
    dtype_fallback: bool = False  # the dtype was not given: fp16 where a device has no bf16 peak
    max_num_seqs: int | None = None  # None: vLLM's default on the device (scheduler.default_engine)
    max_num_batched_tokens: int | None = None
    speculation: Speculation | None = None
    prefix_hit: float = 0.0  # fraction of each prompt found in the prefix cache
    seed: int = 0  # the open loop's arrivals
    kv_admission: KvAdmission = "on-demand"


def device_dtype(device: Device, w: Workload, fallback: bool) -> Workload:
    """``w`` in fp16 on a device without a bf16 peak when the user did not choose the dtype (a T4, a V100:
    servers load a bf16 checkpoint in fp16 there); otherwise ``w`` unchanged."""
    if fallback and w.dtype == "bf16" and device.peak("bf16") is None and device.peak("fp16") is not None:
        return replace(w, dtype="fp16")
    return w


def tp_degrees(config: ResolvedShape, most: int) -> list[int]:
    """The tensor-parallel degrees up to ``most`` that ``analyze`` accepts for ``config``."""
    return [t for t in range(1, most + 1) if not parallel_problems(config, Parallelism(tp=t))[0]]


def ep_degrees(config: ResolvedShape, most: int) -> list[int]:
    """Attention-DP × EP degrees within a node that ``analyze`` accepts (the experts divide evenly)."""
    if not has_routed_experts(config):
        return []
    experts = num_experts(config) or 1
    out = []
    for n in (2, 4, 8, 16):
        fits = n <= most and n <= NODE_DEVICES and experts % n == 0
        if fits and not parallel_problems(config, Parallelism(dp=n, ep=n))[0]:
            out.append(n)
    return out


def no_peak(device: Device, w: Workload) -> str | None:
    dtype = gemm_peak_dtype(device, w)
    if device.peak(dtype) is None:
        lists = ", ".join(device.peak_flops_per_s)
        return Reason("dtype", f"{device.name} has no {dtype} peak (it lists {lists}); choose --dtype",
                      f"no {dtype} peak (it lists {lists})")  # fmt: skip
    return None


def _memory_reason(memory: ServingMemory, wanted: int) -> str | None:
    usable = memory.usable_bytes or 0
    share = f"{binary_bytes(usable)} usable = {memory.utilization:.0%} of {binary_bytes(memory.device_bytes or 0)}"
    over = f"> {binary_bytes(usable)} usable"
    if memory.weights_bytes > usable:
        weights = binary_bytes(memory.weights_bytes)
        return Reason(
            "weights", f"weights do not fit: {weights} per device > {share}", f"weights {weights} {over}"
        )
    if memory.weights_bytes + memory.workspace_bytes > usable:
        both = binary_bytes(memory.weights_bytes + memory.workspace_bytes)
        return Reason("workspace", f"weights + workspace do not fit: {binary_bytes(memory.weights_bytes)} + "
                      f"{binary_bytes(memory.workspace_bytes)} per device > {share}",
                      f"weights + workspace {both} {over}")  # fmt: skip
    most = memory.max_concurrency
    if most is not None and most < wanted:
        seq = memory.paged_kv_per_sequence_bytes
        return Reason("KV", f"KV for {wanted} sequences does not fit: at most {most} ({binary_bytes(seq)} each; "
                      f"{share})", f"KV for at most {most} of {wanted} sequences")  # fmt: skip
    return None


@dataclass(frozen=True)
class Unit:
    """One engine of a layout on a device (a TP × PP replica, or one attention-DP rank of an EP group): its
    workload, the most sequences that fit, its step costs and its scheduler limits."""

    config: ResolvedShape
    device: Device
    layout: Layout
    w: Workload
    ranks: int  # engines per replica (attention-DP ranks; 1 without)
    most: int | None  # the most sequences of the full length whose KV fits (per engine)
    cost: StepCost
    engine: Engine
    decode: Callable[[int], float]
    paged_tokens: int
    memo: Memo | None = field(default=None, compare=False)  # the search's (build_unit's ``memo``)

    @property
    def kv_tokens(self) -> float:
        """The KV cache's capacity in tokens: the most full-length sequences that fit × their paged tokens."""
        return math.inf if self.most is None else float(self.most * self.paged_tokens)

    @property
    def cap(self) -> int:
        """The most sequences the engine runs: the KV limit and max_num_seqs."""
        return self.engine.max_num_seqs if self.most is None else min(self.most, self.engine.max_num_seqs)


def _estimate(
    config: ResolvedShape, device: Device, kv_dtype: str | None, memo: Memo | None
) -> Callable[[Workload], RooflineEstimate]:
    request = TimeRequest(device=device, kv_dtype=kv_dtype)

    def call(w: Workload) -> RooflineEstimate:  # analyze's call without --efficiency: the same numbers
        # the search reads the expected times only; the traffic is the same on every device (the memo's)
        return estimate_time(config, w, request, lower_bound=False, memo=memo)

    return call


def build_unit(config: ResolvedShape, device: Device, layout: Layout, request: ServingRequest,
               price: Price | None, memo: Memo | None = None) -> Unit | ServingRow:  # fmt: skip
    """The engine of ``layout`` on ``device``, or the row saying why it does not hold the model; ``memo`` keeps
    the device-independent work (the time model's traffic, the memory estimates) for the search's other devices."""
    w = replace(
        request.workload, parallel=Parallelism(tp=layout.tp, pp=layout.pp, dp=layout.dp, ep=layout.ep)
    )
    w = device_dtype(device, w, request.dtype_fallback)
    usable = int(device.memory * request.utilization)
    most = max_concurrency(config, w, usable, request.kv_dtype, memo=memo)
    if most == 0:
        memory = serving_memory(config, w, 1, device.memory, request.utilization, request.kv_dtype, most=most,
                                memo=memo)  # fmt: skip
        reason = _memory_reason(memory, 1) or Reason(
            "workspace", "the weights and one prompt's workspace do not fit"
        )
        return ServingRow(layout, price, w.dtype, memory, most, reasons=(reason,))
    defaults = default_engine(device.memory, device.name)
    engine = Engine(request.max_num_seqs or defaults.max_num_seqs,
                    request.max_num_batched_tokens or defaults.max_num_batched_tokens,
                    kv_admission=request.kv_admission)  # fmt: skip
    prompt = computed_prompt(w.seq_len, request.prefix_hit)
    timed = replace(w, seq_len=prompt) if prompt != w.seq_len else w
    estimate = _estimate(config, device, request.kv_dtype, memo)
    batched: Callable[[int], float] | None = None
    if layout.ep > 1:
        decode, prefill = rank_times(config, timed, device, layout.dp, estimate)
    else:

        def decode(n: int) -> float:  # analyze's mean decode step at batch n over the generation
            return estimate(replace(w, batch_size=n)).decode_s_per_token_mean or 0.0

        def prefill_of(b: int) -> float:  # analyze's prefill of b prompts in one batch
            return estimate(replace(timed, batch_size=b, gen_tokens=0)).prefill_s or 0.0

        batched, prefill = prefill_of, prefill_of(1)
    cap = engine.max_num_seqs if most is None else min(most, engine.max_num_seqs)
    cost = StepCost.build(
        decode, prefill, prompt, max(cap, 1), request.speculation, engine.host_step_s, batched
    )
    probe = serving_memory(
        config, w, 1, device.memory, request.utilization, request.kv_dtype, most=most, memo=memo
    )
    return Unit(config, device, layout, w, layout.dp if layout.ep > 1 else 1, most, cost, engine, decode,
                max(probe.paged_tokens_per_sequence, 1), memo)  # fmt: skip


def serve(u: Unit, request: ServingRequest, replicas: int, price: Price | None, per_engine: int | None = None
          ) -> ServingRow:  # fmt: skip
    """``replicas`` copies of ``u``'s layout under the request's load, or ``per_engine`` in flight on each
    engine (neither a concurrency nor a rate asked for)."""
    layout = replace(u.layout, replicas=replicas)
    engines = replicas * u.ranks
    w = u.w
    if per_engine is not None:
        c, total = per_engine, per_engine * engines
    elif request.concurrency is not None:
        c, total = -(-request.concurrency // engines), request.concurrency
    else:
        c, total = 0, 0
    memory = serving_memory(u.config, w, max(c, 1), u.device.memory, request.utilization, request.kv_dtype,
                            most=u.most, memo=u.memo)  # fmt: skip
    over: tuple[str, ...] = ()
    if c and u.most is not None and c > u.most:  # the scheduler queues the rest for KV slots: shown, not ok
        reason = _memory_reason(memory, c) or Reason(
            "KV", f"KV for {c} sequences does not fit: at most {u.most}"
        )
        text = str(reason)
        if layout.tp > 1 and _latent(u.config):
            text += ("; MLA's compressed KV is replicated on every TP rank (attention data-parallel holds each "
                     "request's once)")  # fmt: skip
        over = (Reason(reason_code(reason), text + "; the rest wait for KV slots", reason_brief(reason)),)
        memory = serving_memory(u.config, w, u.most, u.device.memory, request.utilization, request.kv_dtype,
                                most=u.most, memo=u.memo)  # fmt: skip
    g = max(w.gen_tokens, 1)
    if c:
        load = simulate(u.cost, u.engine, w.seq_len, g, u.kv_tokens, concurrency=c, seed=request.seed)
        scale = total / c  # the engines, the busiest holding c of the total
        if not load.measured:  # no request completed within the simulation's bound: no figure to show
            why = Reason("load", f"{c} in flight per engine of at most {u.cap} sequences: no request completes "
                         f"within the scheduler's bound ({load.preemptions:,} preemptions in {load.steps:,} steps)",
                         f"{c} in flight: no request completes")  # fmt: skip
            return ServingRow(layout, price, w.dtype, memory, u.most, reasons=(*over, why))
    else:
        assert request.rate is not None
        load = simulate(u.cost, u.engine, w.seq_len, g, u.kv_tokens, rate=request.rate / engines,
                        seed=request.seed)  # fmt: skip
        scale = float(engines)
        if not load.sustained or load.requests_per_s < 0.9 * request.rate / engines:
            why = Reason("rate", f"rate {request.rate:g}/s exceeds what {engines} engine(s) of at most {u.cap} "
                         "sequences sustain (the queue grows without bound)",
                         f"rate {request.rate:g}/s > what {engines} engine(s) sustain")  # fmt: skip
            return ServingRow(layout, price, w.dtype, memory, u.most, reasons=(why,))
    batch = c or max(1, min(u.cap, math.ceil(load.mean_running)))
    in_flight = float(total) if total else load.requests_per_s * load.e2e.mean * engines  # Little's law
    times = ServingTimes(in_flight, batch, engines, u.cost.prefill_s, u.decode(batch), load.ttft.mean,
                         load.tpot.mean, load.tokens_per_s * scale, load.requests_per_s * scale, load.e2e.mean,
                         load, u.engine)  # fmt: skip
    if batch != max(c, 1) and not over:
        memory = serving_memory(u.config, w, batch, u.device.memory, request.utilization, request.kv_dtype,
                                most=u.most, memo=u.memo)  # fmt: skip
    return ServingRow(
        layout, price, w.dtype, memory, u.most, times, over + tuple(request.objectives.misses(times))
    )


def _latent(config: ResolvedShape) -> bool:
    return any(b.attention is not None and b.attention.kind == "mla" for b in config.named_blocks.values())


def _most_meeting(u: Unit, request: ServingRequest, price: Price | None) -> ServingRow:
    """Neither a concurrency nor a rate: as many in flight as the engine runs (the KV limit, max_num_seqs), or
    with latency objectives the most whose TTFT and TPOT still meet them (both grow with the load)."""
    top = serve(u, request, 1, price, per_engine=u.cap)
    o = request.objectives
    if (o.max_ttft_s is None and o.max_tpot_s is None) or _latency_met(o, top):
        return top
    lo, hi, best = 1, u.cap - 1, None
    while lo <= hi:  # the largest that meets them
        mid = (lo + hi) // 2
        row = serve(u, request, 1, price, per_engine=mid)
        if _latency_met(o, row):
            best, lo = row, mid + 1
        else:
            hi = mid - 1
    return best or serve(u, request, 1, price, per_engine=1)


def _latency_met(o: Objectives, row: ServingRow) -> bool:
    t = row.times
    return (
        t is not None
        and (o.max_ttft_s is None or t.ttft_s <= o.max_ttft_s)
        and (o.max_tpot_s is None or t.tpot_s <= o.max_tpot_s)
    )


def _replicated(u: Unit, request: ServingRequest, price: Price | None) -> ServingRow:
    """The fewest replicas within the device budget that meet every objective (throughput per device falls as the
    load spreads: the fewest is the cheapest); none does: the most replicas the budget allows, with its misses."""
    most_replicas = max(1, request.max_devices // u.layout.replica_devices)
    need = 1
    if request.concurrency is not None and u.most is not None:
        need = -(-request.concurrency // (u.ranks * max(u.most, 1)))  # replicas whose KV holds the load
    first = min(need, most_replicas)
    row = serve(u, request, first, price)
    if row.ok or first == most_replicas:
        return row
    last = serve(u, request, most_replicas, price)
    if not last.ok:
        return last
    lo, hi = first + 1, most_replicas  # the smallest that meets (the misses shrink as replicas grow)
    best = last
    while lo < hi:
        mid = (lo + hi) // 2
        r = serve(u, request, mid, price)
        if r.ok:
            best, hi = r, mid
        else:
            lo = mid + 1
    return best if best.layout.replicas == lo else serve(u, request, lo, price)


def evaluate(u: Unit, request: ServingRequest, price: Price | None) -> ServingRow:
    """One layout's engine under the request: the replicas (or the load per engine) that serve it."""
    if request.concurrency is None and request.rate is None:
        return _most_meeting(u, request, price)
    return _replicated(u, request, price)
