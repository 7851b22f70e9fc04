"""Fine-tuning on an analysis (``analyze --mode training --peft lora|dora|qlora ...`` or ``--freeze ...``): the
trainable and total parameters as peft counts them and the memory of one step on the device and the host
(:mod:`embedcalc.analysis.finetune` states the conventions)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from embedcalc.api.workload import usage

if TYPE_CHECKING:
    from embedcalc.analysis.finetune.adapters import AdapterCounts, FinetuneSpec
    from embedcalc.analysis.finetune.memory import FinetuneMemory, Offload
    from embedcalc.analysis.report import Analysis
    from embedcalc.config.resolved import ResolvedShape

__all__ = ["FinetuneOptions", "FinetuneResult", "apply_finetune", "finetune_of"]


@dataclass(frozen=True)
class FinetuneOptions:
    """The fine-tune: its spec (method, LoRA's settings, frozen parts) and what is offloaded to the host."""

    spec: FinetuneSpec
    offload: Offload = "none"


@dataclass(frozen=True)
class FinetuneResult:
    """Counts and memory of one fine-tune of one analysed config."""

    counts: AdapterCounts
    memory: FinetuneMemory

    def to_json(self) -> dict[str, Any]:
        c = self.counts
        spec = c.spec
        return {
            "method": spec.method,
            "rank": spec.rank if spec.adapters else None,
            "alpha": spec.alpha if spec.adapters else None,
            "dropout": spec.dropout if spec.adapters else None,
            "targets": list(c.targets),
            "target_modules": len(c.modules),
            "target_parameters": len(c.expert_params),
            "modules_to_save": list(c.saved),
            "freeze": list(spec.freeze),
            "trainable_params": c.trainable_total,
            "all_params": c.all_total,
            "trainable_breakdown": c.trainable.as_dict(),
            "memory": self.memory.to_json(),
        }


def finetune_of(config: ResolvedShape, workload_mode: str, options: FinetuneOptions) -> AdapterCounts:
    """The counts of ``options`` on ``config``; a usage error (exit 2) outside training."""
    from embedcalc.analysis.finetune.adapters import count_finetune

    if workload_mode != "training":
        raise usage("--peft and --freeze describe a fine-tune: add --mode training", "--peft")
    return count_finetune(config, options.spec)


def apply_finetune(analysis: Analysis, options: FinetuneOptions) -> FinetuneResult:
    """Counts and memory of the fine-tune ``options`` describe, for ``analysis``' config and workload."""
    from embedcalc.analysis.finetune.memory import finetune_memory

    w = analysis.workload
    if w.parallel.devices > 1:
        raise usage(
            "fine-tuning memory is modelled on one device (with --offload for the host); drop "
            "--tp/--pp/--dp/--ep/--zero, or analyze full training without --peft/--freeze",
            "--peft",
        )
    counts = finetune_of(analysis.config, w.mode, options)
    return FinetuneResult(counts, finetune_memory(analysis.config, w, counts, options.offload))
