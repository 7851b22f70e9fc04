"""Timing real forward passes and training steps, measuring memory, and measuring the device's matmul peak.

GPU timing uses CUDA events around each step with a synchronisation; CPU timing uses ``time.perf_counter``.
Inference runs under ``torch.inference_mode``; a training step is forward + backward + ``AdamW.step``.
"""

from __future__ import annotations

import os
import resource
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor, nn

from embedcalc.config.schema import ModelConfig

DTYPES: dict[str, torch.dtype] = {  # embedcalc's dtype names (embedcalc.config.dtypes) -> torch's
    "fp32": torch.float32,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
}
StepCallback = Callable[[str, int, int], None]  # (phase, step done, steps in phase)


def quantile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (q in [0, 1]) of ``values``, interpolated linearly between the two nearest order
    statistics (Hyndman & Fan 1996, definition 7: numpy's and R's default)."""
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


@dataclass(frozen=True)
class Timings:
    """Seconds per step of the timed runs, in order."""

    seconds: list[float]

    @property
    def median_s(self) -> float:
        return statistics.median(self.seconds)

    def quantile_s(self, q: float) -> float:
        """The ``q`` quantile of the step times (:func:`quantile`)."""
        return quantile(self.seconds, q)


def resolve_device(name: str) -> torch.device:
    """``auto`` -> cuda if available else cpu; raises RuntimeError for cuda without CUDA."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda was asked for, but torch.cuda.is_available() is False")
    return torch.device(name)


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu ({torch.get_num_threads()} threads, {os.cpu_count()} cores)"


def free_memory_bytes(device: torch.device) -> int:
    """Memory free for this run: CUDA ``mem_get_info`` free bytes, or MemAvailable from /proc/meminfo."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    with open("/proc/meminfo", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("cannot read MemAvailable from /proc/meminfo")


def make_inputs(
    config: ModelConfig, batch_size: int, seq_len: int, tgt_len: int | None, device: torch.device
) -> tuple[Tensor, Tensor | None]:
    """Random token ids: (B, S) for the first stack and, for an encoder-decoder, (B, T) for the decoder."""
    gen = torch.Generator(device="cpu").manual_seed(0)
    src = torch.randint(0, config.vocab_size, (batch_size, seq_len), generator=gen).to(device)  # (B, S)
    if config.architecture != "encoder-decoder":
        return src, None
    tgt = torch.randint(0, config.vocab_size, (batch_size, tgt_len or seq_len), generator=gen).to(
        device
    )  # (B, T)
    return src, tgt


def training_loss(output: Any, targets: Tensor) -> Tensor:
    """The loss a real training step would take: cross-entropy over the logits (in float32, as mixed-precision
    recipes do) when the model has an LM head, else the mean of its headline output (pooled or hidden)."""
    logits = getattr(output, "logits", None)
    if isinstance(logits, Tensor):
        return torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), targets.flatten())
    main = getattr(output, "main", output)
    if not isinstance(main, Tensor):
        raise TypeError(f"model returned {type(output).__name__}, expected a tensor or a TransformerOutput")
    return main.float().mean()


def backward_parallel_loss(logits: Any, targets: Tensor) -> None:
    """Cross-entropy over vocab-sharded DTensor logits (a tensor-parallel LM head) and its backward, both inside
    torch's ``loss_parallel``, which computes the softmax across the shards without gathering the vocabulary."""
    from torch.distributed.tensor.parallel import loss_parallel

    with loss_parallel():
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())
        loss.backward()  # type: ignore[no-untyped-call]


def backward_training_loss(output: Any, targets: Tensor) -> None:
    """Backpropagate :func:`training_loss`, or torch's parallel cross-entropy when the logits are sharded over the
    vocabulary (:func:`backward_parallel_loss`; a DTensor can exist only once torch.distributed.tensor is loaded)."""
    tensor = sys.modules.get("torch.distributed.tensor")
    logits = getattr(output, "logits", None)
    if tensor is not None and isinstance(logits, tensor.DTensor):
        backward_parallel_loss(logits, targets)
        return
    training_loss(output, targets).backward()  # type: ignore[no-untyped-call]


