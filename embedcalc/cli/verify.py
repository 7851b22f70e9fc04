"""``embedcalc verify TARGET``: build the model in torch on the meta device and reconcile it with the analyzer.

Parameters: ``numel`` of the submodules behind each breakdown key against the analytic count. FLOPs:
``FlopCounterMode``'s per-module counts of one forward pass on meta tensors (nothing is allocated, and the CPU
SDPA gap of PyTorch issue 195460 cannot hide attention) against the analytic forward FLOPs. Exit 0 when every
component agrees exactly, 1 otherwise.
"""

from __future__ import annotations

from typing import Annotated

import typer

from embedcalc.analysis.workload import Parallelism, Workload
from embedcalc.cli import output
from embedcalc.cli.analyze import analyze_target
from embedcalc.cli.common import (
    AttentionChoice,
    AttentionOption,
    BatchOption,
    DpOption,
    FormatOption,
    OutputFormat,
    PpOption,
    SeqOption,
    SetOption,
    TgtOption,
    TpOption,
    ZeroOption,
    handle_errors,
)  # fmt: skip
from embedcalc.cli.torch_env import require_torch
from embedcalc.errors import ExitCode, outcome
from embedcalc.reconcile.verify import verify_analysis


@handle_errors("verify")
def verify_command(
    target: Annotated[str, typer.Argument(help="Preset name or config file (YAML/JSON).")],
    batch_size: BatchOption = 1,
    seq_len: SeqOption = 128,
    tgt_len: TgtOption = None,
    attention: AttentionOption = AttentionChoice.sdpa,
    tp: TpOption = 1,
    pp: PpOption = 1,
    dp: DpOption = 1,
    zero: ZeroOption = 0,
    overrides: SetOption = None,
    format: FormatOption = OutputFormat.table,
) -> None:
    """Reconcile analytic params and FLOPs with a torch model built on the meta device; exit 1 on any difference.

    With --tp/--dp --zero 3/--pp the model is also sharded the way torch shards it (DTensor tensor parallelism,
    FSDP2, a pipeline module split) on torch's fake process group, and every rank's parameters and the collectives
    of one training step are reconciled with the analytic per-device numbers.
    """
    require_torch()
    if zero not in (0, 3):
        raise typer.BadParameter("verify shards with FSDP2 `fully_shard`, which is ZeRO-3: use --zero 3 or 0",
                                 param_hint="'--zero'")  # fmt: skip
    parallel = Parallelism(tp=tp, pp=pp, dp=dp, zero=zero)
    workload = Workload(batch_size=batch_size, seq_len=seq_len, tgt_len=tgt_len, parallel=parallel)
    analysis = analyze_target(target, overrides, workload)  # the same loading and workload checks as analyze
    result = verify_analysis(analysis, attention.value)
    params, flops, ok = result.params.row_dicts(), result.flops.row_dicts(), result.agree
    sharded = None
    if tp > 1 or pp > 1 or (dp > 1 and zero == 3):
        from embedcalc.reconcile.sharding import verify_sharded

        sharded = verify_sharded(target, analysis.config, parallel, attention.value)
        ok = ok and sharded.agree
    if format is OutputFormat.json:
        entry = result.to_json() | ({"sharded": sharded.to_json()} if sharded is not None else {})
        output.emit_json("verify", [entry], workload.as_dict(), status="ok" if ok else "mismatch")
    else:
        from embedcalc.render.tables import reconcile_table

        output.stdout.print(reconcile_table(f"Parameters — {target}: analytic vs torch numel", params))
        title = (
            f"Forward FLOPs — {target} (batch {batch_size}, seq_len {seq_len}): analytic vs FlopCounterMode"
        )
        output.stdout.print(reconcile_table(title, flops))
        if sharded is not None:
            from embedcalc.render.distributed import sharded_tables

            output.stdout.print(sharded_tables(sharded))
    if not ok:
        for line in sharded.mismatches() if sharded is not None else []:
            output.stderr.print(f"embedcalc: {target}: {line}", markup=False)
        output.stderr.print(
            f"embedcalc: {target}: analytic and torch counts differ (see the difference column)", markup=False
        )
        raise outcome(ExitCode.RUNTIME, f"{target}: analytic and torch counts differ", "mismatch")
