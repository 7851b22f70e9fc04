"""``embedcalc verify TARGET``: build the model in torch on the meta device and reconcile it with the analyzer.

Parameters: ``numel`` of the submodules behind each breakdown key against the analytic count. FLOPs:
``FlopCounterMode``'s per-module counts of one forward pass on meta tensors (nothing is allocated, and the CPU
SDPA gap of PyTorch issue 195460 cannot hide attention) against the analytic forward FLOPs. Exit 0 when every
component agrees exactly, 1 otherwise.
"""

from __future__ import annotations

from typing import Annotated

import typer

from embedcalc.cli import output
from embedcalc.cli.common import FormatOption, OutputFormat, SetOption, handle_errors
from embedcalc.cli.finetune_options import FinetuneFlags
from embedcalc.cli.options import flags, only
from embedcalc.cli.workload_options import ParallelFlags, WorkloadFlags
from embedcalc.errors import ExitCode, outcome


@handle_errors("verify")
@flags
def verify_command(
    target: Annotated[str, typer.Argument(help="Preset name or config file (YAML/JSON).")],
    run: Annotated[WorkloadFlags, only("batch_size", "seq_len", "tgt_len", "attention")],
    layout: Annotated[ParallelFlags, only("tp", "pp", "dp", "zero")],
    tune: Annotated[
        FinetuneFlags,
        only("peft", "lora_rank", "lora_alpha", "lora_targets", "lora_dropout", "modules_to_save"),
    ],
    overrides: SetOption = None,
    format: FormatOption = OutputFormat.table,
    checkpoint: Annotated[
        bool,
        typer.Option(
            "--checkpoint",
            help="TARGET is a model directory (or a cached hub id) with config.json and *.safetensors: reconcile "
            "its "
            "stored tensors with the config's analytic count per component, from the headers alone (no torch); "
            "exit 3 naming the tensors that disagree.",
        ),
    ] = False,
) -> None:
    """Reconcile analytic params and FLOPs with a torch model built on the meta device; exit 1 on any difference.

    With --tp/--dp --zero 3/--pp the model is also sharded the way torch shards it (DTensor tensor parallelism,
    FSDP2, a pipeline module split) on torch's fake process group, and every rank's parameters and the collectives
    of one training step are reconciled with the analytic per-device numbers. With --checkpoint, the checkpoint
    on disk is reconciled instead: tensors, shapes, dtypes and bytes per component, quantized ones with their
    scales, a tied head stored once. With --peft, the fine-tune's trainable and total parameters are reconciled
    with embedcalc's torch model carrying real adapters and, for a Hugging Face config.json, with peft's count
    on transformers' model (both on the meta device).
    """
    finetune = tune.options()
    if checkpoint:
        if finetune is not None:
            raise typer.BadParameter("--checkpoint reads the stored tensors; verify --peft without it",
                                     param_hint="'--peft'")  # fmt: skip
        _verify_checkpoint(target, overrides, format)
        return
    if layout.zero not in (0, 3):
        raise typer.BadParameter("verify shards with FSDP2 `fully_shard`, which is ZeRO-3: use --zero 3 or 0",
                                 param_hint="'--zero'")  # fmt: skip
    from embedcalc.api.verify import verify_report

    workload = run.workload(layout)
    report = verify_report(target, overrides, workload, run.attention, finetune)
    output.warn(report.analysis.warnings, target)
    result, sharded = report.result, report.sharded
    if format is OutputFormat.json:
        output.emit_json(
            "verify", [report.to_json()], workload.as_dict(), status="ok" if report.agree else "mismatch"
        )
    else:
        from embedcalc.render.tables import reconcile_table, verify_verdict

        output.stdout.print(reconcile_table(f"Parameters — {target}: analytic vs torch numel", result.params))
        title = f"Forward FLOPs — {target} (batch {run.batch_size}, seq_len {run.seq_len}): analytic vs FlopCounterMode"
        output.stdout.print(reconcile_table(title, result.flops))
        if sharded is not None:
            from embedcalc.render.distributed import sharded_tables

            output.stdout.print(sharded_tables(sharded))
        if report.finetune is not None:
            from embedcalc.render.finetune import finetune_verify_table

            output.stdout.print(finetune_verify_table(target, report.finetune))
            for note in report.finetune.notes:
                output.stdout.print(f"not run: {note}", markup=False, highlight=False)
        others = [
            (what, part.agree)
            for what, part in (("every shard", sharded), ("the fine-tune's counts", report.finetune))
            if part is not None
        ]
        output.stdout.print(
            verify_verdict(target, result.params, result.flops, others), markup=False, highlight=False
        )
    if not report.agree:
        for line in [*(sharded.mismatches() if sharded is not None else []),
                     *(report.finetune.mismatches() if report.finetune is not None else [])]:  # fmt: skip
            output.stderr.print(f"embedcalc: {target}: {line}", markup=False, soft_wrap=True)  # one line each
        output.stderr.print(
            f"embedcalc: {target}: analytic and torch counts differ (see the difference column)", markup=False
        )
        raise outcome(ExitCode.RUNTIME, f"{target}: analytic and torch counts differ", "mismatch")


def _verify_checkpoint(target: str, overrides: list[str] | None, format: OutputFormat) -> None:
    from embedcalc.api.checkpoint import verify_checkpoint
    from embedcalc.render.checkpoint import MAX_EXTRA_LINES

    check = verify_checkpoint(target, overrides)
    if format is OutputFormat.json:
        output.emit_json("verify", [check.to_json()], status="ok" if check.agree else "mismatch")
    else:
        from embedcalc.render.checkpoint import checkpoint_lines, checkpoint_table

        output.stdout.print(checkpoint_table(check))
        for line in checkpoint_lines(check):
            output.stdout.print(line, markup=False, highlight=False)
    if not check.agree:
        problems = check.problems()
        for line in problems[:MAX_EXTRA_LINES]:  # bounded like the extra tensors: JSON holds every one
            output.stderr.print(f"embedcalc: {target}: {line}", markup=False, soft_wrap=True)  # one line each
        if len(problems) > MAX_EXTRA_LINES:
            output.stderr.print(f"embedcalc: {target}: ... and {len(problems) - MAX_EXTRA_LINES:,} more "
                                "disagreements (--format json lists every one)",
                                markup=False, soft_wrap=True)  # fmt: skip
        raise outcome(ExitCode.INVALID_CONFIG, f"{target}: the checkpoint disagrees with its config",
                      "checkpoint_mismatch")  # fmt: skip
