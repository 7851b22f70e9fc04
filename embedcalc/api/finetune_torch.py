"""The analytic adapters of a fine-tune placed on embedcalc's torch model (:mod:`embedcalc.modeling.adapters`):
``bench --mode training --peft ...`` trains them, and their torch counts reconcile with peft's convention.

A transformers module name maps to embedcalc's module by its role (:class:`~embedcalc.analysis.finetune.modules
.LinearModule` ``role``): ``q_proj`` -> ``<stack>.layers.<i>.attention.qkv.q``, GPT-2's fused ``c_attn`` -> the
three of ``attention.qkv`` under one adapter, ``gate_up_proj`` -> ``ffn.in_.gate`` and ``ffn.in_.up``, ...
Modules saved whole are made trainable in place (``head.lm``, ``embedding.token``, ``pooler.dense``): the frozen
original peft keeps beside its copy is the one count embedcalc's model does not hold (:func:`torch_counts` adds it).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from embedcalc.api.workload import usage

if TYPE_CHECKING:
    from embedcalc.analysis.finetune.adapters import AdapterCounts
    from embedcalc.analysis.report import Analysis
    from embedcalc.api.finetune import FinetuneOptions
    from embedcalc.config.resolved import ResolvedShape
    from embedcalc.modeling.adapters import AdapterSite
    from embedcalc.modeling.benchmark import BenchSettings
    from embedcalc.reconcile.bench import BenchResult

__all__ = ["adapter_sites", "saved_paths", "torch_counts", "tuned_settings", "with_finetune_prediction"]

_PARTS = {
    "q": ("qkv.q",),
    "k": ("qkv.k",),
    "v": ("qkv.v",),
    "qkv": ("qkv.q", "qkv.k", "qkv.v"),
    "out": ("out",),
}
_FFN = {"gate": ("in_.gate",), "up": ("in_.up",), "gate_up": ("in_.gate", "in_.up"), "in": ("in_",),
        "out": ("out",)}  # fmt: skip
_SAVED = {"head/lm": "head.lm", "embedding/token": "embedding.token", "pooler": "pooler.dense"}


def _paths(role: str, stack: str | None, layer: int | None) -> tuple[str, ...]:
    if stack is None or layer is None:
        if role == "pooler":
            return ("pooler.dense",)
        raise usage(f"an adapter on {role} is not built on embedcalc's torch model; target the layers' modules",
                    "--lora-targets")  # fmt: skip
    where, _, part = role.partition("/")
    table = _FFN if where == "ffn" else _PARTS if where in ("attention", "cross_attention") else None
    if table is None or part not in table:
        raise usage(f"an adapter on {role} is not built on embedcalc's torch model yet (attention and dense FFN "
                    "modules are)", "--lora-targets")  # fmt: skip
    return tuple(f"{stack}.layers.{layer}.{where}.{p}" for p in table[part])


def adapter_sites(counts: AdapterCounts) -> list[AdapterSite]:
    """One site per adapted module of ``counts``, in embedcalc's module paths."""
    from embedcalc.modeling.adapters import AdapterSite

    if counts.expert_params:
        raise usage("adapters on MoE experts' parameters are counted, not built on embedcalc's torch model",
                    "--lora-targets")  # fmt: skip
    spec = counts.spec
    return [AdapterSite(_paths(m.role, m.stack, m.layer), spec.rank, spec.alpha, spec.dropout, spec.method == "dora")
            for m in counts.modules]  # fmt: skip


def saved_paths(config: ResolvedShape, counts: AdapterCounts) -> tuple[str, ...]:
    """embedcalc's modules for the modules saved whole (a tied LM head's weight is the token table's)."""
    keys = {
        k.removesuffix("/modules_to_save") for k, _ in counts.added.items() if k.endswith("/modules_to_save")
    }
    if config.tie_embeddings and "head/lm" in keys:
        keys = (keys - {"head/lm"}) | {"embedding/token"}
    return tuple(_SAVED[k] for k in sorted(keys) if k in _SAVED)


def torch_counts(config: ResolvedShape, counts: AdapterCounts) -> tuple[int, int]:
    """(trainable, all) parameters of embedcalc's torch model with real adapters, built on the meta device, in
    peft's convention (a module saved whole counted twice in all: its frozen original and its trainable copy)."""
    from embedcalc.modeling.adapters import adapted_counts

    trainable, total = adapted_counts(config, adapter_sites(counts), saved_paths(config, counts))
    copies = sum(v for k, v in counts.added.items() if k.endswith("/modules_to_save"))
    return trainable, total + copies


@dataclass(frozen=True)
class Tuned:
    """A benched fine-tune: its analytic counts, offload, and the torch model's counts."""

    counts: AdapterCounts
    options: FinetuneOptions
    torch_trainable: int
    torch_all: int


def tuned_settings(
    analysis: Analysis, options: FinetuneOptions, settings: BenchSettings
) -> tuple[BenchSettings, Tuned]:
    """``settings`` with the adapters of ``options`` placed (LoRA and DoRA; QLoRA's NF4 kernels and offload are
    predicted by analyze, not run here: a usage error)."""
    from embedcalc.api.finetune import finetune_of

    if options.spec.method == "qlora" or options.offload != "none":
        raise usage("bench runs LoRA, DoRA and frozen parts on embedcalc's torch model; qlora's NF4 kernels and "
                    "offload are predicted by analyze --peft / --offload", "--peft")  # fmt: skip
    if options.spec.freeze:
        raise usage("bench --freeze is not run yet; analyze --freeze predicts it", "--freeze")
    counts = finetune_of(analysis.config, analysis.workload.mode, options)
    trainable, total = torch_counts(analysis.config, counts)
    sites = tuple(adapter_sites(counts))
    tuned = replace(settings, adapters=sites, saved=saved_paths(analysis.config, counts))
    return tuned, Tuned(counts, options, trainable, total)


def with_finetune_prediction(result: BenchResult, tuned: Tuned) -> BenchResult:
    """The measurement beside the fine-tune's predicted device memory (not full training's), and the counts."""
    from embedcalc.analysis.finetune.memory import finetune_memory
    from embedcalc.reconcile.prediction import error_pct

    a = result.analysis
    memory = finetune_memory(a.config, a.workload, tuned.counts, tuned.options.offload)
    m = result.measurement
    predicted = memory.device_bytes
    measured = replace(m, predicted_memory_bytes=predicted, memory_error_pct=error_pct(m.peak_memory_bytes, predicted),
                       predicted={**m.predicted, "peak_memory_bytes": predicted},
                       prediction_note=f"{m.prediction_note}; memory: the fine-tune's (analyze --peft)")  # fmt: skip
    counts = tuned.counts
    finetune = {"method": counts.spec.method, "trainable_params": counts.trainable_total,
                "all_params": counts.all_total, "torch_trainable_params": tuned.torch_trainable,
                "torch_all_params": tuned.torch_all, "memory": memory.to_json()}  # fmt: skip
    return replace(result, measurement=measured, finetune=finetune)
