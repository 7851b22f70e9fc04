"""Serving memory on an analysis (``analyze --mode inference --concurrency C --memory-utilization F``): the memory a
server holds for C sequences in flight — paged KV, one forward's activation workspace, a runtime reserve as vLLM's
gpu_memory_utilization — judged against the device's memory or --max-memory
(:mod:`embedcalc.analysis.memory.serving` states the conventions)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from embedcalc.api.workload import usage

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


def apply_serving(
    analysis: Analysis,
    options: ServingOptions,
    hardware: str | None,
    max_memory: int | None,
    kv_dtype: str | None,
) -> ServingMemory | None:
    """The serving memory ``options`` ask for (None when they ask for none), against ``max_memory`` or the memory
    of ``hardware`` at the utilization; usage errors (exit 2) for a training workload, a utilization out of (0, 1]
    or one with no memory to be a fraction of."""
    if not options.asked:
        return None
    if analysis.workload.mode != "inference":
        raise usage("--concurrency and --memory-utilization describe serving; use them with --mode inference",
                    "--concurrency")  # fmt: skip
    fraction = options.memory_utilization
    if fraction is not None and not 0 < fraction <= 1:
        raise usage(f"--memory-utilization {fraction!r}: give a fraction in (0, 1] of the device's memory, e.g. "
                    "0.9 (vLLM's default)", "--memory-utilization")  # fmt: skip
    if options.concurrency is not None and options.concurrency < 1:
        raise usage(f"--concurrency {options.concurrency!r}: give 1 or more sequences", "--concurrency")
    limit = max_memory
    if limit is None and hardware is not None:
        from embedcalc.devices.resolve import load_device

        limit = load_device(hardware).memory
    if fraction is not None and limit is None:
        raise usage("--memory-utilization is a fraction of a device's memory: give --hardware NAME or "
                    "--max-memory SIZE", "--memory-utilization")  # fmt: skip
    from embedcalc.analysis.memory.serving import DEFAULT_UTILIZATION, serving_memory

    concurrency = options.concurrency if options.concurrency is not None else analysis.workload.batch_size
    utilization = (fraction or DEFAULT_UTILIZATION) if limit is not None else None
    return serving_memory(analysis.config, analysis.workload, concurrency, limit, utilization, kv_dtype)
