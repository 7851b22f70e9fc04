"""The CLI in a subprocess, for the tests where the process boundary is the point (real streams, exit codes, a
traceback if anything escapes): the environment it runs in and the call. A module of its own, not conftest's:
tests import these by name, and ``from conftest import ...`` gets whichever conftest.py pytest loaded last (a
directory's own, such as tests/sources/hf/conftest.py), not the root one."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path


def cli_env(**extra: str) -> dict[str, str]:
    """The environment for a CLI subprocess: fixed width, no colour, no inherited COLUMNS/LINES."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "FORCE_COLOR")}
    env.update({"NO_COLOR": "1", "TERM": "dumb", "PYTHONIOENCODING": "utf-8"})
    env.update(extra)
    return env


def run_embedcalc(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "embedcalc", *args],
        capture_output=True,
        text=True,
        encoding="utf-8",
        cwd=cwd,
        env=env if env is not None else cli_env(COLUMNS="120"),
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


@contextlib.contextmanager
def sigint_as_in_a_terminal() -> Iterator[None]:
    """Start the children of the block with SIGINT at its default disposition, as a terminal's foreground job
    has it, whatever this process inherited. A command run in the background of a non-interactive shell
    (``cmd &`` in a script, a CI lane) starts with SIGINT ignored (POSIX Shell Command Language, 2.11
    "Signals and Error Handling"); an ignored disposition survives fork and exec, and Python then installs no
    KeyboardInterrupt handler (the signal module's documentation), so a child spawned from such a test run
    ignores the test's SIGINT and keeps running. A Python handler, unlike SIG_IGN, is reset to the default by
    exec: installing Python's own for the block gives the child the terminal's disposition."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
