"""The CLI in a subprocess, for the tests where the process boundary is the point (real streams, exit codes, a
traceback if anything escapes): the environment it runs in and the call. A module of its own, not conftest's:
tests import these by name, and ``from conftest import ...`` gets whichever conftest.py pytest loaded last (a
directory's own, such as tests/config/hf/conftest.py), not the root one."""

from __future__ import annotations

import os
import subprocess
import sys
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
