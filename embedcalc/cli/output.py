"""The one stdout console and one stderr console, JSON envelopes (DESIGN.md §5) and error reporting."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from rich.console import Console
from rich.markup import escape

from embedcalc.errors import EmbedcalcError, Problem

SCHEMA_VERSION = 1

_width = int(os.environ["COLUMNS"]) if os.environ.get("COLUMNS", "").isdigit() else None
# Piped output gets a wide console so that tables are never truncated to rich's 80-column default.
stdout = Console(width=_width or (None if sys.stdout.isatty() else 200), soft_wrap=False)
stderr = Console(stderr=True, width=_width, highlight=False)


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
    for p in problems:
        stderr.print(
            f"[yellow]embedcalc: warning:[/] {escape(where + p.path)}: {escape(p.message)}",
            markup=True,
            soft_wrap=True,
        )


def report_error(error: EmbedcalcError) -> None:
    """``embedcalc: error: ...`` on stderr."""
    stderr.print(
        f"[red]embedcalc: error:[/] {escape(error.message)}", markup=True, soft_wrap=True, highlight=False
    )
