"""``sweep --measure``: the measured attention vs rest time per seq_len beside the FLOP-predicted split.

Predicted: the attention-score share of the analytic forward FLOPs (:attr:`ForwardFlops.attention_score_share`)
and the closed-form crossover n* (:func:`embedcalc.analysis.crossover.crossover_seq_len`). Measured: forward
passes with and without the attention core (:mod:`embedcalc.modeling.measure`), and the seq_len where attention
time first reaches the rest, interpolated in log-log.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from embedcalc.analysis.flops import forward_flops
from embedcalc.analysis.report import Analysis
from embedcalc.analysis.workload import Workload

if TYPE_CHECKING:  # torch loads with the measurement, not with the analyzer
    from embedcalc.modeling.measure import SplitPoint

METHOD = (
    "each seq_len: median of alternating forward passes with and without the attention core (Q·Kᵀ, softmax, ·V "
    "replaced by a pass-through); attention = full − without, rest = without"
)


@dataclass(frozen=True)
class SplitRow:
    """One seq_len: median forward seconds in full, of the attention core and of the rest; both shares."""

    seq_len: int
    full_s: float
    attention_s: float
    rest_s: float
    measured_attention_share: float
    predicted_attention_share: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class AttentionSplit:
    """The measured attention split of one model over seq_len, and the crossover measured and predicted."""

    device: str
    threads: int
    method: str
    points: tuple[SplitRow, ...]
    measured_crossover_seq_len: float | None
    predicted_crossover_seq_len: int | float | None

    def to_json(self) -> dict[str, Any]:
        """The ``measured`` object of ``embedcalc sweep --measure --format json``."""
        return {"device": self.device, "threads": self.threads, "method": self.method,
                "points": [p.to_json() for p in self.points],
                "measured_crossover_seq_len": self.measured_crossover_seq_len,
                "predicted_crossover_seq_len": self.predicted_crossover_seq_len}  # fmt: skip


def split_row(analysis: Analysis, point: SplitPoint, batch_size: int) -> SplitRow:
    """One measured ``point`` beside the attention-score share of the analytic forward FLOPs at its seq_len."""
    flops = forward_flops(analysis.config, Workload(batch_size=batch_size, seq_len=point.seq_len))
    return SplitRow(
        seq_len=point.seq_len, full_s=point.full_s, attention_s=point.attention_s, rest_s=point.without_core_s,
        measured_attention_share=point.attention_share, predicted_attention_share=flops.attention_score_share,
    )  # fmt: skip


def attention_split(
    analysis: Analysis, points: Sequence[SplitPoint], batch_size: int, device: str, threads: int
) -> AttentionSplit:
    """Put the measured ``points`` of ``analysis.config`` beside the predicted split (needs torch)."""
    from embedcalc.modeling.measure import measured_crossover

    return AttentionSplit(
        device=device, threads=threads, method=METHOD, points=tuple(split_row(analysis, p, batch_size) for p in points),
        measured_crossover_seq_len=measured_crossover(list(points)),
        predicted_crossover_seq_len=analysis.crossover_seq_len,
    )  # fmt: skip
