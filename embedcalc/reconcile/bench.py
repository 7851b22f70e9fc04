"""``bench``: a timed run on a real device beside the analytic prediction (throughput, FLOP/s, memory).

The prediction of what a timed run peaks at is the analyzer's memory estimate without its KV cache (bench runs
whole-sequence forwards or training steps, it does not decode; generation, which does, with it): :func:`run_bytes`,
the one prediction every measured run (bench, generation, distributed) is compared with. The step time is put
beside the default prediction for ``local`` (:mod:`embedcalc.reconcile.prediction`: ``predicted`` and
``error_pct`` under the measured keys ``median_s``, ``tokens_per_s``, ``peak_memory_bytes``). Achieved FLOP/s is
analytic FLOPs over the median step time; utilisation is against the device's measured matmul peak (and the
datasheet peak for a known GPU).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

from embedcalc.analysis.memory import MemoryEstimate, estimate_memory
from embedcalc.analysis.memory.capacity_search import largest
from embedcalc.analysis.report import Analysis
from embedcalc.analysis.workload import Workload
from embedcalc.config.resolved import ResolvedShape
from embedcalc.devices.catalogue import datasheet_peak
from embedcalc.errors import UnsupportedEnvironmentError
from embedcalc.reconcile.prediction import beside, error_pct, per_s, step_s

if TYPE_CHECKING:  # torch loads with the benchmark, not with the analyzer
    from embedcalc.analysis.roofline import RooflineEstimate
    from embedcalc.modeling.benchmark import BenchRun
    from embedcalc.modeling.timing import PeakMeasurement


def run_bytes(memory: MemoryEstimate, decodes: bool = False) -> int:
    """What a measured run should peak at: the estimate without its KV cache, unless the run decodes (generation
    allocates the cache before the prompt)."""
    return memory.total_bytes - (0 if decodes else memory.kv_cache_bytes)


def predicted_bytes(analysis: Analysis, decodes: bool = False) -> int:
    return run_bytes(analysis.memory, decodes)


def largest_fitting(
    workload: Workload, config: ResolvedShape, free: int, field: str, decodes: bool = False
) -> int | None:
    """The largest batch_size (or seq_len) at which the prediction fits in ``free`` bytes, by bisection."""

    def fits(value: int) -> bool:
        trial = (
            replace(workload, batch_size=value) if field == "batch_size" else replace(workload, seq_len=value)
        )
        return run_bytes(estimate_memory(config, trial), decodes) <= free

    if not fits(1):
        return None
    return largest(fits, 1, getattr(workload, field))


def check_fits(
    analysis: Analysis, free: int, where: str, sizes: Callable[[int], str], decodes: bool = False
) -> None:
    """Raise :class:`UnsupportedEnvironmentError` (exit 4) when the predicted peak exceeds ``free`` bytes, naming
    a batch size and a seq-len that would fit. ``sizes`` formats a byte count."""
    need = predicted_bytes(analysis, decodes)
    if need <= free:
        return
    config, w = analysis.config, analysis.workload
    batch = largest_fitting(w, config, free, "batch_size", decodes)
    seq = largest_fitting(w, config, free, "seq_len", decodes)
    hints = []
    if batch:
        hints.append(f"--batch-size {batch}")
    if seq:
        hints.append(f"--seq-len {seq}")
    hint = f"; this would fit: {' or '.join(hints)}" if hints else "; even batch 1 at seq-len 1 does not fit"
    raise UnsupportedEnvironmentError(
        f"{analysis.target}: predicted peak {sizes(need)} ({need:,} bytes) exceeds the "
        f"{sizes(free)} ({free:,} bytes) free on {where}{hint}. --force runs it anyway.",
        code="does_not_fit",
    )


NOISY_SPREAD = 1.5  # p90 / p10 of the step times above which a run is too noisy to judge a prediction by


def _load() -> tuple[float | None, int | None]:
    """(1-minute load average, usable CPUs) of this machine, where the OS says."""
    try:
        load: float | None = os.getloadavg()[0]
    except (AttributeError, OSError):
        load = None
    try:
        cpus: int | None = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count()
    return load, cpus


@dataclass(frozen=True)
class Measurement:
    """One timed run: latency quantiles, throughput, achieved and peak FLOP/s, peak memory beside predicted."""

    device: str
    threads: int
    build_s: float
    median_s: float
    p10_s: float
    p90_s: float
    repeat: int
    tokens_per_s: float
    sequences_per_s: float
    flops_per_step: int
    achieved_flops_per_s: float
    peak_flops_per_s: float
    peak_source: str
    utilization: float
    spec_peak_flops_per_s: float | None
    spec_peak_source: str | None
    spec_utilization: float | None
    peak_memory_bytes: int
    peak_memory_method: str
    predicted_memory_bytes: int
    memory_error_pct: float | None
    predicted: dict[str, float | int | None]
    prediction_note: str
    load_average: float | None = None  # the 1-minute load average right after the run (None: not on this OS)
    cpus: int | None = None  # the CPUs this process may run on

    @property
    def noise(self) -> str | None:
        """Why these times may say more about the machine than the model: other work on its CPUs, or steps whose
        times spread widely (p90 / p10 above 1.5). None when neither holds."""
        said = []
        if self.load_average is not None and self.cpus and self.load_average > self.cpus:
            said.append(f"the machine is busy (load {self.load_average:.1f} on {self.cpus} CPUs)")
        if self.p10_s > 0 and self.p90_s / self.p10_s > NOISY_SPREAD:
            said.append(f"step times spread {self.p90_s / self.p10_s:.1f}x (p90 / p10)")
        if not said:
            return None
        why = "; ".join(said)
        return f"{why}: the time error beside the prediction may be that noise; rerun on an idle machine to judge it"

    def to_json(self) -> dict[str, Any]:
        """The ``measurement`` object of DESIGN.md §5, with ``predicted`` and ``error_pct`` beside it."""
        out = asdict(self) | {"noise": self.noise}
        return out | beside(out, self.predicted)


def measurement(
    analysis: Analysis, run: BenchRun, peak: PeakMeasurement, cuda: bool, dtype: str,
    estimate: RooflineEstimate | None = None, note: str = "no prediction",
) -> Measurement:  # fmt: skip
    """Reconcile a timed ``run`` of ``analysis.config`` with the prediction; ``peak`` is the measured matmul peak,
    ``estimate`` the expected time for ``local`` (``note``: where it came from)."""
    w = analysis.workload
    flops = analysis.flops.training_step if w.mode == "training" else analysis.flops.forward
    median = run.timings.median_s
    decoder_tokens = 0  # an encoder-decoder also processes its target sequence
    if analysis.config.architecture == "encoder-decoder":
        decoder_tokens = w.tgt_len if w.tgt_len is not None else w.seq_len
    tokens = w.batch_size * (w.seq_len + decoder_tokens)
    achieved = flops / median
    spec_flops, spec_source = datasheet_peak(run.device, dtype) if cuda else (None, None)
    predicted = predicted_bytes(analysis)
    load, cpus = _load()
    return Measurement(
        device=run.device,
        threads=run.threads,
        build_s=run.build_s,
        median_s=median,
        p10_s=run.timings.quantile_s(0.1),
        p90_s=run.timings.quantile_s(0.9),
        repeat=len(run.timings.seconds),
        tokens_per_s=tokens / median,
        sequences_per_s=w.batch_size / median,
        flops_per_step=flops,
        achieved_flops_per_s=achieved,
        peak_flops_per_s=peak.flops_per_s,
        peak_source=f"measured: best of {peak.repeat} {peak.size}x{peak.size} {peak.dtype} matmuls",
        utilization=achieved / peak.flops_per_s,
        spec_peak_flops_per_s=spec_flops,
        spec_peak_source=spec_source,
        spec_utilization=achieved / spec_flops if spec_flops else None,
        peak_memory_bytes=run.peak_memory_bytes,
        peak_memory_method=run.memory_method,
        predicted_memory_bytes=predicted,
        memory_error_pct=error_pct(run.peak_memory_bytes, predicted),
        predicted={
            "median_s": step_s(estimate),
            "tokens_per_s": per_s(tokens, step_s(estimate)),
            "peak_memory_bytes": predicted,
        },
        prediction_note=note,
        load_average=load,
        cpus=cpus,
    )


@dataclass(frozen=True)
class BenchResult:
    """The analysis of the benchmarked workload and the measurement of the timed run."""

    analysis: Analysis
    measurement: Measurement
    finetune: dict[str, Any] | None = None  # bench --peft: trainable/all analytic and in the torch model

    @property
    def target(self) -> str:
        return self.analysis.target

    def to_json(self) -> dict[str, Any]:
        """The ``results[]`` entry of ``embedcalc bench --format json``: the analysis plus ``measurement`` (and
        ``finetune`` with --peft)."""
        extra = {} if self.finetune is None else {"finetune": self.finetune}
        return self.analysis.to_json() | {"measurement": self.measurement.to_json()} | extra


@dataclass(frozen=True)
class MemoryMatrixRow:
    """One ``--attention`` × ``--recompute`` setting of ``bench --memory-matrix``: predicted vs measured peak."""

    attention: str
    recompute: str
    predicted_memory_bytes: int
    peak_memory_bytes: int
    memory_error_pct: float | None
    peak_memory_method: str
    device: str

    @classmethod
    def from_measurement(cls, attention: str, recompute: str, m: Mapping[str, Any]) -> MemoryMatrixRow:
        """The row of one setting from the ``measurement`` object (:meth:`Measurement.to_json`) its run printed."""
        return cls(attention=attention, recompute=recompute, predicted_memory_bytes=m["predicted_memory_bytes"],
                   peak_memory_bytes=m["peak_memory_bytes"], memory_error_pct=m["memory_error_pct"],
                   peak_memory_method=m["peak_memory_method"], device=m["device"])  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class MemoryMatrix:
    """Training-step peak memory of ``target``, predicted and measured, for every setting (each its own process)."""

    target: str
    rows: tuple[MemoryMatrixRow, ...]

    def to_json(self) -> dict[str, Any]:
        """The ``results[]`` entry of ``embedcalc bench --memory-matrix --format json``."""
        return {"target": self.target, "memory_matrix": [r.to_json() for r in self.rows]}
