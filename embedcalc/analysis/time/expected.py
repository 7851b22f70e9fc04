"""The expected-time terms of an inference phase (prefill, a decode step, an encoder's forward) on one device: the
achieved fractions of each component and the phase's extra terms: element-wise traffic, kernel overhead, TP and
EP communication on the critical path, and pipeline sends (:mod:`embedcalc.analysis.time.model` states them).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from embedcalc.analysis.comm.volumes import Collective, communication
from embedcalc.analysis.memory.inference import low_precision
from embedcalc.analysis.roofline.traffic import Weights
from embedcalc.analysis.time.capability import gemm_peak_dtype
from embedcalc.analysis.time.comm import collectives_s
from embedcalc.analysis.time.model import (
    Fractions,
    Launches,
    Override,
    component_fractions,
    elementwise_bytes,
    kernels_per_forward,
    moe_dispatch_elements,
)  # fmt: skip
from embedcalc.analysis.workload import Workload
from embedcalc.config.dtypes import canonical_dtype
from embedcalc.config.resolved import ResolvedShape
from embedcalc.devices.calibration import TimeConstants
from embedcalc.devices.catalogue import Device, peak_dtype

Terms = tuple[tuple[str, float], ...]


@dataclass(frozen=True)
class ExpectedModel:
    """The expected-time model on one device: its constants and an optional --efficiency override."""

    constants: TimeConstants
    device: Device
    override: Override | None = None

    @property
    def memory_fraction(self) -> float:
        return self.override.memory if self.override is not None else self.constants.memory_fraction

    def fractions(self, config: ResolvedShape, w: Workload, weights: Weights, decode: bool) -> Fractions:
        """Each component's achieved (compute, memory) fractions; a GEMM on FP4 tensor cores (W4A4: the
        quantized matrices when the GEMMs run at the FP4 peak) reaches ``fp4_gemm_fraction`` of the GEMM fraction
        (time_calibration.json: FP4 GEMMs reach a smaller share of their peak than the bf16 ones it was fitted on)."""
        base = component_fractions(
            config, w, weights, decode, self.constants, self.override, self.gemv_memory(w)
        )
        if self.override is not None or gemm_peak_dtype(self.device, w) != "fp4":
            return base
        share, parts = self.constants.fp4_gemm_fraction, config.quantized

        def on_fp4(key: str) -> tuple[float, float]:
            compute, memory = base(key)
            return (compute * share, memory) if low_precision(key, parts=parts) else (compute, memory)

        return on_fp4

    def gemv_memory(self, w: Workload) -> Callable[[float], float] | None:
        """rows -> the fraction of the bandwidth the device's measured GEMV rate through that many rows is for the
        workload's dtype (at most 1: a GEMV is never faster than memory), None where it was not measured for that
        dtype (a quantized or fp8 GEMV runs another kernel than the one measured)."""
        if canonical_dtype(w.dtype) not in ("fp32", "bf16", "fp16"):
            return None
        figure = self.device.gemv_bytes_per_s.get(peak_dtype(w.dtype))
        if figure is None:
            return None
        bandwidth = self.device.bandwidth
        return lambda rows: min(1.0, figure.at(rows) / bandwidth)

    def stream_s(self, num_bytes: float) -> float:
        """Seconds to stream ``num_bytes`` through device memory at the achieved fraction."""
        return num_bytes / (self.device.bandwidth * self.memory_fraction)

    def dequant_s(self, elements: float) -> float:
        """Seconds to dequantize ``elements`` weight elements at the device's fp32 peak
        (:func:`embedcalc.analysis.time.model.dequant_elements`); 0 where the catalogue has no fp32 rate."""
        fp32 = self.device.peak("fp32")
        return 0.0 if not fp32 else elements * self.constants.dequant_ops_per_weight / fp32

    def dispatch_s(self, elements: float) -> float:
        """Seconds of the MoE token dispatch and combine for ``elements`` (token, expert, hidden element) triples
        (:func:`embedcalc.analysis.time.model.moe_dispatch_elements`), streamed at the achieved bandwidth."""
        return self.stream_s(elements * self.constants.moe_dispatch_bytes)

    def kernels_s(self, kernels: float) -> float:
        return kernels * self.constants.kernel_overhead_s

    def comm_s(self, collectives: list[Collective], w: Workload) -> float:
        return collectives_s(collectives, self.device, w.parallel, self.constants)


def device_constants(constants: TimeConstants, device: Device, inference: bool = False) -> TimeConstants:
    """The constants on ``device``: its own measured per-kernel overhead and GEMM half-rate rows (``bench --peak``
    records local's) in place of the calibration's, never added to them; where the device's maximum achievable
    matmul rate was measured (``matmul_fraction``), the GEMM and attention fractions scaled by its ratio to the
    fit's device's (``reference_matmul_fraction``: they were fitted on that device's clock and tile efficiency);
    for an ``inference`` phase, the attention fraction the serving engines' kernel reaches on the device where it
    was measured (``inference_attention_fraction``)."""
    own = {
        name: figure.value
        for name, figure in (
            ("kernel_overhead_s", device.kernel_overhead_s),
            ("gemm_half_rows", device.gemm_half_rows),
        )
        if figure is not None
    }
    if device.matmul_fraction is not None:
        scale = device.matmul_fraction.value / constants.reference_matmul_fraction
        own["gemm_fraction"] = min(1.0, constants.gemm_fraction * scale)
        own["attention_fraction"] = min(1.0, constants.attention_fraction * scale)
    if inference and device.inference_attention_fraction is not None:
        own["attention_fraction"] = device.inference_attention_fraction.value
    return replace(constants, **own)


def step_workload(config: ResolvedShape, w: Workload) -> Workload:
    """A decode step's workload: one new token per sequence (the decoder's length 1)."""
    if config.architecture == "encoder-decoder":
        return replace(w, tgt_len=1, gen_tokens=0)
    return replace(w, seq_len=1, gen_tokens=0)


def critical_collectives(config: ResolvedShape, w: Workload, groups: tuple[str, ...]) -> list[Collective]:
    """The collectives of ``groups`` one device runs for ``w`` (:mod:`embedcalc.analysis.comm.volumes`' bytes)."""
    return [c for c in communication(config, w).collectives if c.group in groups]


def pipeline_sends(config: ResolvedShape, w: Workload, tokens: int) -> list[Collective]:
    """Inference: a request crosses the pp − 1 stage boundaries one after another, each a send of its b × n × d
    activations (Narayanan et al. 2021, §2.2)."""
    pp = w.parallel.pp
    if pp == 1:
        return []
    payload = w.batch_size * tokens * config.embed_dim * w.activation_bytes
    return [Collective("send", "pp", pp, "stage boundary activations", pp - 1, (pp - 1) * payload)]


@dataclass(frozen=True)
class Volumes:
    """What the extra terms of one inference phase time, the same on every device: element-wise bytes, kernels
    launched, the TP/EP collectives on the critical path, the pipeline sends and the MoE layers' dispatched
    (token, expert, hidden element) triples."""

    elementwise_bytes: float
    kernels: float
    collectives: list[Collective]
    sends: list[Collective]
    dispatch_elements: float


def inference_volumes(
    config: ResolvedShape, w: Workload, decode: bool, launches: Launches | None = None
) -> Volumes:
    """The volumes of one inference phase: prefill / forward over the prompt, or one decode step (module
    docstring); ``launches``: the kernels as the run launches them, in place of a fused stack's. The TP share of
    the element-wise work is not divided (norms and residuals run replicated on every tensor-parallel rank)."""
    at = step_workload(config, w) if decode else w
    tokens = w.batch_size * (1 if decode else w.decoder_len if config.architecture == "encoder-decoder"
                             else w.seq_len)  # fmt: skip
    elementwise = elementwise_bytes(config, at, tokens, w.parallel.tp)
    if launches is None:
        kernels: float = kernels_per_forward(config, at, decode)
    else:
        kernels = launches.decode if decode else launches.prefill
    collectives = critical_collectives(config, at, ("tp", "ep"))
    sends = pipeline_sends(config, at, 1 if decode else w.seq_len)
    return Volumes(elementwise, kernels, collectives, sends, moe_dispatch_elements(config, tokens))


def inference_terms(
    config: ResolvedShape, w: Workload, model: ExpectedModel, decode: bool, launches: Launches | None = None,
    volumes: Volumes | None = None,
) -> Terms:  # fmt: skip
    """The extra terms of one inference phase on one device: its :func:`inference_volumes` (``volumes`` when the
    caller has them already) timed on the model's device."""
    v = volumes if volumes is not None else inference_volumes(config, w, decode, launches)
    dispatch = (("MoE token dispatch", model.dispatch_s(v.dispatch_elements)),) if v.dispatch_elements else ()
    return (
        ("element-wise traffic", model.stream_s(v.elementwise_bytes)),
        *dispatch,
        ("kernel overhead", model.kernels_s(v.kernels)),
        ("tensor/expert-parallel communication", model.comm_s(v.collectives, w)),
        ("pipeline sends", model.comm_s(v.sends, w)),
    )
