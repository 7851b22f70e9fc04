"""The one stdout console and one stderr console, JSON envelopes (DESIGN.md §5) and error reporting.

The rich consoles live in :mod:`embedcalc.render.console` (rich only in render) and are created on first use
(``output.stdout`` / ``output.stderr``), so that a ``--format json`` run whose stderr is not a terminal never
imports rich: warnings and errors are then plain lines.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from embedcalc.errors import EmbedcalcError, Problem, require_finite

if TYPE_CHECKING:
    from embedcalc.render.console import Console

SCHEMA_VERSION = 1


def __getattr__(name: str) -> Console:
    """``output.stdout`` / ``output.stderr``: the rich consoles of :mod:`embedcalc.render.console`."""
    if name in ("stdout", "stderr"):
        from embedcalc.render.console import console

        return console(name)
    raise AttributeError(name)


def progress(title: str) -> AbstractContextManager[Callable[[str, int, int], None]]:
    """A progress bar on stderr (drawn only on a terminal) for a long measurement: the API's ``Progress``."""
    from embedcalc.render.console import console
    from embedcalc.render.progress import step_progress

    return step_progress(console("stderr"), title)


def _plain_stderr() -> bool:
    """Whether to write warnings and errors as plain lines: stderr is no terminal and no console exists yet."""
    consoles = sys.modules.get("embedcalc.render.console")  # loaded only once a console was asked for
    return not (consoles is not None and consoles.has_console("stderr")) and not sys.stderr.isatty()


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
    require_finite(envelope, command)
    sys.stdout.write(json.dumps(envelope, indent=2, allow_nan=False) + "\n")
    sys.stdout.flush()


def warn(problems: list[Problem], target: str | None = None) -> None:
    """Warnings go to stderr, one line each."""
    where = f"{target}: " if target else ""

    def line(p: Problem) -> str:  # "path: message", without repeating a path the message starts with
        return p.message if p.message.startswith(p.path) else f"{p.path}: {p.message}"

    if not problems:
        return  # (nothing to say: no rich either)
    if _plain_stderr():
        sys.stderr.write("".join(f"embedcalc: warning: {where}{line(p)}\n" for p in problems))
        return
    from embedcalc.render.console import print_warning

    for p in problems:
        print_warning(where + line(p))


def report_error(error: EmbedcalcError) -> None:
    """``embedcalc: error: ...`` on stderr."""
    if _plain_stderr():
        sys.stderr.write(f"embedcalc: error: {error.message}\n")
        return
    from embedcalc.render.console import print_error

    print_error(error.message)
