"""``bench`` and ``sweep --measure``: the torch model run on a real device, each measurement beside its
prediction (needs the ``torch`` extra).

One setting object, :class:`RunOptions` (device, warm-up and timed steps, compile, CPU threads, force, progress),
serves every kind of run; the modeling side's settings are built from it and the workload by one function
(:func:`run_settings`). Every prediction placed beside a measurement is made for dropout 0
(:func:`~embedcalc.api.load.without_dropout`), and a run predicted not to fit in free memory is refused (exit 4)
unless forced. Generation, torchrun ranks and the memory matrix are in :mod:`embedcalc.api.generate`,
:mod:`embedcalc.api.distributed` and :mod:`embedcalc.api.memory_matrix`.

Long runs report progress through a :data:`Progress`: a function of a title that returns a context manager
yielding ``on_step(phase, done, total)``; the CLI passes rich progress bars, the default draws nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from embedcalc.analysis.checked import analyze_loaded
from embedcalc.analysis.workload import Workload
from embedcalc.api.load import ConfigLike, as_loaded, load_target, without_dropout
from embedcalc.api.torch_env import require_device
from embedcalc.api.workload import usage, workload_of
from embedcalc.config.dtypes import BENCH_DTYPES
from embedcalc.errors import EmbedcalcError, ExitCode, UnsupportedEnvironmentError

if TYPE_CHECKING:
    from embedcalc.analysis.report import Analysis
    from embedcalc.analysis.roofline import RooflineEstimate
    from embedcalc.api.finetune import FinetuneOptions
    from embedcalc.reconcile.attention_split import AttentionSplit
    from embedcalc.reconcile.bench import BenchResult
    from embedcalc.reconcile.peak import LocalMeasurement, LoopbackLink, PeakResult
    from embedcalc.sources.loading import LoadedConfig

StepCallback = Callable[[str, int, int], None]  # (phase, steps done, steps in phase)
Progress = Callable[[str], AbstractContextManager[StepCallback]]
S = TypeVar("S")

__all__ = ["BENCH_DTYPES", "MeasureRequest", "Progress", "RunOptions", "bench", "bench_target", "measure_peak",
           "measure_split", "no_progress", "run_settings"]  # fmt: skip


@contextmanager
def no_progress(title: str) -> Iterator[StepCallback]:
    """A :data:`Progress` that draws nothing."""
    yield lambda phase, done, total: None


def _silent(line: str) -> None:
    """A note nobody reads (the default of :attr:`RunOptions.notify`)."""


@dataclass(frozen=True)
class RunOptions:
    """How to run a measurement: ``device`` (auto, cpu, cuda), ``warmup`` untimed and ``repeat`` timed steps,
    ``compile`` through torch.compile, torch's CPU ``threads`` (None: its choice), ``force`` past the memory
    check, the ``progress`` display, and ``notify`` for a line worth telling (ranks being launched)."""

    device: str = "auto"
    warmup: int = 3
    repeat: int = 10
    compile: bool = False
    threads: int | None = None
    force: bool = False
    progress: Progress = no_progress
    notify: Callable[[str], None] = _silent

    def resolve(self) -> Any:
        """The torch device, with torch's CPU threads set (exit 4 for a device this machine does not have)."""
        dev = require_device(self.device)
        from embedcalc.modeling.device import set_threads

        set_threads(self.threads)
        return dev


def run_settings(cls: Callable[..., S], run: Workload, options: RunOptions, **fixed: Any) -> S:
    """The modeling side's settings dataclass ``cls`` (BenchSettings, GenerateSettings, DistributedSettings) from
    the workload's and the options' fields of the same names, and ``fixed`` ones (built once, for every run)."""
    names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    values = {n: getattr(run, n) for n in names if hasattr(run, n)} | {
        n: getattr(options, n) for n in names if hasattr(options, n) and not hasattr(run, n)
    }
    return cls(**(values | fixed))


def where(dev: Any) -> str:
    """How a refusal names the memory it compared with."""
    return "cuda" if dev.type == "cuda" else "this machine (MemAvailable)"


def refuse_unless_fits(analysis: Analysis, dev: Any, options: RunOptions, decodes: bool = False) -> None:
    """Refuse (exit 4) a run predicted to need more than is free on ``dev``, unless forced (``decodes``: the run
    allocates the KV cache, :func:`embedcalc.reconcile.bench.run_bytes`)."""
    if options.force:
        return
    from embedcalc.modeling.device import free_memory_bytes
    from embedcalc.reconcile.bench import check_fits
    from embedcalc.units import binary_bytes

    check_fits(analysis, free_memory_bytes(dev), where(dev), binary_bytes, decodes)


