"""``embedcalc analyze TARGET``: params, FLOPs and memory of one config for one workload."""

from __future__ import annotations

from typing import Annotated

import typer

from embedcalc.analysis.report import Analysis, analyze
from embedcalc.analysis.workload import Workload
from embedcalc.cli import output
from embedcalc.cli.common import (
    AttentionChoice,
    AttentionOption,
    BatchOption,
    DtypeChoice,
    DtypeOption,
    FormatOption,
    ModeChoice,
    ModeOption,
    OutputFormat,
    SeqOption,
    SetOption,
    TgtOption,
    handle_errors,
    load,
    make_workload,
)
from embedcalc.config.checks import config_warnings, workload_problems
from embedcalc.errors import ConfigError


def analyze_target(target: str, overrides: list[str] | None, workload: Workload) -> Analysis:
    """Load, validate against the workload, and analyse one target; warnings go to stderr."""
    loaded = load(target, overrides)
    errors, warnings = workload_problems(loaded.config, workload)
    if errors:
        lines = "\n".join(f"  {p.message}" for p in errors)
        raise ConfigError(f"{target}: workload does not fit the config\n{lines}", errors)
    warnings = config_warnings(loaded.config, loaded.user_keys) + warnings
    output.warn(warnings, target)
    return analyze(target, loaded.config, workload, warnings)


@handle_errors("analyze")
def analyze_command(
    target: Annotated[str, typer.Argument(help="Preset name or config file (YAML/JSON).")],
    batch_size: BatchOption = 1,
    seq_len: SeqOption = 128,
    tgt_len: TgtOption = None,
    dtype: DtypeOption = DtypeChoice.float32,
    mode: ModeOption = ModeChoice.inference,
    attention: AttentionOption = AttentionChoice.sdpa,
    overrides: SetOption = None,
    format: FormatOption = OutputFormat.table,
) -> None:
    """Params, FLOPs (with the O(n²·d) attention term explicit) and memory, component by component.

    Inference memory = weights + KV cache (decoders) + peak activations of one forward (eager attention holds
    the batch×heads×n² scores, sdpa does not). Training = weights + gradients + AdamW state + saved activations
    (Korthikanti et al. 2022).
    """
    workload = make_workload(batch_size, seq_len, tgt_len, dtype, mode, attention)
    result = analyze_target(target, overrides, workload)
    if format is OutputFormat.json:
        output.emit_json("analyze", [result.as_json()], workload.as_dict())
        return
    from embedcalc.render.tables import flops_table, memory_table, params_table

    for table in (params_table(result), flops_table(result), memory_table(result)):
        output.stdout.print(table)
