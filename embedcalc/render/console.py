"""The process's two rich consoles (stdout for tables, stderr for progress, warnings and errors), made on first use
so that a ``--format json`` run with a non-terminal stderr never imports rich."""

from __future__ import annotations

import errno
import os
import sys

from rich.console import Console

from embedcalc.config.limits import MAX_COLUMNS

__all__ = ["Console", "console", "has_console", "print_error", "print_warning"]
from rich.markup import escape

_consoles: dict[str, Console] = {}


class _Console(Console):
    """rich's console, but a broken pipe is the BrokenPipeError the CLI's error edge handles (one exit code for it,
    :func:`embedcalc.cli.app.main`), not rich's own ``SystemExit(1)``."""

    key_value = False  # write tables as key: value lines (render/fit.py); set for COLUMNS=0

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError(errno.EPIPE, "the reader of stdout left")


def _width(name: str) -> int | None:
    """$COLUMNS if it is a width (1 to MAX_COLUMNS); piped stdout gets 200 so that tables are never cut to rich's
    80-column default. ``COLUMNS=0`` or a non-number means "not set" (rich would print nothing at width 0): the
    terminal's width, or 200 when piped; with ``COLUMNS=0`` tables are written as key: value lines
    (:func:`_key_value`)."""
    text = os.environ.get("COLUMNS", "").strip()
    columns = int(text) if text.isdigit() and len(text) <= len(str(MAX_COLUMNS)) else 0
    if columns > 0:
        return min(columns, MAX_COLUMNS)
    if name == "stdout" and not sys.stdout.isatty():
        return 200
    if not text:
        return None  # rich asks the terminal
    try:  # $COLUMNS is set but no width: ask the terminal ourselves, as rich would take the 0 at its word
        return os.get_terminal_size((sys.stdout if name == "stdout" else sys.stderr).fileno()).columns or 80
    except (OSError, ValueError, AttributeError):
        return 80


def console(name: str) -> Console:
    """The console for ``name`` ("stdout" or "stderr"), created once; its width follows the environment."""
    if name not in _consoles:
        _consoles[name] = (
            _Console(soft_wrap=False) if name == "stdout" else _Console(stderr=True, highlight=False)
        )
    made = _consoles[name]
    if isinstance(made, _Console):
        made.key_value = _key_value()
    width = _width(name)
    if width is not None:
        made.width = width
    return made


def _key_value() -> bool:
    """``COLUMNS=0``: the terminal says it has no width, so no table is drawn to one (key: value lines instead)."""
    return os.environ.get("COLUMNS", "").strip() == "0"


def has_console(name: str) -> bool:
    """Whether the console for ``name`` has been made (a rich console is then in charge of that stream)."""
    return name in _consoles


def print_warning(text: str) -> None:
    console("stderr").print(f"[yellow]embedcalc: warning:[/] {escape(text)}", markup=True, soft_wrap=True)


def print_error(text: str) -> None:
    console("stderr").print(f"[red]embedcalc: error:[/] {escape(text)}", markup=True, soft_wrap=True,
                            highlight=False)  # fmt: skip
