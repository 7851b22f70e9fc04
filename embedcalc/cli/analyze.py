"""``embedcalc analyze TARGET``: params, FLOPs and memory breakdown for one workload (and time with --hardware)."""

from __future__ import annotations

from typing import Annotated

import typer

from embedcalc.cli import output
from embedcalc.cli.common import FormatOption, OutputFormat, SetOption, enforce_budget, handle_errors
from embedcalc.cli.hardware_options import TimeFlags
from embedcalc.cli.options import BudgetFlags, ParallelFlags, WorkloadFlags, flags
from embedcalc.cli.serving_options import ServingFlags

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

    --concurrency C / --memory-utilization F (inference) add the memory a server holds (vLLM's convention): paged
    KV for C sequences in 16-token blocks, one forward's activation workspace and a runtime reserve of 1 − F of the
    device (default 0.9), and whether that fits.
    """
    from embedcalc.api.analyze import analyze_report

    workload = run.workload(layout)
    report = analyze_report(target, overrides, workload, timing.options(), limits.budget(), serving.options())
    result, estimate, over = report.analysis, report.time, report.over_budget
    output.warn(result.warnings, target)
    if format is OutputFormat.json:
        status = "error" if over else "ok"
        # the workload as analysed: in the model's own dtype unless --dtype (dtype_source says which)
        output.emit_json("analyze", [report.to_json()], result.workload.as_dict(), over, status)
    else:
        from embedcalc.render.tables import flops_table, memory_table, params_table

        for table in (params_table(result), flops_table(result), memory_table(result, report.serving)):
            output.stdout.print(table)
        if result.communication.collectives:
            from embedcalc.render.distributed import communication_table

            output.stdout.print(communication_table(result))
        if estimate is not None:
            from embedcalc.render.roofline import roofline_tables

            for table in roofline_tables(result, estimate):
                output.stdout.print(table)
    enforce_budget(over, json_emitted=format is OutputFormat.json)
