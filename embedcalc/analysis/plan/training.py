"""The training search of ``plan``: device × count × (TP, PP, DP, ZeRO, recompute), each layout's per-device memory
by :func:`~embedcalc.analysis.memory.estimate_memory` and its step, wall time and device-hours by
:func:`~embedcalc.analysis.time.estimate.estimate_time` with the token budget — the calls ``analyze --mode training
--hardware D --train-tokens N`` makes. The layout rules (TP within a node, PP across nodes, DP the rest; the first
ZeRO stage and recompute level that fit) are stated in :mod:`embedcalc.analysis.plan.rows`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

from embedcalc.analysis.memo import Memo
from embedcalc.analysis.memory import MemoryEstimate, estimate_memory
from embedcalc.analysis.parallel import parallel_problems
from embedcalc.analysis.plan.rows import (
    DEFAULT_MAX_TRAINING_DEVICES,
    NODE_DEVICES,
    Layout,
    Price,
    Reason,
    TrainingRow,
)
from embedcalc.analysis.plan.serving import device_dtype, no_peak, tp_degrees
from embedcalc.analysis.structure import stacks
from embedcalc.analysis.time.estimate import TimeRequest, estimate_time
from embedcalc.analysis.workload import Parallelism, Recompute, Workload, context_problems
from embedcalc.config.resolved import ResolvedShape
from embedcalc.devices.catalogue import Device
from embedcalc.units import binary_bytes, seconds

RECOMPUTE_ORDER: tuple[Recompute, ...] = ("none", "selective", "full")


@dataclass(frozen=True)
class TrainingRequest:
    """The run to plan: the micro-batch workload, the token budget, the deadline and the global batch."""

    workload: Workload  # batch_size: the micro-batch per replica; its layout and recompute are searched
    train_tokens: int
    deadline_s: float | None = None
    global_batch: int | None = None  # sequences per optimizer step over all replicas
    max_devices: int = DEFAULT_MAX_TRAINING_DEVICES
    dtype_fallback: bool = False  # the dtype was not given: fp16 where a device has no bf16 peak


def _powers(most: int) -> Iterator[int]:
    n = 1
    while n <= most:
        yield n
        n *= 2


MemoryCache = dict[Workload, MemoryEstimate]  # the same layout on every device has the same memory


def _fitting(
    config: ResolvedShape, w: Workload, limit: int, cache: MemoryCache
) -> tuple[Workload, MemoryEstimate, str] | tuple[None, MemoryEstimate, str]:
    """The first (recompute, ZeRO) that fits ``limit`` bytes per device, with why; else the leanest tried."""
    zeros = (1, 2, 3) if w.parallel.dp > 1 else (0,)
    memory = None
    for recompute in RECOMPUTE_ORDER:
        for zero in zeros:
            trial = replace(w, recompute=recompute, parallel=replace(w.parallel, zero=zero))
            memory = cache.get(trial)
            if memory is None:
                memory = cache[trial] = estimate_memory(config, trial)
            if memory.total_bytes <= limit:
                plain = recompute == "none" and zero == zeros[0]
                why = "fits as is" if plain else f"ZeRO {zero}" + (f", recompute {recompute}" if recompute != "none"
                                                                      else "") + " is what makes it fit"  # fmt: skip
                return trial, memory, why
    assert memory is not None
    return None, memory, f"does not fit even with recompute full{' and ZeRO 3' if w.parallel.dp > 1 else ''}"


def evaluate_training(
    config: ResolvedShape,
    device: Device,
    tp: int,
    pp: int,
    dp: int,
    request: TrainingRequest,
    price: Price | None,
    cache: MemoryCache | None = None,
    cp: int = 1,
    memo: Memo | None = None,
) -> TrainingRow:
    base = replace(request.workload, parallel=Parallelism(tp=tp, pp=pp, dp=dp, cp=cp))
    layout = Layout(device.name, tp, pp, dp, cp=cp)
    gb = request.global_batch
    if gb is not None and gb % (base.batch_size * dp):
        why = f"--global-batch {gb} is not a multiple of micro-batch {base.batch_size} × DP {dp}"
        return TrainingRow(layout, price, base.dtype, reasons=(Reason("batch", why),))
    w, memory, why = _fitting(config, base, device.memory, {} if cache is None else cache)
    if w is None:
        need, have = binary_bytes(memory.total_bytes), binary_bytes(device.memory)
        return TrainingRow(layout, price, base.dtype, memory.total_bytes, device.memory, reasons=(Reason(
            "memory", f"memory does not fit: {need} per device > {have} ({why})", f"memory {need} > {have}"),),
            memory_choice=why, memory=memory.as_dict())  # fmt: skip
    layout = Layout(device.name, tp, pp, dp, w.parallel.zero, w.recompute, cp=cp)
    request_time = TimeRequest(device=device, train_tokens=request.train_tokens, devices=layout.devices,
                               price_per_hour=price.per_device_hour if price else None,
                               global_batch=request.global_batch)  # fmt: skip
    # the expected times only (no row shows the roofline at peak); ``memo``: the traffic the devices share
    estimate = estimate_time(config, w, request_time, memory.model_state_bytes, lower_bound=False, memo=memo)
    run = estimate.times_json()
    train = run["train"]
    reasons: tuple[str, ...] = ()
    if request.deadline_s is not None and train["wall_s"] > request.deadline_s:
        over = train["wall_s"] - request.deadline_s
        reasons = (Reason("deadline", f"deadline {seconds(request.deadline_s)}: takes {seconds(train['wall_s'])} "
                          f"({seconds(over)} over)"),)  # fmt: skip
    return TrainingRow(layout, price, w.dtype, memory.total_bytes, device.memory, run["step_s"], train["wall_s"],
                       train["device_hours"], request.deadline_s, reasons, why, memory.as_dict(), train)  # fmt: skip


def _device_rows(config: ResolvedShape, device: Device, request: TrainingRequest, price: Price | None,
                 cache: MemoryCache, memo: Memo | None = None) -> list[TrainingRow]:  # fmt: skip
    """TP at every accepted degree within a node, DP in powers of two; with TP over the whole node, the layout split
    further one doubling at a time along what fills the memory: context-parallel ranks (each holding 1 / cp of every
    sequence's activations) while the layout fits only by recomputing, or does not fit with the activations
    outweighing the model state (and the model and sequence allow it), else pipeline stages until it fits (each
    holding 1 / pp of the layers) — CP and PP only where they are needed, every layout tried listed."""
    most = request.max_devices
    degrees = tp_degrees(config, min(NODE_DEVICES, most))
    layers = sum(s.num_layers for s in stacks(config))
    rows = []
    for tp in degrees:
        for dp in _powers(most // tp):
            pp = cp = 1
            while True:
                row = evaluate_training(config, device, tp, pp, dp, request, price, cache, cp, memo)
                rows.append(row)
                if tp != degrees[-1]:
                    break
                # the sequence is what fills the memory: without recomputation its activations outweigh the model
                # state, and the layout fits only by recomputing or not at all
                plain = _unrecomputed(config, request, row, cp, cache)
                state = plain.weights_bytes + plain.gradients_bytes + plain.optimizer_bytes
                sequence = plain.activations_bytes > state and (
                    not row.fits or row.layout.recompute != "none"
                )
                if sequence and _splits(config, request, tp * 2 * cp * pp * dp, 2 * cp):
                    cp *= 2
                elif not row.fits and 2 * pp <= layers and tp * cp * 2 * pp * dp <= most:
                    pp *= 2
                else:
                    break
    return rows


def _unrecomputed(
    config: ResolvedShape, request: TrainingRequest, row: TrainingRow, cp: int, cache: MemoryCache
) -> MemoryEstimate:
    """The memory of ``row``'s layout at its ZeRO stage without recomputation (from the cache when it was tried)."""
    layout = row.layout
    w = replace(request.workload, recompute="none",
                parallel=Parallelism(tp=layout.tp, pp=layout.pp, dp=layout.dp, cp=cp, zero=layout.zero))  # fmt: skip
    memory = cache.get(w)
    if memory is None:
        memory = cache[w] = estimate_memory(config, w)
    return memory


def _splits(config: ResolvedShape, request: TrainingRequest, devices: int, cp: int) -> bool:
    """Whether ``cp`` context-parallel ranks are allowed: within the device budget, a sequence of whole 2·cp chunks
    and a model whose attention the ring layout handles (analyze's own checks)."""
    if devices > request.max_devices:
        return False
    w = replace(request.workload, parallel=Parallelism(cp=cp))
    return not context_problems(w) and not parallel_problems(config, w.parallel)[0]


def plan_training(
    config: ResolvedShape, devices: Sequence[tuple[Device, Price | None]], request: TrainingRequest
) -> list[TrainingRow]:
    """Every training layout on every device: those that fit first, within the deadline first, fastest first."""
    rows: list[TrainingRow] = []
    cache: MemoryCache = {}
    memo = Memo()  # this search's: the layouts' traffic, the same on every device (its bound: Memo's)
    for device, price in devices:
        w = device_dtype(device, request.workload, request.dtype_fallback)
        missing = no_peak(device, w)
        if missing:  # one row says it for the device
            rows.append(TrainingRow(Layout(device.name), price, w.dtype, reasons=(missing,)))
            continue
        rows += _device_rows(config, device, replace(request, workload=w), price, cache, memo)
    return sorted(rows, key=TrainingRow.sort_key)
