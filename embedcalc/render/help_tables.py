"""typer's ``--help`` panels with every word whole: a word longer than its column (an option name such as
``--max-num-batched-tokens``, vLLM's ``gpu_memory_utilization`` in a help text) folded onto the next line rather
than cut with ``…``, which rich's default overflow does to typer's option table and to the ``Columns`` in which it
lays out each option's help (issue 34). Used by :mod:`embedcalc.cli.help_width` for the length of one --help."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import rich.columns
from rich.table import Table


class _FoldingTable(Table):
    """A rich table whose columns fold a long word instead of cutting it."""

    def add_row(self, *renderables: Any, **kwargs: Any) -> None:
        super().add_row(*renderables, **kwargs)
        for column in self.columns:
            column.overflow = "fold"


@contextmanager
def folding_tables(*modules: Any) -> Iterator[None]:
    """The tables that ``modules`` (typer's help module) and rich's ``Columns`` build, folding, inside the block."""
    swapped: tuple[Any, ...] = (*modules, rich.columns)
    tables = [module.Table for module in swapped]
    for module in swapped:
        module.Table = _FoldingTable
    try:
        yield
    finally:
        for module, table in zip(swapped, tables, strict=True):
            module.Table = table
