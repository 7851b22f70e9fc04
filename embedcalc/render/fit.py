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
   each repeating the first ``keep`` (label) columns;
5. otherwise, and always below :data:`NARROW` columns or when the console asks for it (``COLUMNS=0``: no width,
   :mod:`embedcalc.render.console`), the table is written as plain ``key: value`` lines (:func:`key_values`): the
   title, then per row its label and each non-empty cell under its column's header, then the caption.

Text columns wrap at spaces and inside long names (:mod:`embedcalc.render.wrap`), so a tensor name is broken after
a ``.``, never cut; rich's own squeezing and its ``…`` never apply. Every table of the CLI is a FitTable (and every
panel a :class:`FitPanel`); a test in tests/render checks that no render module builds a plain ``rich`` table.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from rich.measure import Measurement
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from embedcalc.render.wrap import CONTINUATION, least_width, word_width, wrap

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions, RenderableType, RenderResult

NARROW = 40  # below this many columns no table is drawn: key: value lines instead


def wants_key_values(console: Console, width: int) -> bool:
    """Whether to write ``key: value`` lines rather than draw: under :data:`NARROW` columns, or when the console
    says so (its ``key_value`` attribute, set for ``COLUMNS=0`` by :mod:`embedcalc.render.console`)."""
    return width < NARROW or bool(getattr(console, "key_value", False))


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
        self.prefer_whole: list[bool] = [False] * len(self.columns)

    def add_column(
        self,
        header: Any = "",
        footer: Any = "",
        *,
        whole: bool = False,
        prefer_whole: bool = False,
        **kwargs: Any,
    ) -> None:
        """As ``Table.add_column``; ``whole=True`` marks a column whose cells must never wrap or be cut,
        ``prefer_whole=True`` one whose cells (a shape tuple) wrap at their spaces only when the table cannot be
        drawn otherwise: the columns in ``drop`` are left out first."""
        super().add_column(header, footer, **kwargs)
        self.whole.append(whole)
        self.prefer_whole.append(prefer_whole)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width if self.width is None else self.width
        if wants_key_values(console, width):
            yield from key_values(self, console, options.max_width)
            return
        spans = _content_spans(self, console, options)
        every = list(range(len(self.columns)))
        if _width(self, spans, every, natural=True) <= width:
            yield from Table.__rich_console__(self, console, options)
            return
        comfortable = _comfortable(self, spans)
        indices, dropped = every, []
        for header in self.drop:
            if _width(self, comfortable, indices) <= width:
                break
            gone = [i for i in indices if str(self.columns[i].header) == header]
            indices = [i for i in indices if i not in gone]
            dropped += [header] * bool(gone)
        note = f"Left out at {width} columns: {', '.join(dropped)}." if dropped else ""
        if _width(self, comfortable, indices) <= width:  # names wrapped into two lines at most, shapes whole
            yield from _draw(_subset(self, console, comfortable, indices, width, note), console, options)
            return
        if self.narrow is not None:
            yield self.narrow
            return
        for least in (comfortable, spans):  # stacked, no column need be left out
            groups = self._groups(least, width)
            if groups is not None:
                yield from self._stacked(console, options, least, groups, width)
                return
        for table in (self, self._edgeless()):  # names as narrow as they wrap, then without the outer border
            if _width(table, spans, indices) <= width:
                yield from _draw(_subset(table, console, spans, indices, width, note), console, options)
                return
        yield from key_values(self, console, options.max_width)  # not even one column beside the labels fits

    def _stacked(
        self,
        console: Console,
        options: ConsoleOptions,
        spans: list[tuple[int, int]],
        groups: list[list[int]],
        width: int,
    ) -> RenderResult:
        """The ``keep`` label columns and each group of the others, one table below the other."""
        keep = list(range(self.keep or 0))
        for n, group in enumerate(groups):
            part = _subset(self, console, spans, keep + group, width)
            if n:
                part.title = None
            if n < len(groups) - 1:
                part.caption = None
            yield from _draw(part, console, options)

    def _edgeless(self) -> FitTable:
        """This table without its outer border and the padding beside it (four columns narrower)."""
        view = copy.copy(self)
        view.show_edge = view.pad_edge = False
        return view

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
    """(least, natural) content width of each column: the least is its longest unbreakable piece (a word, or a
    piece of a long name between separators: :func:`embedcalc.render.wrap.least_width`; a ``prefer_whole``
    column's longest word), or for a whole column its widest cell (its header may still wrap); the natural, its
    widest line."""

    def measure(cell: Any) -> tuple[Measurement, Any]:
        renderable = console.render_str(cell) if isinstance(cell, str) else cell
        return Measurement.get(console, options, renderable), renderable

    spans = []
    for column, whole, words in zip(table.columns, table.whole, table.prefer_whole, strict=True):
        cells = [measure(c) for c in column.cells]
        header = measure(column.header)[0] if table.show_header else Measurement(0, 0)
        natural = max([header.maximum, *(m.maximum for m, _ in cells)])
        least = max([header.minimum, *(_least(m, r, whole, words) for m, r in cells)])
        spans.append((least, natural))
    return spans


def _least(measured: Measurement, renderable: Any, whole: bool, words: bool) -> int:
    if whole:
        return measured.maximum
    if isinstance(renderable, Text):
        least = word_width if words else least_width
        return max((least(line) for line in renderable.split("\n")), default=0)
    return measured.minimum


