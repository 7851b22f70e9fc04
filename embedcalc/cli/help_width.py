"""``--help`` readable at 80 columns (issue 34): a choice list (``<fp32|bf16|fp16|...>``, ``NAME|FILE``) is one
word to rich, which folds it wherever the column ends (``fp32|bf16|fp16|fp8|mx`` / ``fp4|...``); written with spaces
around its bars it wraps between two choices, never inside one. Long words are folded, never cut
(:mod:`embedcalc.render.help_tables`). Loaded only when --help is drawn."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any


def spaced(text: str) -> str:
    """``a|b|c`` as ``a | b | c``: a list that wraps between its items."""
    return " | ".join(part.strip() for part in text.split("|"))


def _space_choices(param: Any) -> None:
    """Make ``param``'s type column (typer's ``display_type_rich``, read by --help alone) wrap between choices."""
    if getattr(param, "_embedcalc_spaced", False) or not hasattr(param, "display_type_rich"):
        return
    shown = param.display_type_rich

    def display_type_rich(ctx: Any) -> str | None:
        text = shown(ctx)
        return None if text is None else spaced(text)

    param.display_type_rich = display_type_rich
    param._embedcalc_spaced = True


@contextmanager
def readable_help(params: Iterable[Any]) -> Iterator[None]:
    """Inside the block, typer draws the help of a command with ``params`` with choice lists spaced and long words
    folded."""
    import typer.rich_utils

    from embedcalc.render.help_tables import folding_tables

    for param in params:
        _space_choices(param)
    with folding_tables(typer.rich_utils):
        yield
