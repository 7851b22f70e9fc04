"""Tables of a fine-tune: trainable and total parameters as peft counts them, by component, and the memory of one
step on the device and the host (embedcalc/analysis/finetune/ states the conventions)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.markup import escape
from rich.table import Table

from embedcalc.render import units
from embedcalc.render.fit import FitTable
from embedcalc.render.tables import dtype_label

if TYPE_CHECKING:
    from embedcalc.analysis.report import Analysis
    from embedcalc.api.finetune import FinetuneResult
    from embedcalc.reconcile.finetune import FinetuneVerify

PARAMS_CAPTION = (
    "Counted as peft's get_nb_trainable_parameters: LoRA adds r·(in + out) per adapted module, DoRA also out; "
    "all = the base model + adapters + modules saved whole."
)
MEMORY_CAPTION = (
    "Adapters, their gradients and optimizer state in fp32 (peft's autocast_adapter_dtype); a frozen linear saves "
    "no input for the backward; qlora's frozen linears in NF4 (bitsandbytes: blocksize 64, double quantization)."
)


def _describe(result: FinetuneResult) -> str:
    c = result.counts
    spec = c.spec
    if not spec.adapters:
        frozen = ", ".join(spec.freeze) if spec.freeze else "nothing frozen"
        return f"full fine-tuning ({frozen})"
    targets = ",".join(c.targets)
    if len(targets) > 60:
        targets = targets[:57] + "..."
    return f"{spec.method} r={spec.rank} alpha={spec.alpha:g} on {targets} ({len(c.modules)} modules)"


def finetune_params_table(a: Analysis, result: FinetuneResult) -> Table:
    c = result.counts
    table = FitTable(
        title=f"Fine-tuning — {escape(a.target)}: {escape(_describe(result))}",
        caption=PARAMS_CAPTION,
        title_justify="left",
    )
    table.add_column("trainable")
    table.add_column("params", justify="right", whole=True)
    table.add_column("share", justify="right", whole=True)
    for key, value in c.trainable.items():
        table.add_row(f"  {escape(key)}", units.count(value), units.si(value))
    table.add_section()
    share = c.trainable_total / c.all_total if c.all_total else 0.0
    table.add_row(
        "[bold]trainable params[/]",
        f"[bold]{units.count(c.trainable_total)}[/]",
        f"[bold]{share * 100:.4f}%[/]",
    )
    table.add_row("all params", units.count(c.all_total), units.si(c.all_total))
    return table


def finetune_memory_table(a: Analysis, result: FinetuneResult) -> Table:
    m = result.memory
    w = a.workload
    offload = "" if m.offload == "none" else f", offload {m.offload}"
    table = FitTable(
        title=f"Memory — fine-tuning step, {dtype_label(w)}, optimizer {w.optimizer}, attention {w.attention}, "
        f"recompute {w.recompute}{offload}",
        caption=MEMORY_CAPTION,
        title_justify="left",
    )
    table.add_column("on the device")
    table.add_column("bytes", justify="right", whole=True)
    table.add_column("size", justify="right", whole=True)
    for key, value in m.breakdown.items():
        table.add_row(escape(key).replace("/", ": "), units.count(value), units.binary_bytes(value))
    table.add_section()
    total = m.device_bytes
    table.add_row(
        "[bold]device total[/]", f"[bold]{units.count(total)}[/]", f"[bold]{units.binary_bytes(total)}[/]"
    )
    if m.pageable_bytes:
        rest = m.device_bytes_unpaged
        table.add_row(
            "  [dim]with the paged optimizer state on the host[/]",
            f"[dim]{units.count(rest)}[/]",
            f"[dim]{units.binary_bytes(rest)}[/]",
        )
    if m.offload != "none":
        table.add_row("host (offloaded)", units.count(m.host_bytes), units.binary_bytes(m.host_bytes))
        table.add_row(
            "PCIe per step", units.count(m.pcie_bytes_per_step), units.binary_bytes(m.pcie_bytes_per_step)
        )
    return table


def finetune_tables(a: Analysis, result: FinetuneResult) -> list[Table]:
    return [finetune_params_table(a, result), finetune_memory_table(a, result)]


def finetune_verify_table(target: str, check: FinetuneVerify) -> Table:
    """``verify --peft``: one row per check, the analytic count beside the counted one; mismatches in red."""
    targets = ",".join(check.targets)
    if len(targets) > 60:
        targets = targets[:57] + "..."
    table = FitTable(
        title=escape(
            f"Fine-tune — {target}: {check.method} r={check.rank} on {targets}: analytic vs counted"
        ),
        caption="Both models on the meta device; all = the base model + adapters + modules saved whole (peft).",
        title_justify="left",
    )
    table.add_column("check")
    for name in ("analytic", "counted", "difference"):
        table.add_column(name, justify="right", whole=True)
    for r in check.rows:
        table.add_row(escape(r.component), units.count(r.analytic), units.count(r.counted),
                      f"{r.difference:+,}" if r.difference else "0", style="red" if r.difference else None)  # fmt: skip
    return table