def measured_analysis(loaded: LoadedConfig, run: Workload) -> Analysis:
    """The prediction a measurement of ``loaded`` is put beside: for dropout 0, checked against the workload."""
    return analyze_loaded(without_dropout(loaded), run, model_dtype=False)  # it runs the dtype it measures


def bench(
    config: ConfigLike,
    workload: Workload | None = None,
    device: Literal["auto", "cpu", "cuda"] = "auto",
    warmup: int = 3,
    repeat: int = 10,
    compile: bool = False,
    force: bool = False,
    **workload_fields: Any,
) -> BenchResult:
    """Time real forward passes (or training steps) of the torch model on ``device`` and reconcile them with the
    prediction (``embedcalc bench``; needs the ``torch`` extra). Refuses (:class:`UnsupportedEnvironmentError`) a
    run whose predicted peak exceeds free memory unless ``force``; ``result.measurement`` holds the numbers.

    >>> import embedcalc
    >>> b = embedcalc.bench("bert-base", batch_size=1, seq_len=32, repeat=3)  # doctest: +SKIP
    >>> b.measurement.tokens_per_s > 0  # doctest: +SKIP
    True
    """
    run = workload_of(workload, workload_fields)
    if run.dtype not in BENCH_DTYPES:
        raise usage(f"bench runs in {', '.join(BENCH_DTYPES)}, not {run.dtype}", "dtype")
    if warmup < 0 or repeat < 1:
        raise usage(f"warmup must be >= 0 and repeat >= 1, got {warmup} and {repeat}", "repeat")
    return _bench(as_loaded(config), run, RunOptions(device, warmup, repeat, compile, force=force))


def bench_target(
    target: str,
    overrides: Sequence[str] | None,
    run: Workload,
    options: RunOptions,
    finetune: FinetuneOptions | None = None,
) -> BenchResult:
    """``embedcalc bench TARGET``: one forward or training step of ``run`` timed (the analysis' warnings on
    ``result.analysis``); with ``finetune``, a fine-tuning step with real adapters (:mod:`embedcalc.api.finetune_torch`)
    beside the fine-tune's predicted memory."""
    result = _bench(load_target(target, overrides), run, options, finetune)
    return result


def _bench(
    loaded: LoadedConfig, run: Workload, options: RunOptions, finetune: FinetuneOptions | None = None
) -> BenchResult:
    from embedcalc.modeling.benchmark import BenchSettings, run_benchmark
    from embedcalc.reconcile.bench import BenchResult, measurement

    dev = options.resolve()
    analysis = measured_analysis(loaded, run)
    settings = run_settings(BenchSettings, run, options)
    tuned = None
    if finetune is not None:
        from embedcalc.api.finetune_torch import tuned_settings

        settings, tuned = tuned_settings(analysis, finetune, settings)
    else:
        refuse_unless_fits(analysis, dev, options)
    try:
        with options.progress(analysis.target) as on_step:
            timed = run_benchmark(analysis.config, settings, dev, on_step)
    except MemoryError as exc:
        raise EmbedcalcError(
            f"out of memory on {dev}: {exc}", ExitCode.RUNTIME, code="out_of_memory"
        ) from None
    except (
        RuntimeError
    ) as exc:  # torch raises RuntimeError (and its OutOfMemoryError subclass) for device faults
        raise EmbedcalcError(
            f"the benchmark failed on {dev}: {exc}", ExitCode.RUNTIME, code="bench_failed"
        ) from None
    peak = matmul_peak(dev, run.dtype, options)
    estimate, note = local_estimate(analysis, dev, options, peak, every_position=True)
    measured = measurement(analysis, timed, peak, dev.type == "cuda", run.dtype, estimate, note)
    if tuned is None:
        return BenchResult(analysis, measured)
    from embedcalc.api.finetune_torch import with_finetune_prediction

    return with_finetune_prediction(BenchResult(analysis, measured), tuned)


