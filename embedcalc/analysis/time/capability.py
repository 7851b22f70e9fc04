"""What a device runs a workload at: the peak its linear layers' GEMMs reach for the workload's dtype (and bf16's
for the matmuls an fp8 or FP4 dtype does not cover), and the refusals of a dtype or KV-cache format the device has
no units for (exit 3 naming the flag). The roofline of each component on those peaks is :class:`Roofline`; the
estimate that uses it is :mod:`embedcalc.analysis.time.estimate`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from embedcalc.analysis.memory import low_precision
from embedcalc.analysis.memory.capacity_search import kv_dtype_problem
from embedcalc.analysis.roofline.estimate import ComponentTime, Efficiency, Phase
from embedcalc.analysis.roofline.traffic import Traffic
from embedcalc.analysis.time.model import Fractions
from embedcalc.analysis.workload import Workload
from embedcalc.config.dtypes import ACTIVATION_DTYPE, FP4_DTYPES, FP4_KV_DTYPES
from embedcalc.config.resolved import ResolvedShape
from embedcalc.devices.catalogue import Device, PeakDtype, peak_dtype
from embedcalc.errors import Problem, UnsupportedEnvironmentError, WorkloadError


@dataclass(frozen=True)
class Roofline:
    """The device side: peak FLOP/s of the linear layers' GEMMs (the workload dtype's), bandwidth, efficiencies,
    and ``other_peak_flops_per_s`` for the matmuls the dtype does not cover (fp8, FP4: attention's cores, the LM
    head, the router run in bf16, and with ``parts`` ``experts`` every matrix but the routed experts';
    :func:`embedcalc.analysis.memory.inference.low_precision`), default the same. ``peak_dtype`` names the peak the
    GEMMs run at (bf16 for FP4 weights run weight-only on a device without FP4)."""

    peak_flops_per_s: float
    bandwidth_bytes_per_s: float
    efficiency: Efficiency
    other_peak_flops_per_s: float | None = None
    parts: str | None = None
    peak_dtype: PeakDtype | None = None

    def peak(self, key: str) -> float:
        if self.other_peak_flops_per_s is None or low_precision(key, parts=self.parts):
            return self.peak_flops_per_s
        return self.other_peak_flops_per_s

    def component(self, key: str, t: Traffic, fractions: tuple[float, float] = (1.0, 1.0)) -> ComponentTime:
        compute = t.flops / (self.peak(key) * self.efficiency.compute * fractions[0])
        memory = t.bytes / (self.bandwidth_bytes_per_s * self.efficiency.memory * fractions[1])
        return ComponentTime(key, t, compute, memory)

    def phase(self, name: str, traffic: Mapping[str, Traffic], fractions: Fractions | None = None,
              extra: tuple[tuple[str, float], ...] = ()) -> Phase:  # fmt: skip
        at = fractions or (lambda key: (1.0, 1.0))
        return Phase(name, tuple(self.component(k, t, at(k)) for k, t in traffic.items()), extra)


def _lacks(device: Device, dtype: str, what: str, code: str) -> WorkloadError:
    have = ", ".join(device.peak_flops_per_s)
    with_it = "H100, H200, L4, L40S, B200, MI300X" if what == "FP8" else "B200, GB200"
    message = (
        f"--dtype {dtype} --hardware {device.name}: the {device.title} has no {what} tensor cores (its "
        f"catalogue peaks: {have}); use --dtype bf16 or fp16 on it, or a device with {what} ({with_it})"
    )
    return WorkloadError(message, [Problem("--dtype", message, code)], code)  # fmt: skip


def kv_device_problem(device: Device, kv_dtype: str | None) -> str | None:
    """Why ``device`` cannot hold a KV cache in ``kv_dtype`` (None: it can): an FP4 cache needs a device with an FP4
    peak (config.dtypes.FP4_KV_DTYPES: the engines' NVFP4 KV kernels are Blackwell's)."""
    if kv_dtype in FP4_KV_DTYPES and device.peak("fp4") is None:
        return (f"--kv-dtype {kv_dtype} --hardware {device.name}: engines keep an NVFP4 KV cache only on devices with "
                f"FP4 tensor cores (Blackwell: B200, GB200), and the {device.title} has none; use --kv-dtype fp8 on "
                "it")  # fmt: skip
    return None


def kv_refusal(config: ResolvedShape, device: Device | None, kv_dtype: str | None) -> WorkloadError | None:
    """The error (exit 3) of a KV dtype the model's cached widths or the device cannot hold, naming --kv-dtype."""
    message = kv_dtype_problem(config, kv_dtype) or (
        None if device is None else kv_device_problem(device, kv_dtype)
    )
    if message is None:
        return None
    return WorkloadError(
        message, [Problem("--kv-dtype", message, "kv_dtype_unsupported")], "kv_dtype_unsupported"
    )


def gemm_peak_dtype(device: Device, w: Workload) -> PeakDtype:
    """The catalogue peak the workload's linear-layer GEMMs run at on ``device``: its dtype's; FP8's for MXFP4
    weights on a device with FP4 (W4A8: the activations in MXFP8); bf16's for a model's own FP4 weights on a device
    without FP4 (weight-only, dequantized). :mod:`embedcalc.config.dtypes` states the conventions."""
    gemm = peak_dtype(w.dtype)
    if device.peak(gemm) is None and w.dtype in FP4_DTYPES and w.dtype_source != "flag":
        return peak_dtype(ACTIVATION_DTYPE[w.dtype])
    if w.dtype == "mxfp4" and device.peak("fp8") is not None:
        return "fp8"
    return gemm


def device_roofline(
    device: Device, w: Workload, efficiency: Efficiency, parts: str | None = None
) -> Roofline:
    """The peaks for the workload's dtype on ``device``: its GEMMs' and, under fp8 and FP4, bf16's for the rest.
    A device without FP8, or without FP4 for an FP4 dtype chosen by ``--dtype``, refuses it (exit 3: the dtype
    cannot run there); a model's own FP4 weights run weight-only there, at the bf16 peak
    (:mod:`embedcalc.config.dtypes`). Exit 4 when the catalogue lacks another rate."""
    dtype = w.dtype
    have = ", ".join(device.peak_flops_per_s)
    if device.peak(peak_dtype(dtype)) is None and dtype == "fp8":
        raise _lacks(device, dtype, "FP8", "device_lacks_fp8")
    if device.peak(peak_dtype(dtype)) is None and dtype in FP4_DTYPES and w.dtype_source == "flag":
        raise _lacks(device, dtype, "FP4", "device_lacks_fp4")
    gemm = gemm_peak_dtype(device, w)
    peak = device.peak(gemm)
    other = device.peak(peak_dtype(ACTIVATION_DTYPE[dtype]))
    if peak is None or other is None:
        missing = gemm if peak is None else peak_dtype(ACTIVATION_DTYPE[dtype])
        raise UnsupportedEnvironmentError(
            f"--hardware {device.name}: no {missing} peak in the catalogue (it lists {have}); "
            f"choose a --dtype it runs", code="no_peak_for_dtype",
        )  # fmt: skip
    return Roofline(peak, device.bandwidth, efficiency, other if other != peak else None, parts, gemm)
