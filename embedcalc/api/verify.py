"""``verify``: the analytic params and forward FLOPs reconciled with the torch model built on the meta device,
component by component, and, for a layout that shards the model, every rank's parameters and the collectives of
one training step on torch's fake process group (needs the ``torch`` extra)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from embedcalc.analysis.checked import analyze_loaded
from embedcalc.analysis.workload import Workload
from embedcalc.api.analyze import analyze
from embedcalc.api.load import ConfigLike, load_target
from embedcalc.api.torch_env import require_torch
from embedcalc.api.workload import usage

if TYPE_CHECKING:
    from embedcalc.analysis.report import Analysis
    from embedcalc.api.finetune import FinetuneOptions
    from embedcalc.reconcile.finetune import FinetuneVerify
    from embedcalc.reconcile.sharding import ShardedVerify
    from embedcalc.reconcile.verify import VerifyResult

__all__ = ["VerifyReport", "verify", "verify_report"]


def verify(
    config: ConfigLike,
    workload: Workload | None = None,
    attention: Literal["sdpa", "eager"] = "sdpa",
    **workload_fields: Any,
) -> VerifyResult:
    """Reconcile the analytic params and forward FLOPs with the torch model built on the meta device, component by
    component (``embedcalc verify``; needs the ``torch`` extra). ``result.agree`` is True when every row matches.

    >>> import embedcalc
    >>> v = embedcalc.verify("bert-base", seq_len=64)  # doctest: +SKIP
    >>> v.agree, v.params.counted_total  # doctest: +SKIP
    (True, 109482240)
    """
    from embedcalc.reconcile.verify import check_buildable, verify_analysis

    analysis = analyze(config, workload, **workload_fields)
    check_buildable(analysis.config, analysis.target, "verify")  # before torch loads: a refusal costs nothing
    require_torch()
    return verify_analysis(analysis, attention)


@dataclass(frozen=True)
class VerifyReport:
    """``embedcalc verify``: the analysis reconciled (its warnings on ``analysis``), the sharded reconciliation
    when the layout shards the model, and the fine-tune's counts with ``--peft``."""

    analysis: Analysis
    result: VerifyResult
    sharded: ShardedVerify | None = None
    finetune: FinetuneVerify | None = None

    @property
    def agree(self) -> bool:
        return (self.result.agree and (self.sharded is None or self.sharded.agree)
                and (self.finetune is None or self.finetune.agree))  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        """The ``results[]`` entry of ``embedcalc verify --format json``."""
        return (
            self.result.to_json()
            | ({"sharded": self.sharded.to_json()} if self.sharded is not None else {})
            | ({"finetune": self.finetune.to_json()} if self.finetune is not None else {})
        )


def verify_report(
    target: str,
    overrides: Sequence[str] | None,
    run: Workload,
    attention: Literal["sdpa", "eager"],
    finetune: FinetuneOptions | None = None,
) -> VerifyReport:
    """``embedcalc verify``: TARGET with ``--set``, checked against the workload as ``analyze`` does, reconciled;
    sharded too when ``run.parallel`` splits one model over devices (tp, pp, or dp with ZeRO-3); with
    ``finetune`` (``--peft``), the fine-tune's trainable and total counts too (:mod:`embedcalc.api.finetune_verify`)."""
    from embedcalc.reconcile.verify import check_buildable, verify_analysis

    loaded = load_target(target, overrides)
    analysis = analyze_loaded(loaded, run)
    check_buildable(analysis.config, target, "verify")  # before torch loads: a refusal costs nothing
    counts = tuned = None
    if finetune is not None:
        from embedcalc.api.finetune_verify import verify_counts

        if run.parallel.splits_model:
            raise usage("verify --peft counts one unsharded model; drop --tp/--pp/--dp --zero 3", "--peft")
        counts = verify_counts(loaded, finetune)  # a bad target refused before torch loads
    require_torch()
    result = verify_analysis(analysis, attention)
    if counts is not None:
        from embedcalc.api.finetune_verify import verify_finetune

        tuned = verify_finetune(loaded, target, overrides, counts)
    if not run.parallel.splits_model:
        return VerifyReport(analysis, result, finetune=tuned)
    from embedcalc.reconcile.sharding import verify_sharded

    return VerifyReport(analysis, result, verify_sharded(target, analysis.config, run.parallel, attention))
