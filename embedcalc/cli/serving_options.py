"""The serving-memory options of ``analyze --mode inference`` (one option group, :class:`ServingFlags`):
--concurrency and --memory-utilization, for :mod:`embedcalc.api.serving` (a runtime reserve as vLLM's
gpu_memory_utilization, paged KV blocks, the activation workspace)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

import typer

from embedcalc.cli.options import bounded_int

if TYPE_CHECKING:
    from embedcalc.api.serving import ServingOptions


def _fraction(value: float | None) -> float | None:
    if value is not None and not 0 < value <= 1:
        raise typer.BadParameter(f"{value:g}: give a fraction in (0, 1] of the device's memory, e.g. 0.9 (vLLM's "
                                 "default)")  # fmt: skip
    return value


@dataclass(frozen=True)
class ServingFlags:
    """--concurrency, --memory-utilization: memory as a server holds it (an option group, see cli/options.py)."""

    concurrency: Annotated[
        int | None,
        typer.Option("--concurrency", min=1, callback=bounded_int,
                     help="Inference: serving memory for this many sequences in flight (paged KV in 16-token "
                     "blocks, one forward's activation workspace) beside the static batch."),
    ] = None  # fmt: skip
    memory_utilization: Annotated[
        float | None,
        typer.Option("--memory-utilization", callback=_fraction, metavar="F",
                     help="Inference: the fraction of device memory a server uses (vLLM's gpu_memory_utilization, "
                     "default 0.9 with --concurrency); the rest is a runtime reserve. Needs --hardware or "
                     "--max-memory."),
    ] = None  # fmt: skip

    def options(self) -> ServingOptions | None:
        """The API's form of these flags; None when neither is given (the API then holds no serving memory, and
        :mod:`embedcalc.api.serving` stays off the path of a plain analyze: start-up)."""
        if self.concurrency is None and self.memory_utilization is None:
            return None
        from embedcalc.api.serving import ServingOptions

        return ServingOptions(self.concurrency, self.memory_utilization)
