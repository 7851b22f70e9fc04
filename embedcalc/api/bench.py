"""``bench`` and ``sweep --measure``: the torch model run on a real device, each measurement beside its
prediction (needs the ``torch`` extra). Every prediction placed beside a measurement is made for dropout 0
(:func:`~embedcalc.api.load.without_dropout`), and a run predicted not to fit in free memory is refused (exit 4)
unless forced.

Long runs report progress through a :data:`Progress`: a function of a title that returns a context manager
yielding ``on_step(phase, done, total)``; the CLI passes rich progress bars, the default draws nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from embedcalc.analysis.checked import analyze_loaded
from embedcalc.analysis.workload import Workload
from embedcalc.api.load import ConfigLike, as_loaded, load_target, without_dropout
from embedcalc.api.torch_env import require_device
from embedcalc.api.workload import usage, workload_of
from embedcalc.config.dtypes import BENCH_DTYPES
from embedcalc.errors import EmbedcalcError, ExitCode

if TYPE_CHECKING:
    from embedcalc.reconcile.attention_split import AttentionSplit
    from embedcalc.reconcile.bench import BenchResult

StepCallback = Callable[[str, int, int], None]  # (phase, steps done, steps in phase)
Progress = Callable[[str], AbstractContextManager[StepCallback]]

__all__ = ["BENCH_DTYPES", "MeasureRequest", "Progress", "bench", "measure_split", "no_progress"]


@contextmanager
def no_progress(title: str) -> Iterator[StepCallback]:
    """A :data:`Progress` that draws nothing."""
    yield lambda phase, done, total: None


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
    from embedcalc.modeling.benchmark import BenchSettings, run_benchmark
    from embedcalc.modeling.timing import free_memory_bytes, measure_matmul_peak
    from embedcalc.reconcile.bench import BenchResult, check_fits, measurement
    from embedcalc.units import binary_bytes

    run = workload_of(workload, workload_fields)
    if run.dtype not in BENCH_DTYPES:
        raise usage(f"bench runs in {', '.join(BENCH_DTYPES)}, not {run.dtype}", "dtype")
    if warmup < 0 or repeat < 1:
        raise usage(f"warmup must be >= 0 and repeat >= 1, got {warmup} and {repeat}", "repeat")
    dev = require_device(device, flag="device")
    analysis = analyze_loaded(without_dropout(as_loaded(config)), run)
    if not force:
        check_fits(analysis, free_memory_bytes(dev), str(dev), binary_bytes)
    settings = BenchSettings(
        batch_size=run.batch_size, seq_len=run.seq_len, tgt_len=run.tgt_len, dtype=run.dtype, mode=run.mode,
        attention=run.attention, compile=compile, warmup=warmup, repeat=repeat, recompute=run.recompute,
    )  # fmt: skip
    try:
        timed = run_benchmark(analysis.config, settings, dev)
    except (MemoryError, RuntimeError) as exc:
        raise EmbedcalcError(
            f"the benchmark failed on {dev}: {exc}", ExitCode.RUNTIME, code="bench_failed"
        ) from None
    peak = measure_matmul_peak(dev, run.dtype)
    return BenchResult(analysis, measurement(analysis, timed, peak, dev.type == "cuda", run.dtype))


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
    from embedcalc.modeling.measure import measure_attention_split
    from embedcalc.modeling.timing import set_threads
    from embedcalc.reconcile.attention_split import attention_split

    fixed = [f"{a}={v[0]}" for a, v in axes.items() if a not in ("seq_len", "batch_size")]
    batch = axes.get("batch_size", (run.batch_size,))[0]
    seq_lens = sorted(axes["seq_len"])
    base = Workload(batch_size=batch, seq_len=max(seq_lens), dtype=run.dtype, attention=run.attention)
    loaded = without_dropout(load_target(target, [*(overrides or []), *fixed]))
    analysis = analyze_loaded(loaded, base)
    dtype = run.dtype if run.dtype in BENCH_DTYPES else "fp32"
    with request.progress(f"{target} attention split") as on_step:
        points = measure_attention_split(
            analysis.config, seq_lens, batch, dtype, run.attention, dev, repeat=request.repeat, on_step=on_step
        )
    return attention_split(analysis, points, batch, str(dev), set_threads(None))

