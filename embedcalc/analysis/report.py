"""One config's full cost for one workload: the result object the CLI renders (tables or DESIGN.md §5 JSON)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from embedcalc.analysis.breakdown import Breakdown
from embedcalc.analysis.comm.volumes import CommunicationEstimate, communication
from embedcalc.analysis.crossover import crossover_seq_len
from embedcalc.analysis.flops import FlopsEstimate, forward_flops
from embedcalc.analysis.memory import MemoryEstimate, estimate_memory
from embedcalc.analysis.params import active_params, count_params
from embedcalc.analysis.workload import Workload
from embedcalc.config.resolved import ResolvedShape
from embedcalc.errors import Problem

if TYPE_CHECKING:  # the time model and the serving memory load only when asked for (start-up)
    from embedcalc.analysis.memory.serving import ServingMemory
    from embedcalc.analysis.roofline import RooflineEstimate


@dataclass(frozen=True)
class Analysis:
    """Params, FLOPs and memory of ``config`` on ``workload``; with a device named, its expected ``time``
    (:mod:`embedcalc.analysis.time`), and with a concurrency the ``serving`` memory a server holds."""

    target: str
    config: ResolvedShape
    workload: Workload
    params: Breakdown
    flops: FlopsEstimate
    memory: MemoryEstimate
    crossover_seq_len: int | float | None  # None: no softmax attention layer
    warnings: list[Problem] = field(default_factory=list)
    active_params: int = -1  # parameters a token uses (MoE: top_k of the routed experts); -1: the total
    communication: CommunicationEstimate = field(default_factory=CommunicationEstimate)
    reader: str = (
        "native"  # "transformers-meta": a layer model derived from transformers' module tree (DESIGN §19)
    )
    reader_note: str | None = None  # how, for a derived one
    time: RooflineEstimate | None = None  # on a device (--hardware), or the capacity under --max-memory
    serving: ServingMemory | None = None  # --concurrency / --memory-utilization

    def __post_init__(self) -> None:
        if self.active_params < 0:
            object.__setattr__(self, "active_params", self.params.total)

    def to_json(self) -> dict[str, Any]:
        """The ``results[]`` entry of DESIGN.md §5; ``reader: native``: counted by embedcalc's own layer model (the
        general reader's entries, :mod:`embedcalc.reconcile.general`, say ``transformers-meta``); ``time`` when a
        device was named, ``memory.serving`` with serving memory."""
        out: dict[str, Any] = {
            "reader": self.reader,
            **({"layer_model": self.reader_note} if self.reader_note else {}),
            "target": self.target,
            "dtype": self.workload.dtype,
            "dtype_source": self.workload.dtype_source,
            "config": self.config.model_dump(mode="json"),
            "derived": self.config.derived(),
            "params": {
                "total": self.params.total,
                "active": self.active_params,
                "breakdown": self.params.as_dict(),
            },
            "flops": {
                "forward": self.flops.forward,
                "forward_causal": self.flops.forward_causal,
                "training_step": self.flops.training_step,
                "attention_scores": self.flops.attention_score_flops,
                "attention_scores_causal": self.flops.attention_score_flops_causal,
                "attention_score_share": self.flops.attention_score_share,
                "breakdown": self.flops.breakdown.as_dict(),
                "elementwise_estimate": self.flops.elementwise.as_dict(),
            },
            "memory": self.memory.to_json(),
            "crossover_seq_len": self.crossover_seq_len,
            "communication": self.communication.to_json(),
            "warnings": [w.as_dict() for w in self.warnings],
        }
        if self.serving is not None:
            out["memory"]["serving"] = self.serving.to_json()
        if self.time is not None:
            out["time"] = self.time.to_json()
        return out


def analyze(
    target: str, config: ResolvedShape, workload: Workload, warnings: list[Problem] | None = None
) -> Analysis:
    """Count everything for one config and workload."""
    params = count_params(config)
    return Analysis(
        target=target,
        config=config,
        workload=workload,
        params=params,
        flops=forward_flops(config, workload),
        memory=estimate_memory(config, workload),
        crossover_seq_len=crossover_seq_len(config),
        warnings=list(warnings or []),
        active_params=active_params(config),
        communication=communication(config, workload),
    )
