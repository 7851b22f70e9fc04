"""Every file the process opens while a block runs, from the ``open`` audit event (PEP 578: raised by ``open()``,
``io.open`` and ``os.open`` with the path as given), for the tests that a command reads nothing outside what its
user named (issue 33). An audit hook cannot be removed: one is installed per process and switched on per block.

:meth:`Opened.outside` is the strict check: every path opened must resolve under one of the roots the test names
(the checkpoint directory, the hub cache) or under the interpreter's own files (the standard library, the
installed packages, this checkout's package and data: what ``import`` and the shipped presets read).
"""

from __future__ import annotations

import os
import sys
import sysconfig
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


class Opened:
    def __init__(self) -> None:
        self.recording = False
        self.paths: list[str] = []
        sys.addaudithook(self._hook)

    def _hook(self, event: str, args: tuple[Any, ...]) -> None:
        if self.recording and event == "open" and args and isinstance(args[0], str | bytes | os.PathLike):
            self.paths.append(os.path.abspath(os.fsdecode(args[0])))

    @contextmanager
    def record(self) -> Iterator[list[str]]:
        """Record the paths opened in the block (the list is filled as they are opened)."""
        self.paths = []
        self.recording = True
        try:
            yield self.paths
        finally:
            self.recording = False

    def under(self, folder: Path) -> list[str]:
        """The paths opened that resolve under ``folder``."""
        root = os.path.realpath(folder)
        return [p for p in self.paths if _within(os.path.realpath(p), root)]

    def outside(self, *roots: Path) -> list[str]:
        """The paths opened that resolve neither under one of ``roots`` nor under the interpreter's own files."""
        allowed = [os.path.realpath(r) for r in (*roots, *interpreter_roots())]
        return [p for p in self.paths if not any(_within(os.path.realpath(p), root) for root in allowed)]


def interpreter_roots() -> list[str]:
    """Where the interpreter reads its own code and data: its prefixes, the standard library and the installed
    packages, and this checkout (the embedcalc package and its shipped data)."""
    paths = sysconfig.get_paths()
    checkout = Path(__file__).resolve().parent.parent
    return [sys.prefix, sys.base_prefix, sys.exec_prefix, paths["stdlib"], paths["purelib"], paths["platlib"],
            str(checkout / "embedcalc"), str(checkout / "presets"), str(checkout / "hardware")]  # fmt: skip


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


_OPENED: Opened | None = None


def opened_files() -> Opened:
    """The process's one recorder (installed on first use)."""
    global _OPENED
    if _OPENED is None:
        _OPENED = Opened()
    return _OPENED
