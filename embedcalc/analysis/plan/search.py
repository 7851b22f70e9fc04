"""The serving search of ``plan``: every device × layout (TP degrees within a node; attention-DP + EP groups for
MoE models; pipeline stages when one node is not enough) × replicas within the device budget, aggregated and — when
latency objectives are set — disaggregated (:mod:`.disaggregated`). Each layout is evaluated by
:mod:`.serving`; the conventions are stated in :mod:`embedcalc.analysis.plan.rows`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from embedcalc.analysis.memo import Memo
from embedcalc.analysis.plan.disaggregated import disaggregated
from embedcalc.analysis.plan.rows import NODE_DEVICES, Layout, Price, Reason, ServingRow
from embedcalc.analysis.plan.serving import (
    ServingRequest,
    Unit,
    build_unit,
    device_dtype,
    ep_degrees,
    evaluate,
    no_peak,
    tp_degrees,
)
from embedcalc.analysis.structure import stacks
from embedcalc.analysis.time.capability import kv_device_problem
from embedcalc.config.resolved import ResolvedShape
from embedcalc.devices.catalogue import Device


def _layers(config: ResolvedShape) -> int:
    return sum(s.num_layers for s in stacks(config))


def _holds(row: ServingRow) -> bool:
    """Whether the layout holds the model and the load (memory-wise)."""
    return row.times is not None and not (row.reasons and row.reasons[0].startswith("KV for"))


def plan_device(config: ResolvedShape, device: Device, request: ServingRequest, price: Price | None,
                degrees: list[int], ep: list[int], memo: Memo | None = None) -> list[ServingRow]:  # fmt: skip
    """Every TP degree within a node on ``device`` and, for MoE models, every attention-DP × EP degree; pipeline
    stages over more nodes (TP over the whole node) when no single-node layout holds the model and the load, up
    to ``request.max_devices``; ``memo``: the device-independent work (traffic, memory estimates) the devices of
    one search share."""
    w = device_dtype(device, request.workload, request.dtype_fallback)
    missing = no_peak(device, w)
    if missing is None and (why := kv_device_problem(device, request.kv_dtype)) is not None:
        missing = Reason("dtype", why, f"no {request.kv_dtype} KV cache (no FP4 tensor cores)")
    if missing:  # one row says it for the device
        return [ServingRow(Layout(device.name), price, w.dtype, reasons=(missing,))]
    layouts = [Layout(device.name, tp) for tp in degrees] + [Layout(device.name, dp=n, ep=n) for n in ep]
    rows = []
    for layout in layouts:
        unit = build_unit(config, device, layout, request, price, memo)
        if isinstance(unit, ServingRow):
            rows.append(unit)
            continue
        rows.append(evaluate(unit, request, price))
        split = _disaggregated(unit, request, price)
        if split is not None:
            rows.append(split)
    if not degrees or any(_holds(r) for r in rows):
        return rows
    tp = degrees[-1]
    for pp in range(2, min(_layers(config), request.max_devices // tp) + 1):
        unit = build_unit(config, device, Layout(device.name, tp, pp), request, price, memo)
        row = unit if isinstance(unit, ServingRow) else evaluate(unit, request, price)
        rows.append(row)
        if _holds(row):
            break
    return rows


def _disaggregated(u: Unit, request: ServingRequest, price: Price | None) -> ServingRow | None:
    """The xPyD row of ``u``'s layout, compared beside the aggregated one, when a latency objective and a load are
    asked for (disaggregation trades devices for TTFT and TPOT: without an objective it has nothing to win)."""
    o = request.objectives
    if o.max_ttft_s is None and o.max_tpot_s is None:
        return None
    if request.concurrency is None and request.rate is None:
        return None
    return disaggregated(u, request, price)


def plan_serving(
    config: ResolvedShape, devices: Sequence[tuple[Device, Price | None]], request: ServingRequest
) -> list[ServingRow]:
    """Every layout on every device, best first: the ones that fit and meet the objectives, cheapest per million
    output tokens first (device-seconds per token without a price), then the others."""
    most = min(NODE_DEVICES, request.max_devices)
    degrees, ep = tp_degrees(config, most), ep_degrees(config, most)
    memo = Memo()  # this search's: every device times the same workloads (its bound: Memo's)
    rows = [
        replace(row, kv_dtype=request.kv_dtype)
        for device, price in devices
        for row in plan_device(config, device, request, price, degrees, ep, memo)
    ]
    return sorted(rows, key=ServingRow.sort_key)


def plan_serving_kv(
    config: ResolvedShape,
    devices: Sequence[tuple[Device, Price | None]],
    request: ServingRequest,
    kv_dtypes: Sequence[str | None],
) -> list[ServingRow]:
    """:func:`plan_serving` once per KV cache dtype asked for, the rows together, best first: the KV dtype is a
    choice per layout (each row says its own), compared side by side (fp8 against bf16, nvfp4 on Blackwell)."""
    rows = [row for kv in kv_dtypes for row in plan_serving(config, devices, replace(request, kv_dtype=kv))]
    return sorted(rows, key=ServingRow.sort_key)
