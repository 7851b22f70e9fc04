"""The ``verify --checkpoint`` tables: per component, the tensors stored beside the analytic count and bytes."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from embedcalc.reconcile.checkpoint import CheckpointCheck
from embedcalc.render import units
from embedcalc.render.fit import FitTable


def checkpoint_table(check: CheckpointCheck) -> Table:
    """component | tensors | dtypes | stored | analytic | on disk | analytic bytes, mismatches in red."""
    shards = f"{len(check.files)} shards" if len(check.files) > 1 else check.files[0]
    title = f"Checkpoint — {check.target} ({shards}): stored tensors vs the config's analytic count ({check.dtype})"
    table = FitTable(title=escape(title), title_justify="left")
    table.add_column("component")
    table.add_column("tensors", justify="right")
    table.add_column("dtypes")
    for name in ("stored", "analytic", "on disk", f"analytic {check.dtype}"):
        table.add_column(name, justify="right", whole=True)
    for c in check.components:
        scales = f" (+{units.binary_bytes(c.scale_bytes)} scales)" if c.scale_bytes else ""
        table.add_row(escape(c.key), str(c.tensors), ",".join(c.dtypes) or "-", units.count(c.stored_params),
                      units.count(c.analytic_params), units.binary_bytes(c.stored_bytes) + scales,
                      units.binary_bytes(c.analytic_bytes), style=None if c.agree else "red")  # fmt: skip
    table.add_section()
    stored_bytes = sum(c.stored_bytes for c in check.components)
    analytic_bytes = sum(c.analytic_bytes for c in check.components)
    table.add_row("[bold]total[/]", str(check.stored_tensors), "",
                  f"[bold]{units.count(check.stored_params)}[/]", f"[bold]{units.count(check.analytic_params)}[/]",
                  units.binary_bytes(stored_bytes), units.binary_bytes(analytic_bytes))  # fmt: skip
    return table


MAX_EXTRA_LINES = 200  # a table names this many extra tensors; JSON lists every one (docs/concepts/bounds.md)


def checkpoint_lines(check: CheckpointCheck) -> list[str]:
    """The notes and the tensors outside every component, one line each (at most ``MAX_EXTRA_LINES``, then one
    line counting the rest)."""
    lines = list(check.notes)
    lines += [f"extra: {n.tensor} {list(n.shape)}: {n.reason}" for n in check.extra[:MAX_EXTRA_LINES]]
    if len(check.extra) > MAX_EXTRA_LINES:
        lines.append(
            f"... and {len(check.extra) - MAX_EXTRA_LINES:,} more extra tensors (--format json lists every one)"
        )
    return lines
