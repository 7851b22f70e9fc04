"""The time options of analyze, compare and sweep applied to an analysis: the KV cache in its own dtype, the
roofline estimate on a named device (with a given or measured efficiency, and a whole training run), and the
largest batch and context that fit a memory limit.

:class:`TimeOptions` is what the CLI's ``--hardware``, ``--efficiency``, ``--kv-dtype``, ``--train-tokens``,
``--devices``, ``--price-per-hour`` and ``--global-batch`` give; the time model itself is
:mod:`embedcalc.analysis.time.estimate`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, cast

from embedcalc.analysis.workload import KvDtype
from embedcalc.api.workload import usage
from embedcalc.config.dtypes import KV_DTYPES, DtypeError, canonical_dtype
from embedcalc.config.limits import count_problem, efficiency_problem, plain_number, price_problem
from embedcalc.errors import UnsupportedEnvironmentError, require_finite

if TYPE_CHECKING:  # the roofline model and the device catalogue load only when time is asked for (start-up)
    from embedcalc.analysis.report import Analysis
    from embedcalc.analysis.roofline import Efficiency, RooflineEstimate
    from embedcalc.devices.catalogue import Device

__all__ = ["TimeOptions", "apply_time", "local_launches", "memory_limit", "time_options"]


def local_launches(config: Any, w: Any, device: Device | None) -> Any:
    """On ``local`` (this machine, where ``bench`` runs embedcalc's eager model), the kernels the eager model
    launches (:mod:`embedcalc.modeling.launches`, counted on the meta device) for an inference on one device;
    None elsewhere, or where the count cannot be made (the fused stack's count then)."""
    from embedcalc.devices.catalogue import LOCAL

    par = w.parallel
    if device is None or device.name != LOCAL or w.mode != "inference" or par.tp * par.pp * par.dp > 1:
        return None
    from embedcalc.analysis.time.model import Launches
    from embedcalc.devices.launch_memo import memo_key, recall, remember

    key = memo_key(config.model_dump(mode="json"), w.batch_size, w.seq_len, w.attention)
    counted = recall(key)  # counting imports torch and builds the model: seconds; remembered, a file read
    if counted is not None:
        return Launches(*counted)
    try:
        from embedcalc.modeling.launches import eager_launches

        counted = eager_launches(config, w.batch_size, w.seq_len, w.attention)
    except (ImportError, ValueError, TypeError, NotImplementedError, RuntimeError):
        return None  # no torch here, or a model the torch reference cannot run on meta: bench cannot run it either
    if counted is None:
        return None
    remember(key, counted)
    return Launches(*counted)


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


def _efficiency_text(efficiency: Any) -> str | None:
    """``efficiency`` as the CLI writes it: a fraction (0.6 -> ``"0.6"``), a mapping of roofs
    (``{"compute": 0.5, "memory": 0.8}`` -> ``"compute=0.5,memory=0.8"``), ``"measured"`` or the CLI's text."""
    value = plain_number(efficiency)
    if value is None or value == "measured":
        return cast("str | None", value)
    if isinstance(value, Mapping):
        text = ",".join(f"{k}={plain_number(v)!r}" for k, v in value.items())
    elif isinstance(value, int | float) and not isinstance(value, bool):
        text = repr(value)
    elif isinstance(value, str):
        text = value
    else:
        raise usage(f"efficiency must be a fraction such as 0.6, a mapping {{'compute': F, 'memory': F}} or "
                    f"'measured'; got {type(value).__name__}", "efficiency")  # fmt: skip
    from embedcalc.analysis.time.model import parse_efficiency

    try:
        parse_efficiency(text, efficiency_problem)
    except ValueError as exc:
        raise usage(f"efficiency {exc}, or 'measured'", "efficiency") from None
    return text


def _token_count(name: str, value: Any) -> int | None:
    """A count given as a number or, as the CLI takes it, a string with a suffix (``"100B"``, ``"2e12"``)."""
    value = plain_number(value)
    if isinstance(value, str):
        from embedcalc.analysis.budget import SizeError, parse_size

        try:
            value = parse_size(value, "count")
        except SizeError as exc:
            raise usage(f"{name}: {exc}", name) from None
    if value is not None and (why := count_problem(value)) is not None:
        raise usage(f"{name} {value!r:.40} is {why}", name)
    return cast("int | None", value)


def time_options(
    hardware: str | os.PathLike[str] | None = None,
    efficiency: Any = None,
    kv_dtype: str | None = None,
    train_tokens: int | str | None = None,
    devices: int | None = None,
    price_per_hour: float | None = None,
    global_batch: int | None = None,
) -> TimeOptions:
    """The Python API's time keywords as :class:`TimeOptions`, checked as the CLI checks its flags: usage errors
    (exit 2) naming the keyword, for a value out of bounds or a keyword that needs another (``efficiency``,
    ``train_tokens``, ``price_per_hour`` and ``global_batch`` need ``hardware``; ``devices`` and
    ``price_per_hour`` need ``train_tokens``)."""
    if hardware is not None and not isinstance(hardware, str | os.PathLike):
        raise usage(f"hardware must be one device: a catalogue name such as 'h100-sxm', 'local' or a device YAML "
                    f"file; got {type(hardware).__name__}", "hardware")  # fmt: skip
    name = None if hardware is None else os.fspath(hardware)
    if name is not None:
        from embedcalc.devices.resolve import UnknownDeviceError, load_device

        try:
            load_device(name)  # an unknown name is refused here, named as the API spells it
        except UnknownDeviceError:
            raise UnknownDeviceError(name, "hardware") from None
    kv: str | None = None
    if kv_dtype is not None:
        try:
            kv = canonical_dtype(kv_dtype, KV_DTYPES)
        except DtypeError as exc:
            raise usage(f"kv_dtype: {exc}", "kv_dtype") from None
    price = plain_number(price_per_hour)
    if price is not None and (why := price_problem(price)) is not None:
        raise usage(f"price_per_hour {price!r:.40} is {why}", "price_per_hour")
    options = TimeOptions(
        name, _efficiency_text(efficiency), cast("KvDtype | None", kv), _token_count("train_tokens", train_tokens),
        _token_count("devices", devices), None if price is None else float(price),
        _token_count("global_batch", global_batch),
    )  # fmt: skip
    if options.hardware is None:
        for key in ("efficiency", "train_tokens", "price_per_hour", "global_batch"):
            if getattr(options, key) is not None:
                raise usage(f"{key} needs hardware='NAME' (the device the time is for)", key)
    if options.train_tokens is None:
        for key in ("devices", "price_per_hour"):
            if getattr(options, key) is not None:
                raise usage(f"{key} applies to a training run: give train_tokens too", key)
    return options


def memory_limit(max_memory: int | str | None) -> int | None:
    """``max_memory`` (bytes, or the CLI's text such as ``"80GiB"``) as bytes; a usage error naming it otherwise."""
    value = plain_number(max_memory)
    if isinstance(value, str):
        from embedcalc.analysis.budget import SizeError, parse_size

        try:
            value = parse_size(value, "bytes")
        except SizeError as exc:
            raise usage(f"max_memory: {exc}", "max_memory") from None
    if value is not None and (why := count_problem(value)) is not None:
        raise usage(f"max_memory {value!r:.40} is {why} (bytes, or a size such as '80GiB')", "max_memory")
    return cast("int | None", value)


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
    from embedcalc.analysis.time.capability import kv_refusal
    from embedcalc.analysis.time.estimate import TimeRequest, estimate_time, small_step_warning
    from embedcalc.devices.resolve import load_device

    if (refused := kv_refusal(analysis.config, None, kv)) is not None:
        raise refused  # before any count: the cache's widths cannot hold the format
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
        global_batch=options.global_batch, launches=local_launches(analysis.config, w, device),
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
