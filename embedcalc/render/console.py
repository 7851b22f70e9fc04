"""The process's two rich consoles (stdout for tables, stderr for progress, warnings and errors), made on first use
so that a ``--format json`` run with a non-terminal stderr never imports rich."""

from __future__ import annotations

import os
import sys

from rich.console import Console

__all__ = ["Console", "console", "has_console", "print_error", "print_warning"]
from rich.markup import escape

_consoles: dict[str, Console] = {}


def _width(name: str) -> int | None:
    """$COLUMNS if set; piped stdout gets 200 so that tables are never cut to rich's 80-column default."""
    if os.environ.get("COLUMNS", "").isdigit():
        return int(os.environ["COLUMNS"])
    return 200 if name == "stdout" and not sys.stdout.isatty() else None


def console(name: str) -> Console:
    """The console for ``name`` ("stdout" or "stderr"), created once; its width follows the environment."""
    if name not in _consoles:
        _consoles[name] = Console(soft_wrap=False) if name == "stdout" else Console(stderr=True, highlight=False)
    made = _consoles[name]
    width = _width(name)
    if width is not None:
        made.width = width
    return made


def has_console(name: str) -> bool:
    """Whether the console for ``name`` has been made (a rich console is then in charge of that stream)."""
    return name in _consoles


def print_warning(text: str) -> None:
    console("stderr").print(f"[yellow]embedcalc: warning:[/] {escape(text)}", markup=True, soft_wrap=True)


def print_error(text: str) -> None:
    console("stderr").print(f"[red]embedcalc: error:[/] {escape(text)}", markup=True, soft_wrap=True,
                            highlight=False)  # fmt: skip