def local_estimate(
    analysis: Analysis, dev: Any, options: RunOptions, peak: Any = None, every_position: bool = False
) -> tuple[RooflineEstimate | None, str]:
    """The default prediction a measurement is put beside: the expected time for ``local`` (measured first, as
    ``bench --peak`` measures it, when this machine has not been measured yet), and a note on where it came from
    (or why there is none). ``peak``: the matmul peak this run has just measured on ``dev`` in the workload's
    dtype, which a first measurement of ``local`` takes rather than timing the same GEMMs a second time.
    ``every_position``: the run's forward computes every position's logits (``bench``'s forward, ``model(ids)``),
    so its time is predicted with ``logits="all"``; ``bench --mode generate`` computes the last position's, as the
    workload's default says."""
    from embedcalc.analysis.time.estimate import TimeRequest, estimate_time
    from embedcalc.devices.catalogue import LOCAL
    from embedcalc.devices.resolve import load_device
    from embedcalc.modeling.device import device_name

    dtype, name = analysis.workload.dtype, device_name(dev)
    try:
        device = load_device(LOCAL)
        when = f"bench --peak of {device.measured.measured_at}" if device.measured else "bench --peak"
    except UnsupportedEnvironmentError:
        measure_local(dev, name, dtype, peak or matmul_peak(dev, dtype, options), options.progress)
        device, when = (
            load_device(LOCAL),
            "local was not measured yet and was measured now, as bench --peak does",
        )
    from embedcalc.api.timing import local_launches

    timed = replace(analysis.workload, logits="all") if every_position else analysis.workload
    request = TimeRequest(device=device, launches=local_launches(analysis.config, timed, device))
    try:
        estimate = estimate_time(analysis.config, timed, request, analysis.memory.model_state_bytes)
    except EmbedcalcError as exc:  # e.g. no measured peak for this dtype on local
        return None, f"no prediction: {exc.message}; run `embedcalc bench --peak --dtype {dtype}`"
    other = "" if device.title == name else f"; measured on {device.title}, this run is on {name}"
    note = f"expected time for local ({when}), calibration {request.calibration.name}{other}"
    return estimate, note


def matmul_peak(dev: Any, dtype: str, options: RunOptions) -> Any:
    from embedcalc.modeling.timing import measure_matmul_peak

    with options.progress("matmul peak") as on_step:
        return measure_matmul_peak(dev, dtype, on_step=on_step)


def measure_peak(dtype: str, options: RunOptions, nproc: int | None = None) -> PeakResult:
    """``embedcalc bench --peak``: the device's matmul peak beside its datasheet peak, and its memory bandwidth and
    per-kernel overhead (with ``nproc`` >= 2, the all-reduce between that many processes of this machine, as
    local's link), measured and cached as the ``local`` device."""
    from embedcalc.modeling.device import device_name
    from embedcalc.reconcile.peak import peak_result

    if nproc is not None and nproc < 2:
        raise usage(f"--peak --nproc {nproc}: the all-reduce needs at least 2 processes; give --nproc 2 or more, "
                    "or drop --nproc", "nproc")  # fmt: skip
    dev = options.resolve()
    peak = matmul_peak(dev, dtype, options)
    name = device_name(dev)
    loopback = None if nproc is None else _loopback(nproc, dev, options)
    local = measure_local(dev, name, dtype, peak, options.progress, loopback)
    return peak_result(name, dtype, peak, dev.type == "cuda", local, loopback)


def _loopback(nproc: int, dev: Any, options: RunOptions) -> LoopbackLink:
    """The all-reduce of ``nproc`` ranks of this machine under torchrun's launcher, and the link it implies."""
    from embedcalc.devices.calibration import load_calibration
    from embedcalc.modeling.launch import DistributedRunError
    from embedcalc.modeling.loopback import measure_all_reduce
    from embedcalc.reconcile.peak import loopback_link

    options.notify(f"launching {nproc} ranks under torchrun to time the loopback all-reduce")
    try:
        measured = measure_all_reduce(nproc, dev.type == "cuda")
    except DistributedRunError as exc:
        raise EmbedcalcError(f"loopback all-reduce: {exc}", ExitCode.RUNTIME, code="rank_failed") from None
    return loopback_link(measured, load_calibration().constants)


