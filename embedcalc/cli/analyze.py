"""``embedcalc analyze TARGET``: params, FLOPs and memory breakdown for one workload (and time with --hardware)."""

from __future__ import annotations

from typing import Annotated

import typer

from embedcalc.cli import output
from embedcalc.cli.common import FormatOption, OutputFormat, SetOption, enforce_budget, handle_errors
from embedcalc.cli.finetune_options import FinetuneFlags
from embedcalc.cli.hardware_options import TimeFlags
from embedcalc.cli.options import defaulted, flags
from embedcalc.cli.serving_options import ServingFlags
from embedcalc.cli.workload_options import BudgetFlags, ParallelFlags, WorkloadFlags

# The command modules import only their options at the top: `embedcalc --help` builds every command's signature
# without loading the config models or the analysis (tests/cli/test_cli.py checks it); the API loads in the command.


@handle_errors("analyze")
@flags
def analyze_command(
    target: Annotated[str, typer.Argument(help="Preset name or config file (YAML/JSON).")],
    run: WorkloadFlags,
    layout: ParallelFlags,
    limits: BudgetFlags,
    timing: TimeFlags,
    serving: ServingFlags,
    tune: FinetuneFlags,
    overrides: SetOption = None,
    format: FormatOption = OutputFormat.table,
) -> None:
    """Params, FLOPs (with the O(n²·d) attention term explicit) and memory, component by component.

    Inference memory = weights + KV cache (decoders) + peak activations of one forward (eager attention holds
    the batch×heads×n² scores, sdpa does not). Training = weights + gradients + optimizer state + saved
    activations (Korthikanti et al. 2022). Memory is per device: with --tp/--pp/--dp/--zero, that of the
    heaviest pipeline stage. --max-params/--max-memory/--max-flops exit 5 when exceeded.

    --hardware NAME adds time by the roofline model, per component (time to first token, decode per token and
    tokens/s for decoders, step time and a whole run for training) and the largest batch and context that fit.

    A Hugging Face config.json of a family embedcalc has no native mapping for is counted, when torch and
    transformers are installed, by transformers' own model class on the meta device (params per component,
    active experts, FLOPs, the family's own KV cache; JSON "reader": "transformers-meta"); --set then sets the
    file's own keys.

    --peft lora|dora|qlora (with --lora-rank, --lora-targets, ...) or --freeze PARTS (training) fine-tune: trainable
    and total parameters as peft counts them, and the memory of one step on the device (frozen weights in their
    format, NF4 for qlora; adapters, their gradients and optimizer state) and, with --offload, on the host.

    --concurrency C / --memory-utilization F (inference) add the memory a server holds (vLLM's convention): paged
    KV for C sequences in 16-token blocks, one forward's activation workspace and a runtime reserve of 1 − F of the
    device (default 0.9), and whether that fits.
    """
    if run.dtype == "all":
        _every_dtype(target, overrides, run, layout, timing, serving, tune, limits, format)
        return
    from embedcalc.api.analyze import analyze_or_general
    from embedcalc.api.results import AnalysisReport

    workload = run.workload(layout)
    report = analyze_or_general(
        target, overrides, workload, timing.options(), limits.budget(), serving.options(), tune.options()
    )
    # no native mapping: counted by transformers' own class on the meta device (DESIGN §19)
    if not isinstance(report, AnalysisReport):
        if format is OutputFormat.json:
            status = "error" if report.over_budget else "ok"
            output.emit_json("analyze", [report.to_json()], report.count.workload, report.over_budget, status)
        else:
            from embedcalc.api.general import NOT_NATIVE
            from embedcalc.render.general import general_tables

            why = next((n for n in report.count.notes if n.startswith(NOT_NATIVE)), None)
            said = why or f"{report.count.counted_by} (no native mapping of {report.count.model_type!r})"
            output.stderr.print(f"embedcalc: {target}: {said}", markup=False)
            for table in general_tables(report.count):
                output.stdout.print(table)
        enforce_budget(report.over_budget, json_emitted=format is OutputFormat.json)
        return
    result, estimate, over = report.analysis, report.time, report.over_budget
    if result.reader_note:
        output.stderr.print(f"embedcalc: {target}: {result.reader_note}", markup=False)
    output.warn(result.warnings, target)
    if format is OutputFormat.json:
        status = "error" if over else "ok"
        # the workload as analysed: in the model's own dtype unless --dtype (dtype_source says which)
        output.emit_json("analyze", [report.to_json()], result.workload.as_dict(), over, status)
    else:
        from embedcalc.render.tables import flops_table, memory_table, params_table, workload_header

        output.stdout.print(workload_header(result, defaulted("batch_size", "seq_len")))
        if report.finetune is not None:
            from embedcalc.render.finetune import finetune_tables

            tables = [params_table(result), flops_table(result), *finetune_tables(result, report.finetune)]
        else:
            tables = [params_table(result), flops_table(result), memory_table(result, report.serving)]
        for table in tables:
            output.stdout.print(table)
        if result.communication.collectives:
            from embedcalc.render.distributed import communication_table

            output.stdout.print(communication_table(result))
        if estimate is not None:
            from embedcalc.render.roofline import roofline_tables

            for table in roofline_tables(result, estimate):
                output.stdout.print(table)
    enforce_budget(over, json_emitted=format is OutputFormat.json)


def _every_dtype(target: str, overrides: list[str] | None, run: WorkloadFlags, layout: ParallelFlags,
                 timing: TimeFlags, serving: ServingFlags, tune: FinetuneFlags, limits: BudgetFlags,
                 format: OutputFormat) -> None:  # fmt: skip
    """``--dtype all``: the memory of every dtype in one table (api/dtypes.py); memory only, so the options that
    add time, serving memory, a fine-tune or a budget are refused rather than ignored."""
    import dataclasses

    from embedcalc.api.dtypes import memory_by_dtype
    from embedcalc.api.load import load_target
    from embedcalc.api.workload import usage

    extra = [flag for flag, given in (("--hardware", timing.hardware is not None),
                                      ("--concurrency/--memory-utilization", serving.options() is not None),
                                      ("--peft/--freeze/--offload", tune.options() is not None),
                                      ("--max-params/--max-memory/--max-flops", not limits.budget().empty))
             if given]  # fmt: skip
    if extra:
        raise usage(f"--dtype all shows the memory of every dtype; {extra[0]} applies to one: give one dtype",
                    "--dtype")  # fmt: skip
    workload = dataclasses.replace(run, dtype=None).workload(layout)
    result = memory_by_dtype(load_target(target, overrides), target, workload)
    if format is OutputFormat.json:
        output.emit_json("analyze", [result.to_json()], result.to_json()["workload"], [], "ok")
        return
    from embedcalc.render.dtypes import dtype_table

    output.stdout.print(dtype_table(result))