LABEL_FLOOR = (
    20  # the label column is wrapped narrower than this (or half its widest cell) only as a last resort
)


def _comfortable(table: FitTable, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``spans`` with a text first column (the row labels, tensor names) no narrower than what wraps its widest
    cell into two lines (at least :data:`LABEL_FLOOR`) and the ``prefer_whole`` columns whole: the low-priority
    columns are left out before names wrap more or a shape wraps at all."""
    prefer = table.prefer_whole
    out = [
        (natural if whole else least, natural) for (least, natural), whole in zip(spans, prefer, strict=True)
    ]
    if out and not table.whole[0]:
        least, natural = out[0]
        floor = min(natural, max(LABEL_FLOOR, (natural + 1) // 2 + 2 * CONTINUATION))
        out[0] = (max(least, floor), natural)
    return out


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
    table: FitTable,
    console: Console,
    spans: list[tuple[int, int]],
    indices: list[int],
    width: int,
    caption_note: str = "",
) -> Table:
    """A plain Table of the given columns at explicit widths: each at least its least width, the room left given
    to the columns that want more, the one wanting least first (so that as few columns as possible wrap); the text
    cells wider than their column wrapped at spaces and name separators (:func:`embedcalc.render.wrap.wrap`)."""
    view: Table = copy.copy(table)
    view.__class__ = Table
    view.columns = [dataclasses.replace(table.columns[i], _index=n) for n, i in enumerate(indices)]
    widths = [spans[i][0] for i in indices]
    room = width - _width(table, spans, indices)
    for n in sorted(range(len(indices)), key=lambda n: spans[indices[n]][1] - widths[n]):
        want = spans[indices[n]][1] - widths[n]
        if want > room:
            break
        widths[n] += want
        room -= want
    wanting = {n: spans[i][1] - widths[n] for n, i in enumerate(indices) if spans[i][1] > widths[n]}
    total = sum(wanting.values())
    for (
        n,
        want,
    ) in wanting.items():  # what is left widens the columns that still wrap, in proportion to their want
        widths[n] += room * want // total
    for n, (column, content_width) in enumerate(zip(view.columns, widths, strict=True)):
        column.width = max(content_width, 1)
        if not table.whole[indices[n]]:
            column._cells = [_wrapped(console, cell, column.width, hang=n == 0) for cell in column._cells]
    if caption_note:
        view.caption = f"{view.caption} {caption_note}" if view.caption else caption_note
    return view


def _wrapped(console: Console, cell: Any, width: int, hang: bool) -> Any:
    """``cell`` broken into lines of ``width`` at spaces and name separators, if it is text wider than that (the
    first column's continuation lines hang two spaces in, under the row's label)."""
    text = _text(console, cell)
    if text is None:
        return cell
    return wrap(text, width, hang) if text.cell_len > width else cell


def _text(console: Console, cell: Any) -> Text | None:
    """A cell as rich Text (markup parsed), or None for a renderable that is not text."""
    if isinstance(cell, Text):
        return cell
    if isinstance(cell, str):
        return console.render_str(cell, highlight=False)
    return None


def _line(console: Console, parts: list[Any], width: int, style: Any = None) -> Text:
    line = Text()
    for part in parts:
        line.append_text(_text(console, part) or Text(str(part)))
    if style:
        line.stylize(style)
    return wrap(line, width)


def key_values(table: Table, console: Console, width: int) -> Iterable[RenderableType]:
    """``table`` as plain lines (the layout below :data:`NARROW` columns): its title; per row, the label (a text
    first column) and then ``header: value`` for each non-empty cell, indented under it; then the caption. A table
    without headers writes ``label: value, value`` on one line. Nothing is cut: long lines wrap at spaces and name
    separators."""
    whole = getattr(table, "whole", [False] * len(table.columns))
    headers = [_text(console, c.header) or Text(str(c.header)) for c in table.columns]
    cells = [list(c.cells) for c in table.columns]
    if table.title:
        yield _line(console, [table.title], width, "table.title")
    for r, row in enumerate(table.rows):
        texts = [_text(console, column[r]) or Text(str(column[r])) for column in cells]
        filled = [j for j, t in enumerate(texts) if t.plain.strip()]
        if not filled:
            continue
        if not table.show_header:
            values = [p for j in filled[1:] for p in ((", " if j != filled[1] else ": "), texts[j])]
            yield _line(console, [texts[filled[0]], *values], width, row.style)
            continue
        first = filled[0]
        if first == 0 and not whole[0]:  # a label column: the label alone, its cells under it
            yield _line(console, [texts[0]], width, row.style)
            rest = filled[1:]
        else:
            yield _line(console, [headers[first], ": ", texts[first]], width, row.style)
            rest = filled[1:]
        indent = " " * (len(texts[first].plain) - len(texts[first].plain.lstrip(" ")) + 2)
        for j in rest:
            yield _line(console, [indent, headers[j], ": ", texts[j]], width, row.style)
    if table.caption:
        yield _line(console, [table.caption], width, "table.caption")


class FitPanel(Panel):
    """A ``rich.panel.Panel`` that, where tables become ``key: value`` lines, drops its box too: its title, then
    its content as plain lines."""

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if not wants_key_values(console, options.max_width):
            yield from super().__rich_console__(console, options)
            return
        if self.title:
            title = _text(console, self.title) or Text(str(self.title))
            yield _line(console, [title], options.max_width, "bold")
        yield self.renderable
