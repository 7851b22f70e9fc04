"""``bench --peak``: the device's measured matmul peak beside its datasheet peak, and the memory bandwidth and
per-kernel overhead measured and cached with it as the ``local`` device (``--hardware local``).

The matmul peak is the best of a few large square GEMMs (:func:`embedcalc.modeling.timing.measure_matmul_peak`);
the datasheet peak is looked up only for a CUDA device (never another device's number for a CPU). Bandwidth is
STREAM copy and triad (:mod:`embedcalc.modeling.bandwidth`); the overhead a chain of tiny kernels
(:func:`embedcalc.modeling.timing.measure_kernel_overhead`), which the expected time of ``local`` uses in place of
the calibration's constant.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from embedcalc.config.hardware import datasheet_peak

if TYPE_CHECKING:  # torch loads with the measurement, not with the analyzer
    from embedcalc.modeling.timing import PeakMeasurement


@dataclass(frozen=True)
class LocalMeasurement:
    """This machine's memory bandwidth, per-kernel overhead and size as cached for ``local``, and how it compares
    with the catalogue."""

    memory_bandwidth_bytes_per_s: float
    copy_bytes_per_s: float
    triad_bytes_per_s: float
    bandwidth_method: str
    kernel_overhead_s: float
    kernel_overhead_method: str
    gemm_half_rows: float | None
    gemm_rows_method: str | None
    memory_bytes: int
    catalogue_match: str | None
    efficiency: dict[str, float]
    cached_as: str
    cache_path: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class PeakResult:
    """The measured matmul peak of one device and dtype, its datasheet counterpart, and the ``local`` record."""

    device: str
    dtype: str
    size: int
    peak_flops_per_s: float
    spec_peak_flops_per_s: float | None
    spec_peak_source: str | None
    local: LocalMeasurement

    def measurement_json(self) -> dict[str, Any]:
        """The ``measurement`` object of ``bench --peak --format json``: the peak's keys, then the local ones."""
        return {"device": self.device, "dtype": self.dtype, "size": self.size,
                "peak_flops_per_s": self.peak_flops_per_s, "spec_peak_flops_per_s": self.spec_peak_flops_per_s,
                "spec_peak_source": self.spec_peak_source} | self.local.to_json()  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        """The ``results[]`` entry of ``embedcalc bench --peak --format json`` (no target)."""
        return {"target": None, "measurement": self.measurement_json()}


def peak_result(device: str, dtype: str, peak: PeakMeasurement, cuda: bool, local: LocalMeasurement) -> PeakResult:
    """Put the measured ``peak`` of ``device`` beside its datasheet peak (looked up for a CUDA device only)."""
    spec_flops, spec_source = datasheet_peak(device, dtype) if cuda else (None, None)
    return PeakResult(
        device=device, dtype=dtype, size=peak.size, peak_flops_per_s=peak.flops_per_s,
        spec_peak_flops_per_s=spec_flops, spec_peak_source=spec_source, local=local,
    )  # fmt: skip
