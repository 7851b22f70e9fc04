"""Serving memory on an analysis (``analyze --mode inference --concurrency C --memory-utilization F``): the memory a
server holds for C sequences in flight — paged KV, one forward's activation workspace, a runtime reserve as vLLM's
gpu_memory_utilization — judged against the device's memory or --max-memory
(:mod:`embedcalc.analysis.memory.serving` states the conventions)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from embedcalc.api.workload import usage
from embedcalc.config.limits import count_problem, plain_number

if TYPE_CHECKING:
    from embedcalc.analysis.memory.serving import ServingMemory
    from embedcalc.analysis.report import Analysis

__all__ = ["ServingOptions", "apply_serving"]


@dataclass(frozen=True)
class ServingOptions:
    """``concurrency`` sequences in flight (default: the workload's batch size) and the fraction of device memory
    the server uses (default 0.9 where a memory limit is known); neither: no serving memory."""

    concurrency: int | None = None
    memory_utilization: float | None = None

    @property
    def asked(self) -> bool:
        return self.concurrency is not None or self.memory_utilization is not None


def as_flag(name: str) -> str:
    """An option as the CLI spells it (``memory_utilization`` -> ``--memory-utilization``)."""
    return "--" + name.replace("_", "-")


def apply_serving(
    analysis: Analysis,
    options: ServingOptions,
    hardware: str | None,
    max_memory: int | None,
    kv_dtype: str | None,
    spell: Callable[[str], str] = as_flag,
) -> ServingMemory | None:
    """The serving memory ``options`` ask for (None when they ask for none), against ``max_memory`` or the memory
    of ``hardware`` at the utilization; usage errors (exit 2) for a training workload, a concurrency that is not a
    count, a utilization out of (0, 1] or one with no memory to be a fraction of, each naming the argument as the
    caller spells it (``spell``: the CLI's flags by default, the Python API's keywords as they are)."""
    if not options.asked:
        return None
    concurrency_, utilization_ = spell("concurrency"), spell("memory_utilization")
    if analysis.workload.mode != "inference":
        raise usage(f"{concurrency_} and {utilization_} describe serving; use them with {spell('mode')} inference",
                    concurrency_)  # fmt: skip
    fraction = plain_number(options.memory_utilization)
    if fraction is not None and (
        isinstance(fraction, bool) or not isinstance(fraction, int | float) or not 0 < fraction <= 1
    ):
        raise usage(f"{utilization_} {fraction!r:.40}: give a fraction in (0, 1] of the device's memory, e.g. "
                    "0.9 (vLLM's default)", utilization_)  # fmt: skip
    if options.concurrency is not None and (why := count_problem(options.concurrency)) is not None:
        raise usage(
            f"{concurrency_} {options.concurrency!r:.40} is {why} (sequences in flight)", concurrency_
        )
    limit = max_memory
    if limit is None and hardware is not None:
        from embedcalc.devices.resolve import load_device

        limit = load_device(hardware).memory
    if fraction is not None and limit is None:
        raise usage(f"{utilization_} is a fraction of a device's memory: give {spell('hardware')} NAME or "
                    f"{spell('max_memory')} SIZE", utilization_)  # fmt: skip
    from embedcalc.analysis.memory.serving import DEFAULT_UTILIZATION, serving_memory

    concurrency = (
        plain_number(options.concurrency) if options.concurrency is not None else analysis.workload.batch_size
    )
    utilization = (fraction or DEFAULT_UTILIZATION) if limit is not None else None
    return serving_memory(analysis.config, analysis.workload, concurrency, limit, utilization, kv_dtype)