class _Clock:
    """Per-step wall time: CUDA events on a GPU, perf_counter on the CPU."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"

    def time(self, fn: Callable[[], None]) -> float:
        if self.cuda:
            start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            torch.cuda.synchronize()
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            return float(start.elapsed_time(end)) / 1000.0
        begin = time.perf_counter()
        fn()
        return time.perf_counter() - begin


def make_step(
    model: nn.Module, inputs: tuple[Tensor, Tensor | None], mode: Literal["inference", "training"], fused: bool = True
) -> Callable[[], None]:
    """One inference forward, or one training step (forward, :func:`backward_training_loss`, AdamW step).
    ``fused=False``: the for-each AdamW, for parameters the fused kernel does not take (tensor-parallel DTensors)."""
    src, tgt = inputs
    args = (src,) if tgt is None else (src, tgt)
    if mode == "inference":
        model.eval()

        def infer() -> None:
            with torch.inference_mode():
                model(*args)

        return infer
    model.train()
    # the fused kernel (CUDA, and CPU since torch 2.4) updates in place with no full-size temporaries, so the
    # measured peak is the optimizer state itself
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6, fused=fused)
    targets = args[-1]  # next-token-style targets: the last stack's own ids (their values do not change cost)

    def train() -> None:
        backward_training_loss(model(*args), targets)
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)  # persistent gradient buffers, as DDP/Megatron keep them

    return train


def time_steps(
    step: Callable[[], None],
    device: torch.device,
    warmup: int,
    repeat: int,
    on_step: StepCallback | None = None,
) -> Timings:
    """Run ``warmup`` untimed then ``repeat`` timed steps."""
    clock = _Clock(device)
    for i in range(warmup):
        clock.time(step)
        if on_step:
            on_step("warm-up", i + 1, warmup)
    seconds = []
    for i in range(repeat):
        seconds.append(clock.time(step))
        if on_step:
            on_step("timing", i + 1, repeat)
    return Timings(seconds)


def set_threads(threads: int | None) -> int:
    """Use ``threads`` CPU threads for torch's kernels (None: leave torch's choice); the count in effect."""
    if threads is not None:
        torch.set_num_threads(threads)
    return torch.get_num_threads()


def current_rss_bytes() -> int:
    """Resident set size of this process now (from /proc/self/statm)."""
    with open("/proc/self/statm", encoding="ascii") as fh:
        pages = int(fh.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE")


def peak_rss_bytes() -> int:
    """Peak resident set size of this process so far (``ru_maxrss``, KiB on Linux)."""
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


@dataclass(frozen=True)
class PeakMeasurement:
    """A large square GEMM timed like the model: FLOP/s achieved by the best of ``repeat`` runs."""

    flops_per_s: float
    size: int
    dtype: str
    repeat: int


def measure_matmul_peak(
    device: torch.device,
    dtype: str,
    size: int | None = None,
    repeat: int = 10,
    on_step: StepCallback | None = None,
) -> PeakMeasurement:
    """FLOP/s of ``size`` x ``size`` @ ``size`` x ``size`` (2 size³ FLOPs), the best of ``repeat`` timed runs."""
    n = size or (8192 if device.type == "cuda" else 2048)
    torch_dtype = DTYPES[dtype]
    a = torch.randn(n, n, device=device, dtype=torch.float32).to(torch_dtype)
    b = torch.randn(n, n, device=device, dtype=torch.float32).to(torch_dtype)
    out = torch.empty(n, n, device=device, dtype=torch_dtype)

    def gemm() -> None:
        torch.matmul(a, b, out=out)

    timings = time_steps(gemm, device, warmup=2, repeat=repeat, on_step=on_step)
    best = min(timings.seconds)
    return PeakMeasurement(flops_per_s=2 * n**3 / best, size=n, dtype=dtype, repeat=repeat)
