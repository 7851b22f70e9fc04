"""``diff``: every weight tensor of two models, kept / reshaped / new / dropped (DESIGN.md §12), from the torch
models built on the meta device (needs the ``torch`` extra)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from embedcalc.api.load import load_target
from embedcalc.api.torch_env import require_torch
from embedcalc.errors import Problem
from embedcalc.sources.loading import LoadedConfig

if TYPE_CHECKING:
    from embedcalc.reconcile.diff import ModelDiff

__all__ = ["DiffReport", "diff_targets"]


@dataclass(frozen=True)
class DiffReport:
    """The two loaded configs with their warnings, and the tensor-by-tensor diff of A into B."""

    a: LoadedConfig
    b: LoadedConfig
    diff: ModelDiff
    warnings_a: list[Problem]
    warnings_b: list[Problem]


def diff_targets(a: str, b: str, overrides: Sequence[str] | None) -> DiffReport:
    """``embedcalc diff A B``: ``--set`` applies to B only (``diff llama-2-7b llama-2-7b --set num_kv_heads=8`` is
    the GQA conversion); B is labelled with its overrides."""
    from embedcalc.config.advisories import config_warnings
    from embedcalc.reconcile.verify import check_buildable

    loaded_a, loaded_b = load_target(a), load_target(b, overrides)
    label_b = b if not overrides else f"{b} --set " + " --set ".join(overrides)
    check_buildable(loaded_a.config, a, "diff")  # before torch loads: a refusal costs nothing
    check_buildable(loaded_b.config, label_b, "diff")
    require_torch()
    from embedcalc.reconcile.diff import diff_models

    # a preset or a Hugging Face file: the model's own sizes, so no vocabulary-padding advice
    warnings_a, warnings_b = (
        x.source_warnings + config_warnings(x.config, x.user_keys, x.source != "file")
        for x in (loaded_a, loaded_b)
    )
    diff = diff_models(a, loaded_a.config, label_b, loaded_b.config)
    return DiffReport(loaded_a, loaded_b, diff, warnings_a, warnings_b)
