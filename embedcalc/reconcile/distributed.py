"""``bench --nproc``: every rank's measurement beside the analytic per-device prediction.

Predictions: per-rank memory from :func:`embedcalc.analysis.memory.estimate_memory` with the strategy's
parallelism (ddp: ``dp = N``; fsdp: ``dp = N, zero = 3``; tp: ``tp = N``), local parameters from
:func:`embedcalc.analysis.parallel.stage_params`, and the bytes each rank sends per step from
:func:`embedcalc.analysis.comm.volumes.communication`. Scaling efficiency compares with the same strategy on one
process: for ddp and fsdp every rank has its own batch (weak scaling, efficiency = tokens/s on N / (N x tokens/s on
1)); for tp the ranks share one batch (strong scaling, efficiency = speed-up / N). The step time, tokens/s and
collective seconds stand beside the default prediction for ``local`` (:mod:`embedcalc.reconcile.prediction`): the
expected step of the strategy's layout, and the step's collectives by the α–β model over local's link (``bench
--peak --nproc N`` measures it; without one, no collective is timed).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from math import prod
from typing import TYPE_CHECKING, Any

from embedcalc.analysis.comm.volumes import CommunicationEstimate, communication
from embedcalc.analysis.memory import MemoryEstimate
from embedcalc.analysis.parallel import stage_params
from embedcalc.analysis.params import param_tensors
from embedcalc.analysis.report import Analysis
from embedcalc.analysis.workload import Parallelism
from embedcalc.config.resolved import ResolvedShape

if TYPE_CHECKING:  # types only: `analyze --tp/--dp` reaches this module through the communication table, and
    # importing the torch side at run time would load torch there (and fail without it: issue 24)
    from embedcalc.analysis.roofline import RooflineEstimate
    from embedcalc.devices.catalogue import Device
    from embedcalc.modeling.distributed import RankResult, Strategy
from embedcalc.reconcile.bench import run_bytes
from embedcalc.reconcile.prediction import beside, error_pct, per_s, step_s


def fsdp_rank_params(config: ResolvedShape, nproc: int, rank: int) -> int:
    """Parameters FSDP2 ``fully_shard`` leaves on ``rank``: every parameter tensor is split along its first dim
    into ``nproc`` chunks of ceil(rows / nproc) rows (torch.chunk's rule, the last chunks shorter or empty), and
    the rank keeps chunk ``rank`` of each; computed from the analytic tensor list."""
    total = 0
    for tensor in param_tensors(config):
        rows, rest = tensor.shape[0], prod(tensor.shape[1:])
        size = -(-rows // nproc)
        total += max(0, min(size, rows - rank * size)) * rest * tensor.copies
    return total


def collectives_s(analysis: Analysis, device: Device | None) -> float | None:
    """Seconds one rank spends in the step's collectives on ``device``'s link by the α–β model
    (:mod:`embedcalc.analysis.time.comm`), overlapped or not: what the profiler's collective time measures."""
    if device is None:
        return None
    from embedcalc.analysis.time.comm import collectives_s as timed
    from embedcalc.devices.calibration import load_calibration

    w = analysis.workload
    return timed(
        communication(analysis.config, w).collectives, device, w.parallel, load_calibration().constants
    )


def distributed_bench(
    analysis: Analysis, strategy: Strategy, nproc: int, ranks: list[RankResult], baseline: RankResult | None,
    prediction: tuple[RooflineEstimate | None, Device | None, str] = (None, None, "no prediction"),
) -> DistributedBench:  # fmt: skip
    """Put the measured ``ranks`` (and the one-process ``baseline``) of ``analysis`` (its workload the strategy's
    layout, :func:`strategy_parallelism`) beside the prediction (module docstring): ``prediction`` is the expected
    time for ``local``, the local device and where they came from."""
    w = analysis.workload
    flops = analysis.flops.training_step if w.mode == "training" else analysis.flops.forward
    estimate, device, note = prediction
    step = step_s(estimate)
    tokens = (1 if strategy == "tp" else nproc) * w.batch_size * w.seq_len
    return DistributedBench(
        target=analysis.target, strategy=strategy, nproc=nproc, tokens_per_rank_step=w.batch_size * w.seq_len,
        ranks=ranks, baseline=baseline, predicted_memory=analysis.memory,
        predicted_params=[
            fsdp_rank_params(analysis.config, nproc, rank) if strategy == "fsdp"
            else max(stage_params(analysis.config, w.parallel))
            for rank in range(nproc)
        ],
        predicted_comm=communication(analysis.config, w),
        flops_per_rank_step=flops // (nproc if strategy == "tp" else 1),
        predicted={"step_s": step, "tokens_per_s": per_s(tokens, step),
                   "comm_s_per_step": collectives_s(analysis, device)},
        prediction_note=note,
    )  # fmt: skip


def strategy_parallelism(strategy: Strategy, nproc: int) -> Parallelism:
    """The analytic parallel setting a torch strategy corresponds to."""
    if strategy == "ddp":
        return Parallelism(dp=nproc)
    if strategy == "fsdp":
        return Parallelism(dp=nproc, zero=3)
    return Parallelism(tp=nproc)


@dataclass(frozen=True)
class DistributedBench:
    """Measured ranks (and the one-process baseline) beside the prediction."""

    target: str
    strategy: Strategy
    nproc: int
    tokens_per_rank_step: int  # tokens one rank processes per step (tp: the shared batch)
    ranks: list[RankResult]
    baseline: RankResult | None
    predicted_memory: MemoryEstimate
    predicted_params: list[int]  # per rank
    predicted_comm: CommunicationEstimate
    flops_per_rank_step: int
    predicted: dict[str, float | int | None]
    prediction_note: str

    @property
    def step_s(self) -> float:
        """The group's step time: the slowest rank's median (a barrier precedes every step)."""
        return max(r.median_s for r in self.ranks)

    @property
    def tokens_per_s(self) -> float:
        replicas = 1 if self.strategy == "tp" else self.nproc
        return replicas * self.tokens_per_rank_step / self.step_s

    @property
    def scaling_efficiency(self) -> float | None:
        if self.baseline is None:
            return None
        base = self.tokens_per_rank_step / self.baseline.median_s
        return (
            self.tokens_per_s
            / (base * (1 if self.strategy == "tp" else self.nproc))
            / (self.nproc if self.strategy == "tp" else 1)
        )

    @property
    def comm_s(self) -> float:
        return statistics.median(r.comm_seconds_per_step for r in self.ranks)

    @property
    def achieved_comm_bytes_per_s(self) -> float | None:
        """Bytes each rank sent per second of collective time (predicted bytes / measured seconds)."""
        return self.predicted_comm.wire_bytes / self.comm_s if self.comm_s > 0 else None

    def rank_rows(self) -> list[dict[str, Any]]:
        predicted = run_bytes(self.predicted_memory)
        rows = []
        for r in self.ranks:
            rows.append({
                "rank": r.rank, "median_s": r.median_s, "p10_s": r.quantile_s(0.1), "p90_s": r.quantile_s(0.9),
                "peak_memory_bytes": r.peak_memory_bytes, "predicted_memory_bytes": predicted,
                "memory_error_pct": error_pct(r.peak_memory_bytes, predicted),
                "local_params": r.local_params, "predicted_params": self.predicted_params[r.rank],
                "comm_s_per_step": r.comm_seconds_per_step, "comm_calls_per_step": r.comm_calls_per_step,
                "comm_ops": r.comm_ops, "device": r.device, "threads": r.threads, "node_rank": r.node_rank,
                "host": r.host,
            })  # fmt: skip
        return rows

    def to_json(self) -> dict[str, Any]:
        out = self._measured_json()
        return out | {"prediction_note": self.prediction_note} | beside(out, self.predicted)

    def _measured_json(self) -> dict[str, Any]:
        return {
            "strategy": self.strategy,
            "nproc": self.nproc,
            "step_s": self.step_s,
            "tokens_per_s": self.tokens_per_s,
            "achieved_flops_per_s": self.flops_per_rank_step
            * (1 if self.strategy == "tp" else self.nproc)
            / self.step_s,
            "scaling_efficiency": self.scaling_efficiency,
            "baseline_step_s": self.baseline.median_s if self.baseline else None,
            "comm_s_per_step": self.comm_s,
            "predicted_comm_bytes_per_step": self.predicted_comm.wire_bytes,
            "achieved_comm_bytes_per_s": self.achieved_comm_bytes_per_s,
            "memory_method": self.ranks[0].memory_method if self.ranks else "",
            "ranks": self.rank_rows(),
            "communication": self.predicted_comm.to_json(),
        }
