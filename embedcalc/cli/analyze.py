"""``embedcalc analyze TARGET``: params, FLOPs and memory of one config for one workload."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from embedcalc.cli import output
from embedcalc.cli.common import (
    FormatOption,
    OutputFormat,
    SetOption,
    budget_problems,
    enforce_budget,
    handle_errors,
    load,
)  # fmt: skip
from embedcalc.cli.hardware_options import TimeFlags, apply_time, time_json
from embedcalc.cli.options import BudgetFlags, ParallelFlags, WorkloadFlags, flags

if TYPE_CHECKING:  # the command modules import only their options at the top: `embedcalc --help` builds every
    # command's signature without loading the config models or the analysis (tests/test_cli.py checks it)
    from embedcalc.analysis.report import Analysis
    from embedcalc.analysis.workload import Workload


def analyze_target(target: str, overrides: list[str] | None, workload: Workload) -> Analysis:
    """Load, validate against the workload and parallel layout, and analyse one target; warnings to stderr."""
    from embedcalc.analysis.checked import analyze_loaded

    result = analyze_loaded(load(target, overrides), workload)
    output.warn(result.warnings, target)
    return result


@handle_errors("analyze")
@flags
def analyze_command(
    target: Annotated[str, typer.Argument(help="Preset name or config file (YAML/JSON).")],
    run: WorkloadFlags,
    layout: ParallelFlags,
    limits: BudgetFlags,
    timing: TimeFlags,
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
    """
    workload = run.workload(layout)
    result = analyze_target(target, overrides, workload)
    result, estimate = apply_time(result, timing, limits.max_memory)
    over = budget_problems(limits.budget(), [result])
    if format is OutputFormat.json:
        status = "error" if over else "ok"
        output.emit_json("analyze", [result.as_json() | time_json(estimate)], workload.as_dict(), over, status)
    else:
        from embedcalc.render.tables import flops_table, memory_table, params_table

        for table in (params_table(result), flops_table(result), memory_table(result)):
            output.stdout.print(table)
        if result.communication.collectives:
            from embedcalc.render.distributed import communication_table

            output.stdout.print(communication_table(result))
        if estimate is not None:
            from embedcalc.render.roofline import roofline_tables

            for table in roofline_tables(result, estimate):
                output.stdout.print(table)
    enforce_budget(over, json_emitted=format is OutputFormat.json)
