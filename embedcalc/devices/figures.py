"""A device's numbers (DESIGN.md §10): every figure is a value with its ``source`` (a key of the device's
``sources`` or the citation written out) and an optional note on how it was read or measured; each kind of figure
bounds its value so that a slipped unit (GB/s written for B/s, microseconds for seconds) fails validation. The
device schema that holds them is :mod:`embedcalc.devices.catalogue`.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator

_MAX_BYTES = 1 << 50  # 1 PiB of memory per device
_MIN_BANDWIDTH = 1e6  # 1 MB/s: catches GB/s written as B/s; with _MIN_FLOPS keeps every roofline time finite
_MAX_BANDWIDTH = 1e15  # 1 PB/s
_MAX_PRICE = 1e4  # USD per device-hour: far above any rental (a bound that catches a slipped unit)

BASE = ConfigDict(extra="forbid", frozen=True)


class Figure(BaseModel):
    """One published (or measured) number and where it comes from."""

    model_config = BASE

    value: Annotated[float, Field(gt=0, allow_inf_nan=False)] = Field(description="The number, in SI units.")
    source: str = Field(
        min_length=1,
        description="Where the number comes from: a key of the device's `sources`, or the citation itself.",
    )
    note: str | None = Field(
        default=None,
        description="How the number was read (e.g. 'datasheet: 1,979 TFLOPS with sparsity / 2').",
    )


class ByteFigure(Figure):
    """A figure that counts bytes: a whole number."""

    value: Annotated[float, Field(gt=0, le=_MAX_BYTES)] = Field(description="Bytes.")

    @field_validator("value")
    @classmethod
    def _whole(cls, value: float) -> float:
        if value != int(value):
            raise ValueError(f"a byte count is a whole number, got {value}")
        return value


class RateFigure(Figure):
    """A bandwidth: bytes per second, from 1 MB/s to 1 PB/s (bounds that catch GB/s or TB/s written for B/s)."""

    value: Annotated[float, Field(ge=_MIN_BANDWIDTH, le=_MAX_BANDWIDTH, allow_inf_nan=False)] = Field(
        description="Bytes per second."
    )


class GemvFigure(RateFigure):
    """A measured GEMV rate: bytes per second a matmul through one row reaches reading its weights from memory
    (``value``), and through 1, 2, ... rows (``by_rows``), where the kernel may change with the rows."""

    by_rows: list[Annotated[float, Field(ge=_MIN_BANDWIDTH, le=_MAX_BANDWIDTH, allow_inf_nan=False)]] = Field(
        default_factory=list,
        description="Bytes per second through 1, 2, ... rows (the first is `value`); empty: `value` at every row.",
    )

    def at(self, rows: float) -> float:
        """The rate through ``rows`` rows (at least 1): seconds per byte interpolated linearly between the rows
        measured on either side, the last measured beyond them."""
        rates = self.by_rows or [self.value]
        r = min(max(rows, 1.0), float(len(rates)))
        lo = int(r)
        hi = min(lo + 1, len(rates))
        part = r - lo
        if part == 0:  # measured rows: the rate as measured
            return rates[lo - 1]
        return 1.0 / ((1 - part) / rates[lo - 1] + part / rates[hi - 1])


class PriceFigure(Figure):
    """A default price per device-hour (USD, on-demand) from a public price list, with the date it was read."""

    value: Annotated[float, Field(gt=0, le=_MAX_PRICE, allow_inf_nan=False)] = Field(
        description="US dollars per device-hour, on demand (a default: `--price-per-hour` overrides it)."
    )
    date: str = Field(
        pattern=r"^\d{4}-\d{2}-\d{2}$", description="The day the price was read off its list (YYYY-MM-DD)."
    )


class LatencyFigure(Figure):
    """A latency in seconds, at most 100 ms (a bound that catches microseconds written as seconds' count; a
    measured loopback hop of processes that share a busy CPU takes milliseconds)."""

    value: Annotated[float, Field(gt=0, le=0.1, allow_inf_nan=False)] = Field(description="Seconds.")


class FractionFigure(Figure):
    """A fraction: above 0, at most 1."""

    value: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] = Field(description="A fraction (0, 1].")
