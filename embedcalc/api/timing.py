"""The time options of analyze, compare and sweep applied to an analysis: the KV cache in its own dtype, the
roofline estimate on a named device (with a given or measured efficiency, and a whole training run), and the
largest batch and context that fit a memory limit.

:class:`TimeOptions` is what the CLI's ``--hardware``, ``--efficiency``, ``--kv-dtype``, ``--train-tokens``,
``--devices``, ``--price-per-hour`` and ``--global-batch`` give; the time model itself is
:mod:`embedcalc.analysis.time.estimate`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from embedcalc.analysis.workload import KvDtype
from embedcalc.errors import UnsupportedEnvironmentError, require_finite

if TYPE_CHECKING:  # the roofline model and the device catalogue load only when time is asked for (start-up)
    from embedcalc.analysis.report import Analysis
    from embedcalc.analysis.roofline import Efficiency, RooflineEstimate
    from embedcalc.devices.catalogue import Device

__all__ = ["TimeOptions", "apply_time"]


@dataclass(frozen=True)
class TimeOptions:
    """What to estimate time for: ``hardware`` (a catalogue name, ``local`` or a device file), ``efficiency`` (a
    fraction in (0, 1] as a string, or ``measured``), the KV cache dtype, and a training run of ``train_tokens``
    tokens on ``devices`` devices at ``price_per_hour`` per device-hour."""

    hardware: str | None = None
    efficiency: str | None = None
    kv_dtype: KvDtype | None = None
    train_tokens: int | None = None
    devices: int | None = None
    price_per_hour: float | None = None
    global_batch: int | None = None


def _measured_efficiency(device: Device, dtype: str) -> Efficiency:
    from embedcalc.analysis.roofline import Efficiency
    from embedcalc.devices.catalogue import LOCAL, peak_dtype
    from embedcalc.devices.local import load_local

    if device.name == LOCAL:
        return Efficiency(1.0, 1.0, "measured: `local` is the measurement itself")
    local = load_local()
    m = local.measured
    key = peak_dtype(dtype)
    if m is None or m.matches != device.name or key not in m.efficiency or "memory" not in m.efficiency:
        raise UnsupportedEnvironmentError(
            f"--efficiency measured: no `bench --peak --dtype {dtype}` measurement on a {device.name} is cached "
            f"(the last one was on {m.device if m else 'another device'}); run it on that device, or give a "
            "fraction such as --efficiency 0.6",
            code="no_measured_efficiency",
        )
    return Efficiency(m.efficiency[key], m.efficiency["memory"],
                      f"measured by bench --peak on {m.measured_at} ({m.device})")  # fmt: skip


def apply_time(
    analysis: Analysis, options: TimeOptions, max_memory: int | None = None
) -> tuple[Analysis, RooflineEstimate | None]:
    """The analysis with its KV cache in ``options.kv_dtype``, and its roofline estimate: when a device is named,
    or a memory limit (``max_memory``, --max-memory) asks for the largest batch and context that fit (None
    otherwise)."""
    w = analysis.workload
    kv = options.kv_dtype
    wanted = options.hardware is not None or max_memory is not None
    if kv is None and not wanted:
        return analysis, None
    from embedcalc.analysis.memory.capacity_search import capacity, with_kv_dtype
    from embedcalc.analysis.roofline import Efficiency
    from embedcalc.analysis.time.estimate import TimeRequest, estimate_time, small_step_warning
    from embedcalc.devices.resolve import load_device

    analysis = replace(analysis, memory=with_kv_dtype(analysis.memory, w, kv))
    if not wanted:
        return analysis, None
    device = load_device(options.hardware) if options.hardware else None
    efficiency: Efficiency | None = None
    if device is not None and options.efficiency == "measured":
        efficiency = _measured_efficiency(device, w.dtype)
    elif options.efficiency is not None:
        from embedcalc.analysis.time.model import parse_efficiency
        from embedcalc.config.limits import efficiency_problem

        given = parse_efficiency(options.efficiency, efficiency_problem)
        efficiency = Efficiency(given.compute, given.memory, f"--efficiency {options.efficiency}")
    request = TimeRequest(
        device, efficiency, kv, options.train_tokens, options.devices, options.price_per_hour,
        global_batch=options.global_batch,
    )  # fmt: skip
    estimate = estimate_time(analysis.config, w, request, analysis.memory.model_state_bytes)
    require_finite(estimate.to_json(), f"{analysis.target}: time")
    if estimate.training is not None and (small := small_step_warning(estimate.training)) is not None:
        analysis = replace(analysis, warnings=[*analysis.warnings, small])
    if max_memory is not None:
        limit, source = max_memory, "--max-memory"
    elif device is not None:
        limit, source = device.memory, f"{device.name} memory"
    else:
        return analysis, estimate
    return analysis, replace(estimate, capacity=capacity(analysis.config, w, limit, source, kv))
