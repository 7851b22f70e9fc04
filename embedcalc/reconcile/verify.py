"""``verify``: the analyzer's params and FLOPs beside the torch model's own counts, component by component.

Parameters: ``numel`` of the submodules behind each breakdown key; FLOPs: ``FlopCounterMode``'s per-module counts
of one forward pass on the meta device (nothing is allocated), against the analytic forward FLOPs. Two independent
implementations of DESIGN.md §4 (analysis and modeling share no code), so agreement is evidence, not a tautology.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from embedcalc.analysis.report import Analysis
from embedcalc.analysis.workload import AttentionImpl, Workload
from embedcalc.errors import EmbedcalcError, ExitCode, UnsupportedEnvironmentError

if TYPE_CHECKING:
    from embedcalc.config.resolved import ResolvedShape

# verify, diff and sharded verify build one torch module per layer (on the meta device: no memory, but time: 500
# gpt2 layers took 36 s to verify on a shared 2-core machine). The deepest published models have ~130 layers.
MAX_BUILT_LAYERS = 512


def check_buildable(config: ResolvedShape, target: str, command: str) -> None:
    """Refuse (exit 4, before torch builds anything) a model of more than MAX_BUILT_LAYERS layers: building it
    layer by layer would not end in reasonable time, while analyze counts any depth in closed form."""
    from embedcalc.analysis.structure import stacks

    layers = sum(s.num_layers for s in stacks(config))
    if layers > MAX_BUILT_LAYERS:
        shown = f"{layers:,}" if layers < 10**12 else f"about 10^{len(str(layers)) - 1}"
        raise UnsupportedEnvironmentError(
            f"{target}: {command} builds the torch model layer by layer, and {shown} layers is more than the "
            f"{MAX_BUILT_LAYERS} it builds; every layer of a block is built alike, so {command} a shallower copy "
            f"(--set num_layers=2, or fewer repeats in layers) and use analyze for the full depth",
            code="too_many_layers_to_build",
        )


@dataclass(frozen=True)
class ReconcileRow:
    """One component: the analytic count, torch's count, and their difference (counted - analytic)."""

    component: str
    analytic: int
    counted: int

    @property
    def difference(self) -> int:
        return self.counted - self.analytic

    def as_dict(self) -> dict[str, Any]:
        return {"component": self.component, "analytic": self.analytic, "counted": self.counted,
                "difference": self.difference}  # fmt: skip


@dataclass(frozen=True)
class Reconciliation:
    """Every component of one quantity (params or forward FLOPs), analytic beside counted."""

    rows: tuple[ReconcileRow, ...]

    @property
    def agree(self) -> bool:
        return all(r.difference == 0 for r in self.rows)

    @property
    def analytic_total(self) -> int:
        return sum(r.analytic for r in self.rows)

    @property
    def counted_total(self) -> int:
        return sum(r.counted for r in self.rows)

    def row_dicts(self) -> list[dict[str, Any]]:
        return [r.as_dict() for r in self.rows]

    def to_json(self) -> dict[str, Any]:
        return {"rows": self.row_dicts(), "analytic_total": self.analytic_total,
                "counted_total": self.counted_total}  # fmt: skip


def reconcile(analytic: dict[str, int], counted: dict[str, int]) -> Reconciliation:
    """One row per key of either side, the analytic keys first in their order, then keys only torch has."""
    keys = list(analytic) + [k for k in counted if k not in analytic]
    return Reconciliation(tuple(ReconcileRow(k, analytic.get(k, 0), counted.get(k, 0)) for k in keys))


@dataclass(frozen=True)
class VerifyResult:
    """The analytic params and FLOPs of ``target`` reconciled with the torch model built from the same config."""

    target: str
    attention: AttentionImpl
    workload: Workload
    params: Reconciliation
    flops: Reconciliation

    @property
    def agree(self) -> bool:
        """Every component of params and FLOPs agrees exactly."""
        return self.params.agree and self.flops.agree

    def to_json(self) -> dict[str, Any]:
        """The ``results[]`` entry of ``embedcalc verify --format json`` (DESIGN.md §5)."""
        return {"target": self.target, "agree": self.agree, "attention": self.attention,
                "params": self.params.to_json(), "flops": self.flops.to_json()}  # fmt: skip


def verify_analysis(analysis: Analysis, attention: AttentionImpl = "sdpa") -> VerifyResult:
    """Build ``analysis.config`` in torch on the meta device and reconcile it with ``analysis`` (needs torch).

    Raises :class:`EmbedcalcError` (exit 1) when torch's FLOP counter fails on the model.
    """
    from embedcalc.modeling import build_model, component_flops, component_params

    config, w = analysis.config, analysis.workload
    check_buildable(config, analysis.target, "verify")
    model = build_model(config, attention=attention, device="meta")
    try:
        counted_flops = component_flops(config, model, w.batch_size, w.seq_len, w.tgt_len)
    except RuntimeError as exc:
        raise EmbedcalcError(
            f"{analysis.target}: FLOP counting failed: {exc}", ExitCode.RUNTIME, code="count_failed"
        ) from None
    return VerifyResult(
        target=analysis.target,
        attention=attention,
        workload=w,
        params=reconcile(analysis.params.as_dict(), component_params(model)),
        flops=reconcile(analysis.flops.breakdown.as_dict(), counted_flops),
    )
