"""Timing: the clock, timed steps, the one quantile of step times, the device's measured matmul peak, its
per-kernel overhead and how a GEMM's rate saturates with its rows.

GPU timing uses CUDA events around each step with a synchronisation; CPU timing uses ``time.perf_counter``. What a
step is (inputs, losses, the training step) is :mod:`embedcalc.modeling.steps`; the device and its memory are
:mod:`embedcalc.modeling.device`.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import torch

from embedcalc.modeling.device import DTYPES

StepCallback = Callable[[str, int, int], None]  # (phase, step done, steps in phase)
T = TypeVar("T")


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


class Clock:
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


def timed_call(fn: Callable[[], T], device: torch.device) -> tuple[T, float]:
    """``fn()`` and its wall seconds, synchronised on CUDA (a model's build)."""
    start = time.perf_counter()
    value = fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return value, time.perf_counter() - start


def time_steps(
    step: Callable[[], None],
    device: torch.device,
    warmup: int,
    repeat: int,
    on_step: StepCallback | None = None,
) -> Timings:
    """Run ``warmup`` untimed then ``repeat`` timed steps."""
    clock = Clock(device)
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


@dataclass(frozen=True)
class OverheadMeasurement:
    """Seconds one kernel costs beyond its work (dispatch, launch, prologue and tail), with how it was measured."""

    seconds_per_kernel: float
    kernels: int
    repeat: int
    method: str


def measure_kernel_overhead(
    device: torch.device, kernels: int = 2000, repeat: int = 10, on_step: StepCallback | None = None
) -> OverheadMeasurement:
    """The per-kernel overhead of ``device``: a chain of ``kernels`` tiny dependent kernels (8 x 8 fp32, an
    element-wise add and a matmul in turn: the work is nanoseconds, what is timed is what every eager kernel pays
    before and after its work), timed ``repeat`` times; the median chain over ``kernels`` (the model's steps are
    reported by their median too). On CUDA the chain is timed from its first launch to its last kernel's end, so
    launch-bound chains measure the launch rate, as an eager model's small kernels meet it."""
    x = torch.ones(8, 8, device=device)
    w = torch.full((8, 8), 0.125, device=device)  # y @ w averages y's rows: the values stay bounded

    def chain() -> None:
        y = x
        for _ in range(kernels // 2):
            y = torch.mm(torch.add(y, 1.0), w)

    count = 2 * (kernels // 2)
    timings = time_steps(chain, device, warmup=2, repeat=repeat, on_step=on_step)
    method = (f"median of {repeat} chains of {count} tiny dependent kernels (8x8 fp32 add and matmul in turn), "
              f"per kernel")  # fmt: skip
    return OverheadMeasurement(timings.median_s / count, count, repeat, method)


@dataclass(frozen=True)
class RowsMeasurement:
    """FLOP/s of a GEMM through ``rows`` rows of a ``size`` x ``size`` matrix, and the rows at which the fitted
    saturation ``rate(r) = R · r / (r + half_rows)`` reaches half its large-matrix rate R (None: no saturation
    could be fitted)."""

    rows: tuple[int, ...]
    flops_per_s: tuple[float, ...]
    half_rows: float | None
    method: str


def fit_half_rows(rows: Sequence[int], flops_per_s: Sequence[float]) -> float | None:
    """``half_rows`` of ``rate(r) = R · r / (r + h)`` by least squares on its linear form 1/rate = 1/R + (h/R) /
    r (Lineweaver & Burk 1934, the same saturating law); None when the fit has no positive R and h."""
    xs, ys = [1.0 / r for r in rows], [1.0 / f for f in flops_per_s]
    n, mx, my = len(xs), sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    if n < 2 or sxx == 0:
        return None
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    intercept = my - slope * mx
    return slope / intercept if intercept > 0 and slope > 0 else None


def measure_gemm_rows(
    device: torch.device, dtype: str, size: int = 1024, rows: Sequence[int] = (1, 2, 4, 8, 16, 32, 64, 128, 256),
    repeat: int = 10, overhead_s: float = 0.0, on_step: StepCallback | None = None,
) -> RowsMeasurement:  # fmt: skip
    """Time ``r`` x ``size`` @ ``size`` x ``size`` for every ``r`` of ``rows`` (best of ``repeat``, less the
    per-kernel ``overhead_s``, which the time model counts apart) and fit the rows at which the rate reaches half
    its saturation (:func:`fit_half_rows`). The matrix (4 MiB in fp32) stays in cache, so the times are compute,
    not the memory traffic the time model counts apart too."""
    torch_dtype = DTYPES[dtype]
    b = torch.randn(size, size, device=device, dtype=torch.float32).to(torch_dtype)
    rates = []
    for i, r in enumerate(rows):
        a = torch.randn(r, size, device=device, dtype=torch.float32).to(torch_dtype)
        out = torch.empty(r, size, device=device, dtype=torch_dtype)

        def gemm(a: torch.Tensor = a, out: torch.Tensor = out) -> None:
            torch.matmul(a, b, out=out)

        best = min(time_steps(gemm, device, warmup=2, repeat=repeat).seconds)
        rates.append(2 * r * size * size / max(best - overhead_s, best / 2))
        if on_step:
            on_step("rows", i + 1, len(rows))
    half = fit_half_rows(rows, rates)
    fitted = f"{half:.3g} rows" if half is not None else "no saturation fitted"
    method = (
        f"best of {repeat} r x {size} @ {size} x {size} {dtype} GEMMs at r = {', '.join(map(str, rows))}, "
        f"less the kernel overhead; rate(r) = R r / (r + h) fitted by least squares on 1/rate: h = {fitted}"
    )
    return RowsMeasurement(tuple(rows), tuple(rates), half, method)
