"""The time options of analyze, compare and sweep (one option group, :class:`TimeFlags`): --hardware, --efficiency,
--kv-dtype, --train-tokens, --devices, --price-per-hour; and applying them to an analysis (roofline time, capacity,
KV dtype)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Annotated, Any

import typer

from embedcalc.analysis.budget import SizeError, parse_size
from embedcalc.analysis.workload import KvDtype
from embedcalc.cli.options import cli_field
from embedcalc.cli.output import require_finite
from embedcalc.config.limits import count_problem, efficiency_problem, price_problem
from embedcalc.errors import UnsupportedEnvironmentError

if TYPE_CHECKING:  # the roofline model and the device catalogue load only when time is asked for (start-up)
    from embedcalc.analysis.report import Analysis
    from embedcalc.analysis.roofline import Efficiency, RooflineEstimate
    from embedcalc.config.hardware import Device


def _efficiency(value: str | None) -> str | None:
    if value is None or value == "measured":
        return value
    try:
        number: object = float(value)
    except ValueError:
        number = value
    if (why := efficiency_problem(number)) is not None:
        raise typer.BadParameter(f"{value!r}: {why}, or `measured`")
    return value


def _price(value: float | None) -> float | None:
    if value is not None and (why := price_problem(value)) is not None:
        raise typer.BadParameter(f"{value}: {why}")
    return value


def _devices(value: int | None) -> int | None:
    if value is not None and (why := count_problem(value)) is not None:
        raise typer.BadParameter(f"{len(str(value)):,} digits: {why}" if len(str(value)) > 40 else f"{value}: {why}")
    return value


def _count(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return parse_size(value, "count")
    except SizeError as exc:
        raise typer.BadParameter(str(exc)) from None


def _one_device(value: list[str] | None) -> list[str] | None:
    """Option callback: ``--hardware`` names one device; given twice, the second would silently replace the first."""
    if value and len(value) > 1:
        raise typer.BadParameter(
            f"given {len(value)} times ({', '.join(value)}); name one device (compare devices with one command each)"
        )
    return value


def _first(value: list[str] | None) -> str | None:
    return value[0] if value else None


HardwareOption = Annotated[
    list[str] | None,
    typer.Option(
        "--hardware",
        metavar="NAME|FILE",
        callback=_one_device,
        help="Predict time on this device by the roofline model (`embedcalc hardware` lists them; `local` is this "
        "machine as `bench --peak` measured it; or a device YAML file): prefill, decode per token, tokens/s, "
        "step time, and the largest batch and context that fit its memory.",
    ),
]
EfficiencyOption = Annotated[
    str | None,
    typer.Option(
        "--efficiency",
        metavar="F|measured",
        callback=_efficiency,
        help="Fraction of peak FLOP/s and bandwidth reached (default 1: times are lower bounds); `measured`: "
        "what the last `bench --peak` on this device reached of its datasheet.",
    ),
]
KvDtypeOption = Annotated[
    KvDtype | None,
    typer.Option("--kv-dtype", help="KV cache dtype, apart from the weights (default: the activations')."),
]
TrainTokensOption = Annotated[
    int | None,
    typer.Option(
        "--train-tokens",
        metavar="N",
        parser=_count,
        help="With --hardware and --mode training: wall time, device-hours and cost of N tokens (2T, 3e11).",
    ),
]
DevicesOption = Annotated[
    int | None,
    typer.Option("--devices", min=1, callback=_devices, help="Devices for --train-tokens (default tp × pp × dp)."),
]
PriceOption = Annotated[
    float | None,
    typer.Option(
        "--price-per-hour", min=0.0, metavar="P", callback=_price, help="Price of one device-hour, for the cost."
    ),
]


@dataclass(frozen=True)
class TimeFlags:
    """The time options of one command (an option group, see :mod:`embedcalc.cli.options`); the combination is
    checked when they are gathered (usage errors, exit 2)."""

    hardware: str | None = cli_field(None, HardwareOption, _first)
    efficiency: EfficiencyOption = None
    kv_dtype: KvDtypeOption = None
    train_tokens: TrainTokensOption = None
    devices: DevicesOption = None
    price_per_hour: PriceOption = None

    def __post_init__(self) -> None:
        if self.hardware is None:
            for flag, value in (("--efficiency", self.efficiency), ("--train-tokens", self.train_tokens),
                                ("--price-per-hour", self.price_per_hour)):  # fmt: skip
                if value is not None:
                    raise typer.BadParameter(f"{flag} needs --hardware NAME", param_hint=f"'{flag}'")
        if (self.devices is not None or self.price_per_hour is not None) and self.train_tokens is None:
            raise typer.BadParameter(
                "--devices and --price-per-hour apply to --train-tokens N", param_hint="'--devices'"
            )


def _measured_efficiency(device: Device, dtype: str) -> Efficiency:
    from embedcalc.analysis.roofline import Efficiency
    from embedcalc.config.hardware import LOCAL, load_local, peak_dtype

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
    analysis: Analysis, options: TimeFlags, max_memory: int | None = None
) -> tuple[Analysis, RooflineEstimate | None]:
    """The analysis with its KV cache in --kv-dtype, and its roofline estimate: when a device is named, or a
    memory limit (``max_memory``, --max-memory) asks for the largest batch and context that fit (None otherwise)."""
    w = analysis.workload
    kv = options.kv_dtype
    wanted = options.hardware is not None or max_memory is not None
    if kv is None and not wanted:
        return analysis, None
    from embedcalc.analysis.roofline import Efficiency
    from embedcalc.analysis.roofline_capacity import capacity, with_kv_dtype
    from embedcalc.analysis.roofline_time import TimeRequest, estimate_time
    from embedcalc.config.hardware import load_device

    analysis = replace(analysis, memory=with_kv_dtype(analysis.memory, w, kv))
    if not wanted:
        return analysis, None
    device = load_device(options.hardware) if options.hardware else None
    efficiency = Efficiency()
    if device is not None and options.efficiency == "measured":
        efficiency = _measured_efficiency(device, w.dtype)
    elif options.efficiency is not None:
        fraction = float(options.efficiency)
        efficiency = Efficiency(fraction, fraction, f"--efficiency {options.efficiency}")
    request = TimeRequest(
        device, efficiency, kv, options.train_tokens, options.devices, options.price_per_hour
    )
    m = analysis.memory
    estimate = estimate_time(
        analysis.config, w, request, m.weights_bytes + m.gradients_bytes + m.optimizer_bytes
    )
    require_finite(estimate.as_json(), f"{analysis.target}: time")
    if max_memory is not None:
        limit, source = max_memory, "--max-memory"
    elif device is not None:
        limit, source = device.memory, f"{device.name} memory"
    else:
        return analysis, estimate
    return analysis, replace(estimate, capacity=capacity(analysis.config, w, limit, source, kv))


def time_json(estimate: RooflineEstimate | None) -> dict[str, Any]:
    """``{"time": ...}`` to merge into a result's JSON, or nothing."""
    return {} if estimate is None else {"time": estimate.as_json()}
