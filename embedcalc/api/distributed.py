"""``bench --nproc N --strategy ddp|fsdp|tp``: the model on N processes under torchrun, each rank beside the
analytic per-device prediction.

Before anything is launched the analyzer predicts each rank's memory under the strategy's parallel setting; if the
ranks together (CPU: they share this machine) or one rank (CUDA: each has its GPU) would not fit, the run is
refused (exit 4) as ``bench`` refuses one. Multi-node runs are the same worker under torchrun's rendezvous flags
(docs/concepts/memory.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from embedcalc.analysis.workload import Workload
from embedcalc.api.bench import RunOptions, measured_analysis, run_settings
from embedcalc.api.load import load_target
from embedcalc.errors import EmbedcalcError, ExitCode, UnsupportedEnvironmentError

if TYPE_CHECKING:
    from embedcalc.analysis.report import Analysis
    from embedcalc.reconcile.distributed import DistributedBench

Strategy = Literal["ddp", "fsdp", "tp"]

__all__ = ["DistributedReport", "Strategy", "bench_ranks"]


@dataclass(frozen=True)
class DistributedReport:
    """The per-rank analysis (the strategy's layout) and every rank measured beside it."""

    analysis: Analysis
    result: DistributedBench

    def to_json(self) -> dict[str, Any]:
        """The ``results[]`` entry of ``embedcalc bench --nproc N --format json``."""
        return self.analysis.to_json() | {"distributed": self.result.to_json()}


def _refuse_unless_fits(analysis: Analysis, nproc: int, dev: Any, free: int) -> None:
    from embedcalc.reconcile.bench import predicted_bytes
    from embedcalc.units import binary_bytes

    together = predicted_bytes(analysis) * (nproc if dev.type == "cpu" else 1)
    if together > free:
        where = "this machine's RAM, shared by the ranks" if dev.type == "cpu" else "one GPU"
        raise UnsupportedEnvironmentError(
            f"{analysis.target}: {nproc} ranks are predicted to need {binary_bytes(together)} ({together:,} bytes) "
            f"of {where}, but {binary_bytes(free)} is free; use fewer --nproc, a smaller --batch-size or "
            "--seq-len, or --force",
            code="does_not_fit",
        )


def bench_ranks(
    target: str, overrides: Sequence[str] | None, run: Workload, nproc: int, strategy: Strategy, baseline: bool,
    options: RunOptions,
) -> DistributedReport:  # fmt: skip
    """Predict, check the fit, launch ``nproc`` ranks (and, with ``baseline``, one more run on one process for the
    scaling efficiency), reconcile."""
    from embedcalc.modeling.device import free_memory_bytes
    from embedcalc.modeling.distributed import DistributedRunError, DistributedSettings, launch
    from embedcalc.reconcile.distributed import distributed_bench, strategy_parallelism

    dev = options.resolve()
    per_rank = replace(run, parallel=strategy_parallelism(strategy, nproc))
    analysis = measured_analysis(load_target(target, overrides), per_rank)
    if not options.force:
        _refuse_unless_fits(analysis, nproc, dev, free_memory_bytes(dev))
    device = "cuda" if dev.type == "cuda" else "cpu"
    settings = run_settings(DistributedSettings, per_rank, options, nproc=nproc, strategy=strategy, device=device)
    options.notify(f"launching {nproc} ranks ({strategy}, {device}) under torchrun")
    try:
        ranks = launch(analysis.config, settings)
        base = launch(analysis.config, replace(settings, nproc=1))[0] if baseline and nproc > 1 else None
    except DistributedRunError as exc:
        raise EmbedcalcError(f"{target}: {exc}", ExitCode.RUNTIME, code="rank_failed") from None
    return DistributedReport(analysis, distributed_bench(analysis, strategy, nproc, ranks, base))
