"""``embedcalc verify TARGET``: build the model in torch on the meta device and reconcile it with the analyzer.

Parameters: ``numel`` of the submodules behind each breakdown key against the analytic count. FLOPs:
``FlopCounterMode``'s per-module counts of one forward pass on meta tensors (nothing is allocated, and the CPU
SDPA gap of PyTorch issue 195460 cannot hide attention) against the analytic forward FLOPs. Exit 0 when every
component agrees exactly, 1 otherwise.
"""

from __future__ import annotations

from typing import Annotated, Any

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
from embedcalc.errors import EmbedcalcError, ExitCode


def reconcile(analytic: dict[str, int], counted: dict[str, int]) -> list[dict[str, Any]]:
    """One row per key of either side: analytic, counted, difference (counted - analytic)."""
    keys = list(analytic) + [k for k in counted if k not in analytic]
    return [
        {"component": k, "analytic": analytic.get(k, 0), "counted": counted.get(k, 0),
         "difference": counted.get(k, 0) - analytic.get(k, 0)}
        for k in keys
    ]  # fmt: skip


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
    from embedcalc.modeling import build_model, component_flops, component_params

    workload = Workload(batch_size=batch_size, seq_len=seq_len, tgt_len=tgt_len)
    analysis = analyze_target(target, overrides, workload)  # the same loading and workload checks as analyze
    config = analysis.config
    model = build_model(config, attention=attention.value, device="meta")
    try:
        counted_flops = component_flops(config, model, batch_size, seq_len, tgt_len)
    except RuntimeError as exc:
        raise EmbedcalcError(
            f"{target}: FLOP counting failed: {exc}", ExitCode.RUNTIME, code="count_failed"
        ) from None
    params = reconcile(analysis.params.as_dict(), component_params(model))
    flops = reconcile(analysis.flops.breakdown.as_dict(), counted_flops)
    ok = all(r["difference"] == 0 for r in params + flops)
    if format is OutputFormat.json:
        result = {
            "target": target, "agree": ok, "attention": attention.value,
            "params": {"rows": params, "analytic_total": sum(r["analytic"] for r in params),
                       "counted_total": sum(r["counted"] for r in params)},
            "flops": {"rows": flops, "analytic_total": sum(r["analytic"] for r in flops),
                      "counted_total": sum(r["counted"] for r in flops)},
        }  # fmt: skip
        output.emit_json("verify", [result], workload.as_dict(), status="ok" if ok else "mismatch")
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
