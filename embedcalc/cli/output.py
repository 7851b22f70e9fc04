"""The one stdout console and one stderr console, JSON envelopes (DESIGN.md §5) and error reporting.

The rich consoles live in :mod:`embedcalc.render.console` (rich only in render) and are created on first use
(``output.stdout`` / ``output.stderr``), so that a ``--format json`` run whose stderr is not a terminal never
imports rich: warnings and errors are then plain lines.
"""

from __future__ import annotations

import json
import math
import sys
from typing import TYPE_CHECKING, Any

from embedcalc.errors import EmbedcalcError, Problem, WorkloadError

if TYPE_CHECKING:
    from embedcalc.render.console import Console

SCHEMA_VERSION = 1


def __getattr__(name: str) -> Console:
    """``output.stdout`` / ``output.stderr``: the rich consoles of :mod:`embedcalc.render.console`."""
    if name in ("stdout", "stderr"):
        from embedcalc.render.console import console

        return console(name)
    raise AttributeError(name)


def _plain_stderr() -> bool:
    """Whether to write warnings and errors as plain lines: stderr is no terminal and no console exists yet."""
    consoles = sys.modules.get("embedcalc.render.console")  # loaded only once a console was asked for
    return not (consoles is not None and consoles.has_console("stderr")) and not sys.stderr.isatty()


def _non_finite(value: Any, path: str) -> str | None:
    """The path of the first float in ``value`` (nested dicts and lists) that is inf or nan, or None."""
    if isinstance(value, float):
        return None if math.isfinite(value) else path
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list | tuple) else ()
    for key, item in items:
        found = _non_finite(item, f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}".lstrip("."))
        if found is not None:
            return found
    return None


def require_finite(data: Any, what: str = "output") -> None:
    """Refuse (exit 3, naming the quantity) a result holding inf or nan: JSON has no such numbers, and a time or
    cost that overflows a float comes from a workload beyond what the time model can express."""
    path = _non_finite(data, "")
    if path is not None:
        message = (
            f"{what}: {path or 'the result'} is beyond a float's range (inf or nan) for this workload; use smaller "
            "sizes (--train-tokens, --devices, --batch-size, --seq-len) or a faster device"
        )
        raise WorkloadError(message, [Problem(path, message, "non_finite_result")], "non_finite_result")


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
