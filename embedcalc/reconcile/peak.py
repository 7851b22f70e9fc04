"""``bench --peak``: the device's measured matmul peak beside its datasheet peak, and the memory bandwidth and
per-kernel overhead measured and cached with it as the ``local`` device (``--hardware local``).

The matmul peak is the best of a few large square GEMMs (:func:`embedcalc.modeling.timing.measure_matmul_peak`); the
datasheet peak is looked up only for a CUDA device (never another device's number for a CPU). Bandwidth is STREAM
copy and triad (:mod:`embedcalc.modeling.bandwidth`), beside the bytes per second a one-row matmul reaches reading
weights from memory (the GEMV rate, which the expected time of ``local``'s decode GEMVs uses); the overhead a chain
of tiny kernels (:func:`embedcalc.modeling.timing.measure_kernel_overhead`), which the expected time of ``local``
uses in place of the calibration's constant. With ``--nproc N`` the all-reduce between N processes of this machine,
timed at a small and a large message (:mod:`embedcalc.modeling.loopback`), becomes local's ``loopback`` link: the
per-direction bandwidth and per-hop latency with which the α–β model of :mod:`embedcalc.analysis.time.comm` gives
back both measured times (:func:`loopback_link`), which ``analyze --hardware local --tp N`` then reads.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from embedcalc.analysis.comm.volumes import Collective
from embedcalc.analysis.time.comm import ring_steps
from embedcalc.devices.calibration import TimeConstants
from embedcalc.devices.catalogue import datasheet_peak

if TYPE_CHECKING:  # torch loads with the measurement, not with the analyzer
    from embedcalc.modeling.loopback import AllReduceMeasurement
    from embedcalc.modeling.timing import PeakMeasurement


@dataclass(frozen=True)
class LocalMeasurement:
    """This machine's memory bandwidth, per-kernel overhead, GEMV rate and size as cached for ``local``, and how it
    compares with the catalogue."""

    memory_bandwidth_bytes_per_s: float
    copy_bytes_per_s: float
    triad_bytes_per_s: float
    bandwidth_method: str
    kernel_overhead_s: float
    kernel_overhead_method: str
    gemm_half_rows: float | None
    gemm_rows_method: str | None
    gemv_bytes_per_s: float
    gemv_method: str
    memory_bytes: int
    catalogue_match: str | None
    efficiency: dict[str, float]
    cached_as: str
    cache_path: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class LoopbackLink:
    """The measured all-reduce of ``nproc`` processes of this machine and the link the α–β model makes of it
    (None where the two times do not determine one: the large message was not slower than the small)."""

    measured: AllReduceMeasurement
    per_direction_bytes_per_s: float | None
    latency_s: float | None
    method: str

    def to_json(self) -> dict[str, Any]:
        """The measurement's keys, then the link's."""
        link = {k: v for k, v in asdict(self).items() if k != "measured"}
        return asdict(self.measured) | link


def loopback_link(m: AllReduceMeasurement, c: TimeConstants) -> LoopbackLink:
    """Solve the α–β model of one all-reduce call (:func:`embedcalc.analysis.time.comm.collective_s`: base +
    steps × hop latency + wire bytes / (bandwidth × link fraction)) for the bandwidth and hop latency that give back
    the small and the large measured times: the difference of the two fixes the bandwidth, the small one the
    latency (at least 1 ns)."""
    calls = [
        Collective("all-reduce", "tp", m.nproc, "loopback", 1, size)
        for size in (m.small_bytes, m.large_bytes)
    ]
    small, large = (c_.wire_bytes for c_ in calls)
    steps = ring_steps(calls[0])
    method = (f"all-reduce of {m.nproc} {m.backend} processes of this machine, slowest rank's median of {m.repeat}: "
              f"{m.small_bytes:,} B in {m.small_s * 1e6:.1f} us, {m.large_bytes:,} B in {m.large_s * 1e3:.2f} ms; "
              f"the alpha-beta model (base {c.collective_base_s:g} s, {steps} hops, link fraction {c.link_fraction}) "
              "solved for the link that gives both back")  # fmt: skip
    if m.large_s <= m.small_s or large <= small:
        return LoopbackLink(m, None, None, method + ": not determined (the large message was not slower)")
    # bytes/s the wire moves at: bandwidth x link fraction
    effective = (large - small) / (m.large_s - m.small_s)
    latency = max((m.small_s - c.collective_base_s - small / effective) / steps, 1e-9)
    return LoopbackLink(m, effective / c.link_fraction, latency, method)


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
    loopback: LoopbackLink | None = None

    def measurement_json(self) -> dict[str, Any]:
        """The ``measurement`` object of ``bench --peak --format json``: the peak's keys, then the local ones (and
        with ``--nproc`` the ``loopback`` link)."""
        link = {} if self.loopback is None else {"loopback": self.loopback.to_json()}
        return {"device": self.device, "dtype": self.dtype, "size": self.size,
                "peak_flops_per_s": self.peak_flops_per_s, "spec_peak_flops_per_s": self.spec_peak_flops_per_s,
                "spec_peak_source": self.spec_peak_source} | self.local.to_json() | link  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        """The ``results[]`` entry of ``embedcalc bench --peak --format json`` (no target)."""
        return {"target": None, "measurement": self.measurement_json()}


def peak_result(
    device: str, dtype: str, peak: PeakMeasurement, cuda: bool, local: LocalMeasurement,
    loopback: LoopbackLink | None = None,
) -> PeakResult:  # fmt: skip
    """Put the measured ``peak`` of ``device`` beside its datasheet peak (looked up for a CUDA device only)."""
    spec_flops, spec_source = datasheet_peak(device, dtype) if cuda else (None, None)
    return PeakResult(
        device=device, dtype=dtype, size=peak.size, peak_flops_per_s=peak.flops_per_s,
        spec_peak_flops_per_s=spec_flops, spec_peak_source=spec_source, local=local, loopback=loopback,
    )  # fmt: skip
