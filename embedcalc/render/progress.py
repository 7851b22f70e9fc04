"""A rich progress bar for warm-up and timing phases, drawn on the given (stderr) console."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn


@contextmanager
def step_progress(console: Console, title: str) -> Iterator[Callable[[str, int, int], None]]:
    """Yield a callback ``(phase, done, total)`` that advances one bar per phase."""
    progress = Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=console, transient=True, disable=not console.is_terminal,
    )  # fmt: skip
    tasks: dict[str, TaskID] = {}

    def on_step(phase: str, done: int, total: int) -> None:
        if phase not in tasks:
            tasks[phase] = progress.add_task(f"{title}: {phase}", total=total)
        progress.update(tasks[phase], completed=done)

    with progress:
        yield on_step