def measure_local(
    dev: Any,
    name: str,
    dtype: str,
    peak: Any,
    progress: Progress = no_progress,
    loopback: LoopbackLink | None = None,
) -> LocalMeasurement:
    """Measure this device's memory bandwidth (STREAM copy/triad), per-kernel overhead, the GEMV rate of ``dtype``
    and (a CPU) the GEMM rows at half rate, merge the matmul ``peak`` just measured, and cache it all as the
    ``local`` device; returns what ``bench --peak`` reports beside the peak."""
    from embedcalc.devices.calibration import load_calibration
    from embedcalc.devices.catalogue import LOCAL, peak_dtype
    from embedcalc.devices.local import local_device, previous_local, save_local
    from embedcalc.modeling.bandwidth import measure_gemv_rate, measure_memory_bandwidth
    from embedcalc.modeling.device import total_memory_bytes
    from embedcalc.modeling.timing import measure_gemm_rows, measure_kernel_overhead
    from embedcalc.reconcile.peak import LocalMeasurement

    with progress("memory bandwidth") as on_step:
        bandwidth = measure_memory_bandwidth(dev, on_step=on_step)
    with progress("kernel overhead") as on_step:
        overhead = measure_kernel_overhead(dev, on_step=on_step)
    gemv_max = load_calibration().constants.gemv_max_rows  # the rows the time model prices as a GEMV
    with progress("GEMV rate") as on_step:
        gemv = measure_gemv_rate(dev, dtype, overhead.seconds_per_kernel, int(gemv_max), on_step=on_step)
    rows = None  # a GPU's small GEMMs are launch- and memory-bound: their rate says nothing of its tiles and waves
    if dev.type == "cpu":
        # the tile law is fitted above the GEMV rows: those are priced by the bytes they read at the GEMV rate
        fitted = tuple(r for r in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512) if r > gemv_max)
        with progress("GEMM rows") as on_step:
            rows = measure_gemm_rows(dev, dtype, rows=fitted, overhead_s=overhead.seconds_per_kernel,
                                     on_step=on_step)  # fmt: skip
    how = f"best of {peak.repeat} {peak.size}x{peak.size} {peak.dtype} matmuls"
    device = local_device(
        name, "gpu" if dev.type == "cuda" else "cpu", {peak_dtype(dtype): (peak.flops_per_s, how)},
        total_memory_bytes(dev), (bandwidth.bytes_per_s, bandwidth.method), bandwidth.torch_version, previous_local(),
        (overhead.seconds_per_kernel, overhead.method),
        None if rows is None or rows.half_rows is None else (rows.half_rows, rows.method),
        None if loopback is None or loopback.per_direction_bytes_per_s is None or loopback.latency_s is None
        else (loopback.per_direction_bytes_per_s, loopback.latency_s, loopback.method),
        {peak_dtype(dtype): (list(gemv.by_rows), gemv.method)},
    )  # fmt: skip
    path = save_local(device)
    measured = device.measured
    return LocalMeasurement(
        memory_bandwidth_bytes_per_s=bandwidth.bytes_per_s, copy_bytes_per_s=bandwidth.copy_bytes_per_s,
        triad_bytes_per_s=bandwidth.triad_bytes_per_s, bandwidth_method=bandwidth.method,
        kernel_overhead_s=overhead.seconds_per_kernel, kernel_overhead_method=overhead.method,
        gemm_half_rows=None if rows is None else rows.half_rows, gemm_rows_method=None if rows is None else rows.method,
        gemv_bytes_per_s=gemv.bytes_per_s, gemv_method=gemv.method,
        memory_bytes=device.memory,
        catalogue_match=measured.matches if measured else None, efficiency=measured.efficiency if measured else {},
        cached_as=LOCAL, cache_path=str(path),
    )  # fmt: skip


@dataclass(frozen=True)
class MeasureRequest:
    """``sweep --measure``: where to time, how many timed pairs per point, and the progress display."""

    device: str = "auto"
    repeat: int = 3
    progress: Progress = no_progress


def measure_split(
    target: str, overrides: Sequence[str] | None, axes: Mapping[str, Sequence[int]], run: Workload,
    request: MeasureRequest,
) -> AttentionSplit:  # fmt: skip
    """Time TARGET's forward passes with and without the attention core at every ``axes["seq_len"]`` (the other
    axes single-valued) beside the predicted split."""
    dev = require_device(request.device)  # before any work: cuda without CUDA is exit 4, as in bench
    from embedcalc.modeling.device import set_threads
    from embedcalc.modeling.measure import measure_attention_split
    from embedcalc.reconcile.attention_split import attention_split

    fixed = [f"{a}={v[0]}" for a, v in axes.items() if a not in ("seq_len", "batch_size")]
    batch = axes.get("batch_size", (run.batch_size,))[0]
    seq_lens = sorted(axes["seq_len"])
    base = Workload(batch_size=batch, seq_len=max(seq_lens), dtype=run.dtype, attention=run.attention)
    analysis = measured_analysis(load_target(target, [*(overrides or []), *fixed]), base)
    dtype = run.dtype if run.dtype in BENCH_DTYPES else "fp32"
    with request.progress(f"{target} attention split") as on_step:
        points = measure_attention_split(
            analysis.config,
            seq_lens,
            batch,
            dtype,
            run.attention,
            dev,
            repeat=request.repeat,
            on_step=on_step,
        )
    return attention_split(analysis, points, batch, str(dev), set_threads(None))
