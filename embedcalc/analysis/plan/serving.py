"""The serving search of ``plan``: every device × tensor-parallel degree (× pipeline stages when one node is not
enough), each evaluated with ``analyze``'s own functions — serving memory
(:func:`~embedcalc.analysis.memory.serving.serving_memory`) and the prefill and decode-step times
(:func:`~embedcalc.analysis.time.estimate.estimate_time`) — and the queue model of
:mod:`embedcalc.analysis.plan.rows`. The conventions are stated once, there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from embedcalc.analysis.memory.capacity_search import largest
from embedcalc.analysis.memory.serving import (
    DEFAULT_UTILIZATION,
    ServingMemory,
    max_concurrency,
    serving_memory,
)
from embedcalc.analysis.parallel import parallel_problems
from embedcalc.analysis.plan.queue import ServingTimes, closed_loop, open_loop
from embedcalc.analysis.plan.rows import (
    DEFAULT_MAX_SEQS,
    NODE_DEVICES,
    Layout,
    Objectives,
    Price,
    ServingRow,
)
from embedcalc.analysis.roofline import RooflineEstimate
from embedcalc.analysis.structure import stacks
from embedcalc.analysis.time.estimate import TimeRequest, estimate_time
from embedcalc.analysis.workload import Parallelism, Workload
from embedcalc.config.resolved import ResolvedShape
from embedcalc.devices.catalogue import Device, peak_dtype
from embedcalc.units import binary_bytes


@dataclass(frozen=True)
class ServingRequest:
    """The workload to serve and what the layouts must reach."""

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


def device_dtype(device: Device, w: Workload, fallback: bool) -> Workload:
    """``w`` in fp16 on a device without a bf16 peak when the user did not choose the dtype (a T4, a V100:
    servers load a bf16 checkpoint in fp16 there); otherwise ``w`` unchanged."""
    if fallback and w.dtype == "bf16" and device.peak("bf16") is None and device.peak("fp16") is not None:
        return replace(w, dtype="fp16")
    return w


def tp_degrees(config: ResolvedShape, most: int) -> list[int]:
    """The tensor-parallel degrees up to ``most`` that ``analyze`` accepts for ``config``."""
    return [t for t in range(1, most + 1) if not parallel_problems(config, Parallelism(tp=t))[0]]


def _time(config: ResolvedShape, w: Workload, device: Device, request: ServingRequest) -> RooflineEstimate:
    """``analyze``'s time estimate for ``w`` on ``device`` (the same call its --hardware makes)."""
    # the time model's defaults, as analyze without --efficiency: the same call, the same numbers
    return estimate_time(config, w, TimeRequest(device=device, kv_dtype=request.kv_dtype))


def no_peak(device: Device, w: Workload) -> str | None:
    dtype = peak_dtype(w.dtype)
    if device.peak(dtype) is None:
        return f"{device.name} has no {dtype} peak (it lists {', '.join(device.peak_flops_per_s)}); choose --dtype"
    return None


def _memory_reason(memory: ServingMemory, wanted: int) -> str | None:
    usable = memory.usable_bytes or 0
    share = f"{binary_bytes(usable)} usable = {memory.utilization:.0%} of {binary_bytes(memory.device_bytes or 0)}"
    if memory.weights_bytes > usable:
        return f"weights do not fit: {binary_bytes(memory.weights_bytes)} per device > {share}"
    if memory.weights_bytes + memory.workspace_bytes > usable:
        return (f"weights + workspace do not fit: {binary_bytes(memory.weights_bytes)} + "
                f"{binary_bytes(memory.workspace_bytes)} per device > {share}")  # fmt: skip
    most = memory.max_concurrency
    if most is not None and most < wanted:
        seq = memory.paged_kv_per_sequence_bytes
        return f"KV for {wanted} sequences does not fit: at most {most} ({binary_bytes(seq)} each; {share})"
    return None


def _latency_met(objectives: Objectives, t: ServingTimes) -> bool:
    return (objectives.max_ttft_s is None or t.ttft_s <= objectives.max_ttft_s) and (
        objectives.max_tpot_s is None or t.tpot_s <= objectives.max_tpot_s
    )


