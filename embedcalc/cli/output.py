"""The one stdout console and one stderr console, JSON envelopes (DESIGN.md §5) and error reporting.

The rich consoles are created on first use (``output.stdout`` / ``output.stderr``), so that a ``--format json``
run whose stderr is not a terminal never imports rich: warnings and errors are then plain lines.
"""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, Any

from embedcalc.errors import EmbedcalcError, Problem

if TYPE_CHECKING:
    from rich.console import Console

SCHEMA_VERSION = 1
_consoles: dict[str, Console] = {}


def _width(name: str) -> int | None:
    """$COLUMNS if set; piped stdout gets 200 so that tables are never cut to rich's 80-column default."""
    if os.environ.get("COLUMNS", "").isdigit():
        return int(os.environ["COLUMNS"])
    return 200 if name == "stdout" and not sys.stdout.isatty() else None


def _console(name: str) -> Console:
    """The console for ``name``, created once; its width follows the environment at each use."""
    if name not in _consoles:
        from rich.console import Console

        if name == "stdout":
            _consoles[name] = Console(soft_wrap=False)
        else:
            _consoles[name] = Console(stderr=True, highlight=False)
    console = _consoles[name]
    width = _width(name)
    if width is not None:
        console.width = width
    return console


def __getattr__(name: str) -> Console:
    if name in ("stdout", "stderr"):
        return _console(name)
    raise AttributeError(name)


def _plain_stderr() -> bool:
    return "stderr" not in _consoles and not sys.stderr.isatty()


def emit_json(
    command: str,
    results: list[dict[str, Any]],
    workload: dict[str, Any] | None = None,
    problems: list[Problem] | None = None,
    status: str = "ok",
    **extra: Any,
) -> None:
    """Write one DESIGN.md §5 envelope to stdout."""
    envelope: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "command": command,
        "status": status,
        "workload": workload,
        "results": results,
        "problems": [p.as_dict() for p in problems or []],
        **extra,
    }
    sys.stdout.write(json.dumps(envelope, indent=2) + "\n")
    sys.stdout.flush()


def warn(problems: list[Problem], target: str | None = None) -> None:
    """Warnings go to stderr, one line each."""
    where = f"{target}: " if target else ""

    def line(p: Problem) -> str:  # "path: message", without repeating a path the message starts with
        return p.message if p.message.startswith(p.path) else f"{p.path}: {p.message}"

    if problems and _plain_stderr():
        sys.stderr.write("".join(f"embedcalc: warning: {where}{line(p)}\n" for p in problems))
        return
    from rich.markup import escape

    for p in problems:
        _console("stderr").print(
            f"[yellow]embedcalc: warning:[/] {escape(where + line(p))}",
            markup=True,
            soft_wrap=True,
        )


def report_error(error: EmbedcalcError) -> None:
    """``embedcalc: error: ...`` on stderr."""
    if _plain_stderr():
        sys.stderr.write(f"embedcalc: error: {error.message}\n")
        return
    from rich.markup import escape

    _console("stderr").print(
        f"[red]embedcalc: error:[/] {escape(error.message)}", markup=True, soft_wrap=True, highlight=False
    )
