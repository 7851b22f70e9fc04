"""--peft, --lora-rank, --lora-alpha, --lora-targets, --lora-dropout, --modules-to-save, --freeze, --offload: a
fine-tune (an option group, see cli/options.py; the conventions in embedcalc/analysis/finetune/)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Literal

import typer

from embedcalc.cli.options import bounded_int

if TYPE_CHECKING:
    from embedcalc.api.finetune import FinetuneOptions

Peft = Literal["lora", "dora", "qlora"]
OffloadChoice = Literal["none", "optimizer", "params"]


def _names(value: str | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    names = tuple(n.strip() for n in value.split(",") if n.strip())
    if not names:
        raise typer.BadParameter("give one or more names separated by commas")
    return names


@dataclass(frozen=True)
class FinetuneFlags:
    """The fine-tune: adapters (--peft and LoRA's settings) or full fine-tuning with frozen parts (--freeze)."""

    peft: Annotated[
        Peft | None,
        typer.Option(
            "--peft",
            help="Training: fine-tune with adapters. lora (Hu et al. 2021), dora (LoRA plus "
            "a magnitude per output feature, Liu et al. 2024), qlora (LoRA over NF4 frozen weights, "
            "Dettmers et al. 2023). Default: full fine-tuning.",
        ),
    ] = None
    lora_rank: Annotated[
        int,
        typer.Option("--lora-rank", min=1, max=65536, callback=bounded_int, help="LoRA rank r (peft's r)."),
    ] = 8
    lora_alpha: Annotated[
        float | None,
        typer.Option(
            "--lora-alpha", min=0.0, help="LoRA alpha (scales B·A by alpha/r; no cost). Default peft's 8."
        ),
    ] = None
    lora_targets: Annotated[
        str | None,
        typer.Option(
            "--lora-targets",
            metavar="NAMES",
            help="Modules to adapt, comma-separated, as peft's target_modules takes them (q_proj,v_proj; "
            "a full name such as model.layers.0.self_attn.q_proj; all-linear; experts.gate_up_proj for "
            "MoE experts). Default: peft's default for the model's family.",
        ),
    ] = None
    lora_dropout: Annotated[
        float, typer.Option("--lora-dropout", min=0.0, max=0.999, help="LoRA dropout (its mask is saved).")
    ] = 0.0
    modules_to_save: Annotated[
        str | None,
        typer.Option(
            "--modules-to-save",
            metavar="NAMES",
            help="Modules trained whole beside the adapters (peft's modules_to_save), e.g. lm_head or "
            "embed_tokens.",
        ),
    ] = None
    freeze: Annotated[
        str | None,
        typer.Option(
            "--freeze",
            metavar="PARTS",
            help="Full fine-tuning with frozen parts, comma-separated: a component (embedding, head/lm, "
            "decoder/attention) or a layer range (layers:0-23, decoder:0-5).",
        ),
    ] = None
    offload: Annotated[
        OffloadChoice,
        typer.Option(
            "--offload",
            help="Training: keep on the host the optimizer state and gradients "
            "(optimizer: ZeRO-Offload) or also the weights (params: ZeRO-Infinity / FSDP CPU offload).",
        ),
    ] = "none"

    def options(self) -> FinetuneOptions | None:
        """The API's form; None when no fine-tuning flag is given (analyze then models full training)."""
        targets, saved, freeze = _names(self.lora_targets), _names(self.modules_to_save), _names(self.freeze)
        if self.peft is None and not freeze and self.offload == "none":
            if targets or saved:
                from embedcalc.api.workload import usage

                raise usage("--lora-targets and --modules-to-save need --peft lora|dora|qlora", "--peft")
            return None
        from embedcalc.analysis.finetune.adapters import FinetuneSpec
        from embedcalc.api.finetune import FinetuneOptions

        spec = FinetuneSpec(
            method=self.peft or "full",
            rank=self.lora_rank,
            alpha=8.0 if self.lora_alpha is None else self.lora_alpha,
            targets=targets,
            dropout=self.lora_dropout,
            modules_to_save=saved or (),
            freeze=freeze or (),
        )
        return FinetuneOptions(spec, self.offload)
