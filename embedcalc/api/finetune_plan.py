"""``plan --mode training --peft ...``: which method (full, full with offload, LoRA, QLoRA, the one asked for) fits
which device, how fast and at what cost for a token budget (:mod:`embedcalc.analysis.plan.finetune` states the
time conventions, :mod:`embedcalc.analysis.finetune` the counts and memory)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from embedcalc.api.load import ConfigLike, as_loaded
from embedcalc.api.workload import usage

if TYPE_CHECKING:
    from embedcalc.analysis.plan.finetune import FinetuneRow
    from embedcalc.analysis.workload import Optimizer
    from embedcalc.api.finetune import FinetuneOptions

__all__ = ["FinetunePlan", "plan_finetune"]


@dataclass(frozen=True)
class FinetunePlan:
    """The rows of a fine-tuning plan, best first, and what was planned."""

    target: str
    rows: tuple[FinetuneRow, ...]
    settings: dict[str, Any]
    asked: str  # the method asked for (full when no --peft)

    @property
    def best(self) -> FinetuneRow | None:
        return next((r for r in self.rows if r.fits), None)

    @property
    def ok(self) -> bool:
        """Some device fits the method asked for."""
        return any(r.fits and r.method.split(" ")[0] == self.asked for r in self.rows)

    @property
    def recommendation(self) -> str:
        asked = [r for r in self.rows if r.method.split(" ")[0] == self.asked]
        fit = next((r for r in asked if r.fits), None)
        if fit is not None:
            return f"{self.asked} fits {fit.device} ({fit.replicas} device(s), recompute {fit.recompute})"
        why = asked[0].reasons[0] if asked and asked[0].reasons else "no row"
        other = self.best
        alt = f"; {other.method} fits {other.device}" if other is not None else ""
        return f"{self.asked} fits no device planned ({why}){alt}"

    def to_json(self) -> dict[str, Any]:
        return {"target": self.target, "mode": "training", "finetune": self.asked, "settings": self.settings,
                "recommendation": self.recommendation, "rows": [r.to_json() for r in self.rows]}  # fmt: skip


def plan_finetune(
    config: ConfigLike,
    options: FinetuneOptions,
    *,
    train_tokens: int | None,
    seq_len: int | None = None,
    batch_size: int = 1,
    dtype: str | None = None,
    hardware: str | Sequence[str] | None = None,
    max_devices: int | None = None,
    price_per_hour: Mapping[str, float] | None = None,
    optimizer: Optimizer = "adamw",
) -> FinetunePlan:
    """Every method × device × replicas (up to ``max_devices``, default 1) for ``train_tokens`` tokens in
    sequences of ``seq_len`` (default 4096, at most the context): fitting rows first, cheapest first."""
    from embedcalc.analysis.checked import analyze_loaded
    from embedcalc.analysis.plan.finetune import FinetuneRequest
    from embedcalc.analysis.plan.finetune import plan_finetune as search
    from embedcalc.analysis.workload import Workload
    from embedcalc.api.plan import TRAINING_SEQ_LEN, _devices, _prices
    from embedcalc.config.dtypes import DEFAULT_DTYPE, Dtype

    if train_tokens is None:
        raise usage(
            "a fine-tuning plan needs train_tokens (--train-tokens 100M): the token budget", "train_tokens"
        )
    loaded = as_loaded(config)
    default_len = min(TRAINING_SEQ_LEN, loaded.config.max_seq_len)
    w = Workload(
        batch_size=batch_size,
        seq_len=seq_len or default_len,
        mode="training",
        optimizer=optimizer,
        dtype=cast("Dtype", dtype or DEFAULT_DTYPE),
        dtype_source="flag" if dtype else "default",
    )
    w = analyze_loaded(loaded, w).workload  # the workload checks analyze makes, in the model's own dtype
    spec = options.spec
    request = FinetuneRequest(w, train_tokens, max_devices or 1, spec if spec.method != "full" else None,
                              options.offload)  # fmt: skip
    devices = _prices(_devices(hardware), price_per_hour)
    rows = tuple(search(loaded.config, devices, request))
    settings = {"workload": w.as_dict(), "train_tokens": train_tokens, "max_devices": request.max_devices}
    return FinetunePlan(loaded.target, rows, settings, spec.method)
