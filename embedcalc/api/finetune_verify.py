"""``verify --peft``: the fine-tune's analytic counts reconciled with embedcalc's torch model carrying real adapters
and, for a Hugging Face ``config.json``, with peft on transformers' own model (:mod:`embedcalc.reconcile.finetune`
states the checks). Both models are built on the meta device: nothing is allocated, any size verifies."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from embedcalc.api.workload import usage
from embedcalc.errors import EmbedcalcError

if TYPE_CHECKING:
    from embedcalc.analysis.finetune.adapters import AdapterCounts
    from embedcalc.api.finetune import FinetuneOptions
    from embedcalc.reconcile.finetune import FinetuneVerify
    from embedcalc.reconcile.verify import ReconcileRow
    from embedcalc.sources.loading import LoadedConfig

__all__ = ["lora_config", "verify_counts", "verify_finetune"]


def lora_config(counts: AdapterCounts) -> dict[str, Any]:
    """peft's ``LoraConfig`` keywords for the fine-tune ``counts`` was counted for: the targets as given (peft
    resolves its own family default and ``all-linear``), a name that adapts routed experts' parameters as
    ``target_parameters``. QLoRA is LoRA to peft's count (a 4-bit weight counts its elements)."""
    spec = counts.spec
    config: dict[str, Any] = {"r": spec.rank, "lora_alpha": spec.alpha, "lora_dropout": spec.dropout,
                              "use_dora": spec.method == "dora"}  # fmt: skip
    if spec.modules_to_save:
        config["modules_to_save"] = list(spec.modules_to_save)
    if spec.targets is None:
        return config
    if spec.targets == ("all-linear",):
        return config | {"target_modules": "all-linear"}
    experts = [p.name for p in counts.expert_params]
    params = [t for t in spec.targets if any(n == t or n.endswith(f".{t}") for n in experts)]
    modules = [t for t in spec.targets if t not in params]
    return config | {"target_modules": modules} | ({"target_parameters": params} if params else {})


def _rows(label: str, counts: AdapterCounts, trainable: int, total: int) -> list[ReconcileRow]:
    from embedcalc.reconcile.verify import ReconcileRow

    return [ReconcileRow(f"trainable — {label}", counts.trainable_total, trainable),
            ReconcileRow(f"all — {label}", counts.all_total, total)]  # fmt: skip


def _peft_side(
    loaded: LoadedConfig, target: str, overrides: Sequence[str] | None, counts: AdapterCounts
) -> tuple[list[ReconcileRow], str | None]:
    """peft on transformers' model of the target's config.json, or why it did not run."""
    import importlib.util

    where = "peft on transformers' model"
    if loaded.source != "hf":
        return [], (f"{where}: {target} is not a Hugging Face config.json (verify --peft on the hub file, "
                    "a folder or a cached hub id runs it)")  # fmt: skip
    if overrides:
        return [], f"{where}: --set changes embedcalc's reading of the file, not the file transformers builds"
    missing = [n for n in ("transformers", "peft") if importlib.util.find_spec(n) is None]
    if missing:
        return [], f"{where}: {' and '.join(missing)} not installed (pip install {' '.join(missing)})"
    from embedcalc.modeling.hf_peft import peft_counts
    from embedcalc.sources.loading import resolve_target

    raw = resolve_target(target)[0]
    try:
        counted = peft_counts(raw, lora_config(counts))
    except Exception as exc:  # transformers' or peft's refusal, in whatever class they raise
        return [], f"{where}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    label = f"peft on transformers' {counted.class_name}"
    return _rows(label, counts, counted.trainable, counted.total), None


def verify_counts(loaded: LoadedConfig, options: FinetuneOptions) -> AdapterCounts:
    """The analytic counts ``verify --peft`` checks (no torch: a bad target is refused before torch loads); a
    usage error (exit 2) for a fine-tune without adapters."""
    from embedcalc.analysis.finetune.adapters import count_finetune

    if not options.spec.adapters:
        raise usage("verify reconciles the adapters of --peft lora|dora|qlora; --freeze and --offload change "
                    "no count to verify", "--peft")  # fmt: skip
    return count_finetune(loaded.config, options.spec)


def verify_finetune(
    loaded: LoadedConfig, target: str, overrides: Sequence[str] | None, counts: AdapterCounts
) -> FinetuneVerify:
    """The fine-tune ``counts`` of ``loaded`` (``target`` as given, ``--set`` overrides) reconciled, a row per
    check (:mod:`embedcalc.reconcile.finetune`)."""
    from embedcalc.api.finetune_torch import torch_counts
    from embedcalc.reconcile.finetune import FinetuneVerify

    spec = counts.spec
    rows: list[ReconcileRow] = []
    notes: list[str] = []
    try:
        trainable, total = torch_counts(loaded.config, counts)
    except EmbedcalcError as exc:
        notes.append(f"embedcalc's torch model: {exc.message}")
    else:
        rows += _rows("embedcalc's torch model with adapters", counts, trainable, total)
    peft_rows, note = _peft_side(loaded, target, overrides, counts)
    rows += peft_rows
    notes += [note] if note else []
    return FinetuneVerify(spec.method, spec.rank, counts.targets, tuple(rows), tuple(notes))