def _times(
    config: ResolvedShape, w: Workload, device: Device, request: ServingRequest, batch: int, most: int
) -> ServingTimes | None:
    """The serving times at ``batch`` in flight (or at ``request.rate``). Without a load asked for and with a
    latency objective, the most sequences up to ``batch`` whose TTFT and TPOT still meet it (both grow with the
    batch); none does: one."""
    # the prefill of one prompt: analyze's prefill_s at batch 1 (which the generated tokens do not change)
    one = replace(w, batch_size=1, gen_tokens=0)
    prefill: float = _time(config, one, device, request).to_json()["prefill_s"]

    def step(n: int) -> float:  # analyze's mean decode step at batch n over the generation
        mean: float = _time(config, replace(w, batch_size=n), device, request).to_json()[
            "decode_s_per_token_mean"
        ]
        return mean

    if request.rate is not None:
        return open_loop(prefill, step, request.rate, w.gen_tokens, most)
    objectives = request.objectives
    if request.concurrency is None and (
        objectives.max_ttft_s is not None or objectives.max_tpot_s is not None
    ):

        def meets(c: int) -> bool:
            return _latency_met(objectives, closed_loop(prefill, step(c), c, w.gen_tokens))

        if meets(batch):
            pass
        elif not meets(1):
            batch = 1
        else:
            batch = largest(meets, 1, batch - 1)
    return closed_loop(prefill, step(batch), batch, w.gen_tokens)


def evaluate_serving(
    config: ResolvedShape, device: Device, layout: Layout, request: ServingRequest, price: Price | None
) -> ServingRow:
    """One layout: serving memory, the most sequences that fit, the times at the requested load, the reasons."""
    w = replace(request.workload, parallel=Parallelism(tp=layout.tp, pp=layout.pp))
    w = device_dtype(device, w, request.dtype_fallback)
    missing = no_peak(device, w)
    if missing:
        return ServingRow(layout, price, w.dtype, reasons=(missing,))
    usable = int(device.memory * request.utilization)
    if request.concurrency is not None:  # one call: the memory at the requested load, and the most that fit
        wanted = request.concurrency
        memory = serving_memory(config, w, wanted, device.memory, request.utilization, request.kv_dtype)
        most = memory.max_concurrency
    else:
        most = max_concurrency(config, w, usable, request.kv_dtype)
        wanted = max(1, DEFAULT_MAX_SEQS if most is None else min(most, DEFAULT_MAX_SEQS))
        memory = serving_memory(
            config, w, wanted, device.memory, request.utilization, request.kv_dtype, most=most
        )
    reason = _memory_reason(memory, 1 if request.rate is not None else wanted)
    if reason:
        return ServingRow(layout, price, w.dtype, memory, most, reasons=(reason,))
    room = most if most is not None else DEFAULT_MAX_SEQS
    times = _times(config, w, device, request, wanted, room)
    if times is None:
        why = (f"rate {request.rate:g}/s exceeds what {room} sequences in flight sustain"
               if request.rate is not None else "no steady state")  # fmt: skip
        return ServingRow(layout, price, w.dtype, memory, most, reasons=(why,))
    if times.batch != wanted:  # the memory of the batch the rate or the latency objectives keep running
        memory = serving_memory(config, w, times.batch, device.memory, request.utilization, request.kv_dtype,
                                most=most)  # fmt: skip
    return ServingRow(layout, price, w.dtype, memory, most, times, tuple(request.objectives.misses(times)))


def _layers(config: ResolvedShape) -> int:
    return sum(s.num_layers for s in stacks(config))


def _holds(row: ServingRow, request: ServingRequest) -> bool:
    """Whether the layout holds the model and the load asked for (memory-wise)."""
    needed = 1 if request.concurrency is None else request.concurrency
    return row.memory is not None and (row.max_concurrency is None or row.max_concurrency >= needed)


def plan_device(
    config: ResolvedShape, device: Device, request: ServingRequest, price: Price | None, degrees: list[int]
) -> list[ServingRow]:
    """Every TP degree within a node on ``device``; pipeline stages over more nodes (TP over the whole node) when
    no single-node layout holds the model and the load, up to ``request.max_devices``."""
    w = device_dtype(device, request.workload, request.dtype_fallback)
    missing = no_peak(device, w)
    if missing:  # one row says it for the device
        return [ServingRow(Layout(device.name), price, w.dtype, reasons=(missing,))]
    rows = [evaluate_serving(config, device, Layout(device.name, tp), request, price) for tp in degrees]
    if not degrees or any(_holds(r, request) for r in rows):
        return rows
    tp = degrees[-1]
    for pp in range(2, min(_layers(config), request.max_devices // tp) + 1):
        row = evaluate_serving(config, device, Layout(device.name, tp, pp), request, price)
        rows.append(row)
        if _holds(row, request):
            break
    return rows


def plan_serving(
    config: ResolvedShape, devices: Sequence[tuple[Device, Price | None]], request: ServingRequest
) -> list[ServingRow]:
    """Every layout on every device, best first: the ones that fit and meet the objectives, cheapest per million
    output tokens first (device-seconds per token without a price), then the others."""
    degrees = tp_degrees(config, min(NODE_DEVICES, request.max_devices))
    rows = [row for device, price in devices for row in plan_device(config, device, request, price, degrees)]
    return sorted(rows, key=ServingRow.sort_key)
