"""``embedcalc analyze TARGET``: params, FLOPs and memory of one config for one workload."""

from __future__ import annotations

from typing import Annotated

import typer

from embedcalc.analysis.budget import Budget
from embedcalc.analysis.checked import analyze_loaded
from embedcalc.analysis.report import Analysis
from embedcalc.analysis.workload import Parallelism, Workload
from embedcalc.cli import output
from embedcalc.cli.common import (
    AttentionChoice,
    AttentionOption,
    BatchOption,
    DpOption,
    DtypeChoice,
    DtypeOption,
    EpOption,
    FormatOption,
    GenTokensOption,
    MaxFlopsOption,
    MaxMemoryOption,
    MaxParamsOption,
    ModeChoice,
    ModeOption,
    OptimizerChoice,
    OptimizerOption,
    OutputFormat,
    PpOption,
    RecomputeChoice,
    RecomputeOption,
    SeqOption,
    SetOption,
    TgtOption,
    TpOption,
    ZeroOption,
    budget_problems,
    enforce_budget,
    handle_errors,
    load,
    make_workload,
)  # fmt: skip
from embedcalc.cli.hardware_options import (
    DevicesOption,
    EfficiencyOption,
    HardwareOption,
    KvDtypeOption,
    PriceOption,
    TrainTokensOption,
    apply_time,
    time_json,
    time_options,
)  # fmt: skip


def analyze_target(target: str, overrides: list[str] | None, workload: Workload) -> Analysis:
    """Load, validate against the workload and parallel layout, and analyse one target; warnings to stderr."""
    result = analyze_loaded(load(target, overrides), workload)
    output.warn(result.warnings, target)
    return result


@handle_errors("analyze")
def analyze_command(
    target: Annotated[str, typer.Argument(help="Preset name or config file (YAML/JSON).")],
    batch_size: BatchOption = 1,
    seq_len: SeqOption = 128,
    tgt_len: TgtOption = None,
    dtype: DtypeOption = DtypeChoice.float32,
    mode: ModeOption = ModeChoice.inference,
    attention: AttentionOption = AttentionChoice.sdpa,
    optimizer: OptimizerOption = OptimizerChoice.adamw,
    recompute: RecomputeOption = RecomputeChoice.none,
    gen_tokens: GenTokensOption = 0,
    tp: TpOption = 1,
    ep: EpOption = 1,
    pp: PpOption = 1,
    dp: DpOption = 1,
    zero: ZeroOption = 0,
    max_params: MaxParamsOption = None,
    max_memory: MaxMemoryOption = None,
    max_flops: MaxFlopsOption = None,
    hardware: HardwareOption = None,
    efficiency: EfficiencyOption = None,
    kv_dtype: KvDtypeOption = None,
    train_tokens: TrainTokensOption = None,
    devices: DevicesOption = None,
    price_per_hour: PriceOption = None,
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
    parallel = Parallelism(tp=tp, pp=pp, dp=dp, zero=zero, ep=ep)
    workload = make_workload(
        batch_size, seq_len, tgt_len, dtype, mode, attention, optimizer, recompute, parallel, gen_tokens
    )
    timing = time_options(hardware, efficiency, kv_dtype, train_tokens, devices, price_per_hour, max_memory)
    result = analyze_target(target, overrides, workload)
    result, estimate = apply_time(result, timing)
    over = budget_problems(Budget(max_params, max_memory, max_flops), [result])
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
