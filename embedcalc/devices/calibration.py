"""The time model's constants as data (DESIGN.md §14): ``time_calibration.json`` beside this module holds each
constant with its value, where it comes from (a source, or the published runs it was fitted on) and the measured
error of the calibration on the runs it was not fitted on. :func:`load_calibration` reads and validates it once;
the arithmetic that uses the constants is :mod:`embedcalc.analysis.time.model`.

``benchmarks/bench_published.py --fit`` refits the fitted constants on the runs its table marks ``fit`` and
rewrites this file; never a per-model factor: one number per kind of work, for every model and device.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from embedcalc.errors import ConfigError, Problem

CALIBRATION_PATH = Path(__file__).with_name("time_calibration.json")

_BASE = ConfigDict(extra="forbid", frozen=True)


class Constant(BaseModel):
    """One constant of the time model."""

    model_config = _BASE

    value: float = Field(
        gt=0, allow_inf_nan=False, description="The value, in SI units (seconds, a fraction)."
    )
    meaning: str = Field(min_length=1, description="What the constant is, in one sentence.")
    source: str = Field(
        min_length=1, description="Where it comes from: a citation, or 'fitted' on `fitted_on`."
    )


class CalibrationFile(BaseModel):
    """``time_calibration.json``: the constants, the runs they were fitted on, and the error measured."""

    model_config = _BASE

    name: str = Field(min_length=1, description="The calibration's name, printed with every expected time.")
    fitted_on: list[str] = Field(
        description="Ids of the published runs (benchmarks/bench_published.py) fitted on."
    )
    held_out: list[str] = Field(description="Ids of the published runs it was judged on, not fitted on.")
    held_out_median_error: float = Field(
        ge=0, description="Median |predicted / published - 1| on `held_out`."
    )
    held_out_max_ratio: float = Field(ge=1, description="Largest max(p/m, m/p) on `held_out`.")
    constants: dict[str, Constant] = Field(description="The constants by name (TimeConstants' fields).")


@dataclass(frozen=True)
class TimeConstants:
    """The constants the expected-time terms use (plain numbers; meanings in ``time_calibration.json``)."""

    gemm_fraction: float
    gemm_half_rows: float
    attention_fraction: float
    memory_fraction: float
    backward_fraction: float
    kernel_overhead_s: float
    link_fraction: float
    collective_base_s: float
    hop_latency_s: float
    gemv_max_rows: float
    dequant_ops_per_weight: float
    reference_matmul_fraction: float
    moe_dispatch_bytes: float
    moe_expert_load_cv: float
    fp4_gemm_fraction: float


@dataclass(frozen=True)
class Calibration:
    """A calibration: its constants and what it was fitted on and judged by."""

    name: str
    constants: TimeConstants
    fitted_on: tuple[str, ...]
    held_out: tuple[str, ...]
    held_out_median_error: float
    held_out_max_ratio: float

    def with_constants(self, **values: float) -> Calibration:
        """The same calibration with some constants replaced (the fit in benchmarks/bench_published.py)."""
        from dataclasses import replace

        return replace(self, constants=replace(self.constants, **values))


def parse_calibration(data: object, origin: str) -> Calibration:
    """Validate a calibration mapping (exit 3 naming the field when it is not one)."""
    try:
        parsed = CalibrationFile.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        path = ".".join(str(p) for p in first["loc"])
        message = f"{origin}: {path}: {first['msg']}"
        raise ConfigError(
            message, [Problem(path, message, "invalid_calibration")], "invalid_calibration"
        ) from None
    names = set(TimeConstants.__dataclass_fields__)
    if set(parsed.constants) != names:
        missing, extra = sorted(names - set(parsed.constants)), sorted(set(parsed.constants) - names)
        message = f"{origin}: constants must be exactly {', '.join(sorted(names))} (missing {missing}, extra {extra})"
        raise ConfigError(
            message, [Problem("constants", message, "invalid_calibration")], "invalid_calibration"
        )
    values = {k: v.value for k, v in parsed.constants.items()}
    return Calibration(parsed.name, TimeConstants(**values), tuple(parsed.fitted_on), tuple(parsed.held_out),
                       parsed.held_out_median_error, parsed.held_out_max_ratio)  # fmt: skip


@cache
def load_calibration() -> Calibration:
    """The shipped calibration."""
    return parse_calibration(json.loads(CALIBRATION_PATH.read_text(encoding="utf-8")), CALIBRATION_PATH.name)
