"""The time options of analyze, compare and sweep (one option group, :class:`TimeFlags`): --hardware, --efficiency,
--kv-dtype, --train-tokens, --devices, --price-per-hour, gathered into the API's
:class:`~embedcalc.api.timing.TimeOptions` (which :func:`embedcalc.api.timing.apply_time` applies)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Annotated

import typer

from embedcalc.analysis.budget import SizeError, parse_size
from embedcalc.cli.options import cli_field, dtype_metavar, dtype_parser
from embedcalc.config.dtypes import KV_DTYPES, dtype_choices
from embedcalc.config.limits import count_problem, efficiency_problem, price_problem

if TYPE_CHECKING:  # the roofline model loads only when time is asked for (start-up)
    from embedcalc.api.timing import TimeOptions


def _efficiency(value: str | None) -> str | None:
    if value is None or value == "measured":
        return value
    from embedcalc.analysis.time.model import parse_efficiency

    try:
        parse_efficiency(value, efficiency_problem)
    except ValueError as exc:
        raise typer.BadParameter(f"{exc}, or `measured`") from None
    return value


def _price(value: float | None) -> float | None:
    if value is not None and (why := price_problem(value)) is not None:
        raise typer.BadParameter(f"{value}: {why}")
    return value


def _devices(value: int | None) -> int | None:
    if value is not None and (why := count_problem(value)) is not None:
        raise typer.BadParameter(
            f"{len(str(value)):,} digits: {why}" if len(str(value)) > 40 else f"{value}: {why}"
        )
    return value


def _count(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        count = parse_size(value, "count")
    except SizeError as exc:
        raise typer.BadParameter(str(exc)) from None
    return _devices(count)  # the bound of every count flag (30 digits): exit 2 here as for --devices


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
        metavar="F|compute=F,memory=F|measured",
        callback=_efficiency,
        help="Replace the calibrated time model's achieved fractions of peak FLOP/s and bandwidth (default: the "
        "shipped calibration, by kind of work and shape) with one fraction, one per roof, or `measured`: what the "
        "last `bench --peak` on this device reached of its datasheet. The lower bound stays at peak.",
    ),
]
KvDtypeOption = Annotated[
    str | None,
    typer.Option(
        "--kv-dtype",
        parser=dtype_parser(KV_DTYPES),
        metavar=dtype_metavar(KV_DTYPES),
        help=f"KV cache dtype, apart from the weights ({dtype_choices(KV_DTYPES, ' | ')}; default: the activations').",
    ),
]


def _kv_dtype_list(value: str) -> str:
    """``fp8,nvfp4`` -> each a KV dtype by its short name (exit 2 otherwise), joined by commas again."""
    parse = dtype_parser(KV_DTYPES)
    return ",".join(parse(part) for part in value.split(","))


KvDtypesOption = Annotated[
    str | None,
    typer.Option(
        "--kv-dtype",
        parser=_kv_dtype_list,
        metavar=dtype_metavar(KV_DTYPES) + "[,...]",
        help=f"KV cache dtype, apart from the weights ({dtype_choices(KV_DTYPES, ' | ')}; default: the "
        "activations'); several, comma-separated (fp8,nvfp4), plan every layout once per KV dtype, each row with its "
        "own (nvfp4: devices with FP4 tensor cores only).",
    ),
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
    typer.Option(
        "--devices", min=1, callback=_devices, help="Devices for --train-tokens (default tp × pp × dp)."
    ),
]
PriceOption = Annotated[
    float | None,
    typer.Option(
        "--price-per-hour",
        min=0.0,
        metavar="P",
        callback=_price,
        help="Price of one device-hour, for the cost.",
    ),
]

GlobalBatchOption = Annotated[
    int | None,
    typer.Option(
        "--global-batch",
        min=1,
        callback=_devices,
        help="With --mode training: sequences per optimizer step over all data-parallel replicas (--batch-size "
        "stays the micro-batch per replica, which memory is for); the accumulation steps are global / "
        "(micro-batch × dp).",
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
    global_batch: GlobalBatchOption = None

    def __post_init__(self) -> None:
        if self.hardware is None:
            for flag, value in (("--efficiency", self.efficiency), ("--train-tokens", self.train_tokens),
                                ("--price-per-hour", self.price_per_hour),
                                ("--global-batch", self.global_batch)):  # fmt: skip
                if value is not None:
                    raise typer.BadParameter(f"{flag} needs --hardware NAME", param_hint=f"'{flag}'")
        if (self.devices is not None or self.price_per_hour is not None) and self.train_tokens is None:
            raise typer.BadParameter(
                "--devices and --price-per-hour apply to --train-tokens N", param_hint="'--devices'"
            )

    def options(self) -> TimeOptions:
        """The API's form of these flags."""
        from embedcalc.api.timing import TimeOptions

        return TimeOptions(**asdict(self))
