"""Tables that fit the terminal without cutting a number or a name.

rich shrinks a table that is too wide by squeezing its widest columns and, as a last resort, cutting cells with
``…``. For a calculator that is wrong: ``109,482,…`` is not a parameter count. :class:`FitTable` chooses its layout
when it is drawn, for the width it is given:

1. at its natural width when that fits (then it draws exactly as a plain ``rich.table.Table``);
2. otherwise text columns wrap at spaces, down to their longest word, while *whole* columns (numbers, names) keep
   their full width;
3. otherwise the columns named in ``drop`` are left out, in that order, and the caption says which;
4. otherwise the ``narrow`` table is drawn instead (a layout made for small widths, itself a FitTable), or, with
   ``keep`` set, every column after the first ``keep`` goes into one of several tables drawn one below the other,
   each repeating the first ``keep`` (label) columns.

Only when even one column beside the labels cannot fit (a console a few dozen characters wide) does rich's own
squeezing apply.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from rich.measure import Measurement
from rich.table import Table

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions, RenderResult


class FitTable(Table):
    """A ``rich.table.Table`` whose whole columns are never cut (see the module docstring for the layouts)."""

    def __init__(
        self,
        *headers: Any,
        drop: Sequence[str] = (),
        keep: int | None = None,
        narrow: Table | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*headers, **kwargs)
        self.drop = tuple(drop)
        self.keep = keep
        self.narrow = narrow
        self.whole: list[bool] = [False] * len(self.columns)

    def add_column(self, header: Any = "", footer: Any = "", *, whole: bool = False, **kwargs: Any) -> None:
        """As ``Table.add_column``; ``whole=True`` marks a column whose cells must never wrap or be cut."""
        super().add_column(header, footer, **kwargs)
        self.whole.append(whole)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width if self.width is None else self.width
        spans = _content_spans(self, console, options)
        every = list(range(len(self.columns)))
        if _width(self, spans, every, natural=True) <= width:
            yield from Table.__rich_console__(self, console, options)
            return
        indices, dropped = every, []
        for header in self.drop:
            if _width(self, spans, indices) <= width:
                break
            gone = [i for i in indices if str(self.columns[i].header) == header]
            indices = [i for i in indices if i not in gone]
            dropped += [header] * bool(gone)
        if _width(self, spans, indices) <= width:
            note = f"Left out at {width} columns: {', '.join(dropped)}." if dropped else ""
            yield from _draw(_subset(self, spans, indices, width, note), console, options)
            return
        if self.narrow is not None:
            yield self.narrow
            return
        groups = self._groups(spans, width)  # stacked, no column need be left out
        if groups is None:
            yield from Table.__rich_console__(self, console, options)  # nothing fits: rich squeezes it
            return
        keep = every[: self.keep]
        for n, group in enumerate(groups):
            part = _subset(self, spans, keep + group, width)
            if n:
                part.title = None
            if n < len(groups) - 1:
                part.caption = None
            yield from _draw(part, console, options)

    def _groups(self, spans: list[tuple[int, int]], width: int) -> list[list[int]] | None:
        """Every column after the ``keep`` label columns, in groups that fit beside them; None if one cannot."""
        if self.keep is None or len(self.columns) <= self.keep:
            return None
        keep = list(range(self.keep))
        groups: list[list[int]] = []
        for i in range(self.keep, len(self.columns)):
            if groups and _width(self, spans, [*keep, *groups[-1], i]) <= width:
                groups[-1].append(i)
            elif _width(self, spans, [*keep, i]) <= width:
                groups.append([i])
            else:
                return None
        return groups


def _draw(table: Table, console: Console, options: ConsoleOptions) -> Iterable[Any]:
    return Table.__rich_console__(table, console, options)


def _content_spans(table: FitTable, console: Console, options: ConsoleOptions) -> list[tuple[int, int]]:
    """(least, natural) content width of each column: the least is its longest word, or for a whole column its
    widest cell (its header may still wrap); the natural, its widest line."""

    def measure(cell: Any) -> Measurement:
        renderable = console.render_str(cell) if isinstance(cell, str) else cell
        return Measurement.get(console, options, renderable)

    spans = []
    for column, whole in zip(table.columns, table.whole, strict=True):
        cells = [measure(c) for c in column.cells]
        header = measure(column.header) if table.show_header else Measurement(0, 0)
        natural = max([header.maximum, *(c.maximum for c in cells)])
        least = max([header.minimum, *(c.maximum if whole else c.minimum for c in cells)])
        spans.append((least, natural))
    return spans


def _padding(table: Table, position: int, count: int) -> int:
    """The padding rich puts around the cells of the column at ``position`` of ``count`` (its pad_edge rule)."""
    _, right, _, left = table.padding
    if table.collapse_padding:
        left, right = 0, abs(left - right)
    if not table.pad_edge:
        left = 0 if position == 0 else left
        right = 0 if position == count - 1 else right
    return left + right


def _width(table: Table, spans: list[tuple[int, int]], indices: list[int], natural: bool = False) -> int:
    """The width of the table drawn with only ``indices``, each column at its least (or natural) width."""
    count = len(indices)
    borders = (count - 1 + 2 * table.show_edge) if table.box else 0  # rich's Table._extra_width
    cells = sum(spans[i][natural] + _padding(table, n, count) for n, i in enumerate(indices))
    return cells + borders


def _subset(
    table: FitTable, spans: list[tuple[int, int]], indices: list[int], width: int, caption_note: str = ""
) -> Table:
    """A plain Table of the given columns at explicit widths: each at least its least width, the room left given
    to the columns that want more, the one wanting least first (so that as few columns as possible wrap)."""
    view: Table = copy.copy(table)
    view.__class__ = Table
    view.columns = [dataclasses.replace(table.columns[i], _index=n) for n, i in enumerate(indices)]
    widths = [spans[i][0] for i in indices]
    room = width - _width(table, spans, indices)
    for n in sorted(range(len(indices)), key=lambda n: spans[indices[n]][1] - widths[n]):
        extra = min(room, spans[indices[n]][1] - widths[n])
        widths[n] += extra
        room -= extra
    for column, content_width in zip(view.columns, widths, strict=True):
        column.width = max(content_width, 1)
    if caption_note:
        view.caption = f"{view.caption} {caption_note}" if view.caption else caption_note
    return view
