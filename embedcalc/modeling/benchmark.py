"""Build a model on a real device and time it: the measurement side of ``embedcalc bench``.

Memory is measured as honestly as the device allows and the method is named in the result:
CUDA ``torch.cuda.max_memory_allocated`` over build and timed steps (weights, optimizer state, activations;
not the allocator's cached-but-free blocks); on the CPU the growth of the process's peak resident set size from
just before the model is built (includes allocator slack and anything else the process touches; an upper bound).
bfloat16/float16 training keeps float32 weights and runs the forward under ``torch.autocast`` (mixed precision);
inference casts the model to the dtype.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch

from embedcalc.config.schema import ModelConfig
from embedcalc.modeling.layers import AttentionImpl
from embedcalc.modeling.model import build_model
from embedcalc.modeling.timing import (
    DTYPES,
    StepCallback,
    Timings,
    current_rss_bytes,
    device_name,
    make_inputs,
    make_step,
    peak_rss_bytes,
    time_steps,
)  # fmt: skip


@dataclass(frozen=True)
class BenchSettings:
    """What to run: shapes, dtype, mode, attention implementation, compile, step counts."""

    batch_size: int
    seq_len: int
    tgt_len: int | None
    dtype: str
    mode: Literal["inference", "training"]
    attention: AttentionImpl
    compile: bool
    warmup: int
    repeat: int
    recompute: Literal["none", "selective", "full"] = "none"


def apply_recompute(model: torch.nn.Module, recompute: Literal["selective", "full"]) -> None:
    """Activation checkpointing (``torch.utils.checkpoint``, non-reentrant) as Korthikanti et al. 2022 define it.

    full: every block keeps only its input and recomputes itself in the backward pass.
    selective: only the attention core (Q·Kᵀ, softmax, ·V: the n² tensors) is recomputed.
    """
    from torch.utils.checkpoint import checkpoint

    from embedcalc.modeling.layers import Attention, Block

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        def checkpointed(*args: Any, **kwargs: Any) -> Any:
            return checkpoint(fn, *args, use_reentrant=False, **kwargs)

        return checkpointed

    for module in model.modules():
        if recompute == "full" and isinstance(module, Block):
            module.forward = wrap(module.forward)  # type: ignore[method-assign]
        elif recompute == "selective" and isinstance(module, Attention):
            module._core = wrap(module._core)  # type: ignore[method-assign]


@dataclass(frozen=True)
class BenchRun:
    """What was measured."""

    timings: Timings
    build_s: float
    peak_memory_bytes: int
    memory_method: str
    device: str
    threads: int


def run_benchmark(
    config: ModelConfig, settings: BenchSettings, device: torch.device, on_step: StepCallback | None = None
) -> BenchRun:
    """Build ``config`` on ``device`` and time ``settings.repeat`` steps after ``settings.warmup``."""
    mixed = settings.mode == "training" and settings.dtype != "float32"
    model_dtype = torch.float32 if mixed or settings.mode == "training" else DTYPES[settings.dtype]
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    rss_before = current_rss_bytes()
    start = time.perf_counter()
    model = build_model(config, attention=settings.attention, device=device, dtype=model_dtype)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    build_s = time.perf_counter() - start
    if settings.mode == "training" and settings.recompute != "none":
        apply_recompute(model, settings.recompute)
    runnable: torch.nn.Module = torch.compile(model) if settings.compile else model  # type: ignore[assignment]
    inputs = make_inputs(config, settings.batch_size, settings.seq_len, settings.tgt_len, device)
    step = make_step(runnable, inputs, settings.mode)
    if mixed:
        inner = step

        def step() -> None:
            with torch.autocast(device_type=device.type, dtype=DTYPES[settings.dtype]):
                inner()

    timings = time_steps(step, device, settings.warmup, settings.repeat, on_step)
    if device.type == "cuda":
        peak = int(torch.cuda.max_memory_allocated(device))
        method = "torch.cuda.max_memory_allocated (tensors only, allocator cache excluded)"
    else:
        peak = max(0, peak_rss_bytes() - rss_before)
        method = "peak RSS growth from before the build (ru_maxrss; includes allocator slack)"
    return BenchRun(timings, build_s, peak, method, device_name(device), torch.get_num_threads())
