"""``embedcalc verify TARGET``: build the model in torch on the meta device and reconcile it with the analyzer.

Parameters: ``numel`` of the submodules behind each breakdown key against the analytic count. FLOPs:
``FlopCounterMode``'s per-module counts of one forward pass on meta tensors (nothing is allocated, and the CPU
SDPA gap of PyTorch issue 195460 cannot hide attention) against the analytic forward FLOPs. Exit 0 when every
component agrees exactly, 1 otherwise.
"""

from __future__ import annotations

from typing import Annotated

import typer

from embedcalc.analysis.workload import Workload
from embedcalc.cli import output
from embedcalc.cli.analyze import analyze_target
from embedcalc.cli.common import (
    AttentionChoice,
    AttentionOption,
    BatchOption,
    FormatOption,
    OutputFormat,
    SeqOption,
    SetOption,
    TgtOption,
    handle_errors,
)  # fmt: skip
from embedcalc.cli.torch_env import require_torch
from embedcalc.errors import ExitCode
from embedcalc.reconcile.verify import verify_analysis


@handle_errors("verify")
def verify_command(
    target: Annotated[str, typer.Argument(help="Preset name or config file (YAML/JSON).")],
    batch_size: BatchOption = 1,
    seq_len: SeqOption = 128,
    tgt_len: TgtOption = None,
    attention: AttentionOption = AttentionChoice.sdpa,
    overrides: SetOption = None,
    format: FormatOption = OutputFormat.table,
) -> None:
    """Reconcile analytic params and FLOPs with a torch model built on the meta device; exit 1 on any difference."""
    require_torch()
    workload = Workload(batch_size=batch_size, seq_len=seq_len, tgt_len=tgt_len)
    analysis = analyze_target(target, overrides, workload)  # the same loading and workload checks as analyze
    result = verify_analysis(analysis, attention.value)
    params, flops, ok = result.params.row_dicts(), result.flops.row_dicts(), result.agree
    if format is OutputFormat.json:
        output.emit_json("verify", [result.to_json()], workload.as_dict(), status="ok" if ok else "mismatch")
    else:
        from embedcalc.render.tables import reconcile_table

        output.stdout.print(reconcile_table(f"Parameters — {target}: analytic vs torch numel", params))
        title = (
            f"Forward FLOPs — {target} (batch {batch_size}, seq_len {seq_len}): analytic vs FlopCounterMode"
        )
        output.stdout.print(reconcile_table(title, flops))
    if not ok:
        output.stderr.print(
            f"embedcalc: {target}: analytic and torch counts differ (see the difference column)", markup=False
        )
        raise typer.Exit(int(ExitCode.RUNTIME))
