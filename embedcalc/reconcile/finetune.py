"""``verify --peft``: a fine-tune's analytic trainable and total parameters (peft's convention,
:mod:`embedcalc.analysis.finetune.adapters`) beside two independent counts, a row per check:

- embedcalc's torch model built on the meta device with real adapters (:mod:`embedcalc.modeling.adapters`; a
  module saved whole counted twice in "all", its frozen original and its trainable copy, as peft does);
- peft's ``get_nb_trainable_parameters`` on the model transformers builds from the same ``config.json`` on the
  meta device (:mod:`embedcalc.modeling.hf_peft`), where the target is a Hugging Face config.

A check that cannot run (a preset has no config.json for transformers; adapters on routed experts' parameters
are counted, not built on embedcalc's model; peft not installed) is a note saying why, not a row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from embedcalc.reconcile.verify import ReconcileRow

__all__ = ["FinetuneVerify"]


@dataclass(frozen=True)
class FinetuneVerify:
    """The fine-tune's checks: each an exact row (analytic, counted), and the notes of those not run."""

    method: str
    rank: int
    targets: tuple[str, ...]  # the targets as resolved (all-linear, the family's default)
    rows: tuple[ReconcileRow, ...]
    notes: tuple[str, ...]

    @property
    def agree(self) -> bool:
        return all(r.difference == 0 for r in self.rows)

    def mismatches(self) -> list[str]:
        return [f"{r.component}: analytic {r.analytic:,}, counted {r.counted:,} ({r.difference:+,})"
                for r in self.rows if r.difference]  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        """The ``finetune`` object of a ``verify --peft`` result."""
        return {"method": self.method, "rank": self.rank, "targets": list(self.targets), "agree": self.agree,
                "rows": [r.as_dict() for r in self.rows], "not_run": list(self.notes)}  # fmt: skip
