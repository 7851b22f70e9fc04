"""Rich tables for ``embedcalc diff``: tensors grouped by component, layers folded, totals, notes.

A table row stands for the tensors that differ only in their layer index and share shapes and status
(``decoder.layers.0-31.attention.qkv.k.weight``, 32 tensors); the JSON output lists every tensor.
"""

from __future__ import annotations

import re

from rich.console import Group, RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from embedcalc.reconcile.diff import ModelDiff, TensorRow
from embedcalc.render import units
from embedcalc.render.fit import FitTable

_LAYER = re.compile(r"^(.*\.layers\.)(\d+)(\..*)$")
STATUS_STYLE = {"kept": "green", "resized": "green", "reshaped": "yellow", "new": "cyan", "dropped": "red"}


def _ranges(indices: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``0-2,5``."""
    parts: list[str] = []
    start = prev = indices[0]
    for i in [*indices[1:], None]:
        if i is not None and i == prev + 1:
            prev = i
            continue
        parts.append(f"{start}-{prev}" if prev > start else str(start))
        if i is not None:
            start = prev = i
    return ",".join(parts)


def fold_layers(rows: list[TensorRow]) -> list[tuple[str, list[TensorRow]]]:
    """(display name, rows) with the layer index folded into ranges, in order of first appearance."""
    folded: dict[tuple[object, ...], list[tuple[int, TensorRow]]] = {}
    key: tuple[object, ...]
    for row in rows:
        match = _LAYER.match(row.name)
        if match is None:
            folded[(row.name,)] = [(0, row)]
            continue
        key = (match.group(1), match.group(3), row.shape_a, row.shape_b, row.status)
        folded.setdefault(key, []).append((int(match.group(2)), row))
    out = []
    for key, items in folded.items():
        if len(key) == 1:
            out.append((str(key[0]), [items[0][1]]))
        else:
            out.append((f"{key[0]}{_ranges([i for i, _ in items])}{key[1]}", [r for _, r in items]))
    return out


def _shape(shape: tuple[int, ...] | None) -> str:
    return "—" if shape is None else str(tuple(shape))


def diff_table(diff: ModelDiff) -> Table:
    table = FitTable(
        title=f"Tensors — A: {escape(diff.target_a)}  B: {escape(diff.target_b)}",
        caption="kept: same name and shape, loads from A's checkpoint as is; resized: a token/position table whose "
        "shared rows load; reshaped: same name, new shape; "
        "new: only in B; dropped: only in A. Layers with identical rows are folded (count column).",
        title_justify="left",
        # the name's layer range says the count; status says if the shape changed
        drop=(
            "count",
            "shape in A",
        ),
    )
    for name, justify in (("tensor", "left"), ("count", "right"), ("shape in A", "right"),
                          ("shape in B", "right"), ("status", "left"), ("params in B", "right")):  # fmt: skip
        table.add_column(
            name, justify=justify, whole=name == "params in B", prefer_whole=name.startswith("shape")
        )
    for group, rows in diff.groups().items():
        counts = ", ".join(f"{n} {s}" for s, n in diff.counts(rows).items() if n)
        table.add_row(f"[bold]{escape(group)}[/]", "", "", "", f"[bold]{counts}[/]", "")
        for name, members in fold_layers(rows):
            first = members[0]
            style = STATUS_STYLE[first.status]
            table.add_row(
                "  " + escape(name), str(len(members)), _shape(first.shape_a), _shape(first.shape_b),
                f"[{style}]{first.status}[/]", units.count(sum(r.params_b for r in members)),
            )  # fmt: skip
        table.add_section()
    return table


def totals_table(diff: ModelDiff) -> Table:
    table = FitTable(title="Totals", title_justify="left", show_header=False)
    table.add_column("what")
    table.add_column("params", justify="right", whole=True)
    table.add_column("", justify="right", whole=True)
    b = diff.params_b or 1
    for label, value, share in (
        ("params in A", diff.params_a, ""),
        ("params in B", diff.params_b, ""),
        (
            "[green]loadable from A unchanged[/]",
            diff.loadable_params,
            units.percent(diff.loadable_params / b),
        ),
        (
            "[yellow]to initialise in B[/]",
            diff.params_to_initialise,
            units.percent(diff.params_to_initialise / b),
        ),
        ("[red]of A unused[/]", diff.dropped_params, ""),
    ):
        table.add_row(label, units.count(value), share)
    return table


def render_diff(diff: ModelDiff) -> RenderableType:
    notes = [Text("• " + n.message) for n in diff.notes]
    return Group(diff_table(diff), totals_table(diff), Text("Notes", style="bold"), *notes)
