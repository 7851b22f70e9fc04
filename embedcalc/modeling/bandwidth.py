"""Measured device-memory bandwidth: STREAM-style copy and triad kernels in torch (McCalpin 1995, "STREAM"), and
the bytes per second a one-row matmul (a decode step's GEMV) reaches reading weights from that memory.

``copy``  c = a           reads n, writes n elements: 2 n × 4 bytes moved
``triad`` a = b + s · c   reads 2 n, writes n elements: 3 n × 4 bytes moved (torch.add(b, c, alpha=s, out=a))

Arrays are float32 and large enough to defeat the caches: STREAM's rule, each array at least four times the
last-level cache (:func:`last_level_cache_bytes`), and at least 2**26 elements = 256 MiB on a GPU, 2**25 = 128 MiB
on the CPU. (A server CPU's last-level cache is hundreds of MiB: this machine's Xeon reports 300 MiB, which held
the old fixed 128 MiB arrays, so the "memory" bandwidth was partly the cache's.) Like STREAM, the best of
``repeat`` timed runs is reported, and bytes count what the kernel must read and write (write-allocate traffic on
CPUs is not added, as STREAM does not). The bandwidth reported for the roofline is the larger of the two kernels.

The GEMV rate (:func:`measure_gemv_rate`) is what the kernel a batch-1 decode runs reaches: ``F.linear`` of one
row through a sweep of distinct weight matrices whose total is at least twice the last-level cache, so every
weight comes from memory as a decode step's do. On a CPU it is far below STREAM: a GEMV reads its matrix once in
the kernel's own blocking, with the threads splitting the rows and meeting at a barrier per call, where STREAM
streams one contiguous array (measured here, 2 threads, fp32: see docs/concepts/time.md).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from embedcalc.modeling.device import DTYPES, free_memory_bytes
from embedcalc.modeling.timing import StepCallback, time_steps

_ELEMENT_BYTES = 4
_CPU_CACHE_DIR = Path("/sys/devices/system/cpu/cpu0/cache")


def _sysfs_size(text: str) -> int:
    """A sysfs cache size (``307200K``, ``32M``, ``512``) in bytes."""
    text = text.strip()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
    return int(text.rstrip("KMGkmg")) * scale


def last_level_cache_bytes(device: torch.device, cache_dir: Path = _CPU_CACHE_DIR) -> int | None:
    """The device's last-level cache in bytes: a GPU's L2 (torch's device properties); a CPU's highest-level cache
    as Linux lists it under ``cache_dir`` (sysfs); None where neither says."""
    if device.type == "cuda":
        return int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0)) or None
    best: tuple[int, int] | None = None
    try:
        for index in cache_dir.glob("index*"):
            kind = (index / "type").read_text().strip()
            if kind in ("Data", "Unified"):
                level = int((index / "level").read_text())
                size = _sysfs_size((index / "size").read_text())
                best = max(best or (level, size), (level, size))
    except (OSError, ValueError):
        return None
    return None if best is None else best[1]


@dataclass(frozen=True)
class BandwidthMeasurement:
    """Bytes per second of the copy and triad kernels, the best of ``repeat`` runs each."""

    copy_bytes_per_s: float
    triad_bytes_per_s: float
    elements: int
    repeat: int
    torch_version: str = torch.__version__

    @property
    def bytes_per_s(self) -> float:
        """The bandwidth the roofline uses: the better of the two kernels."""
        return max(self.copy_bytes_per_s, self.triad_bytes_per_s)

    @property
    def method(self) -> str:
        mib = self.elements * _ELEMENT_BYTES // (1 << 20)
        copy, triad = self.copy_bytes_per_s / 1e9, self.triad_bytes_per_s / 1e9
        return f"STREAM-style copy {copy:,.1f} GB/s, triad {triad:,.1f} GB/s; best of {self.repeat} on {mib} MiB arrays"


def stream_elements(cuda: bool, cache_bytes: int | None, free_bytes: int | None = None) -> int:
    """float32 elements per STREAM array (module docstring): four times the last-level cache, but the three arrays
    in at most half of ``free_bytes``; at least 2**26 on a GPU and 2**25 on a CPU."""
    want = 4 * (cache_bytes or 0) // _ELEMENT_BYTES
    if free_bytes is not None:
        want = min(want, free_bytes // (2 * 3 * _ELEMENT_BYTES))
    return max(1 << 26 if cuda else 1 << 25, want)


def measure_memory_bandwidth(
    device: torch.device,
    elements: int | None = None,
    repeat: int = 10,
    on_step: StepCallback | None = None,
) -> BandwidthMeasurement:
    """Time STREAM copy and triad on ``device`` (module docstring) and return bytes per second of each."""
    n = elements or stream_elements(
        device.type == "cuda", last_level_cache_bytes(device), free_memory_bytes(device)
    )
    a = torch.empty(n, device=device, dtype=torch.float32)
    b = torch.ones(n, device=device, dtype=torch.float32)
    c = torch.full((n,), 2.0, device=device, dtype=torch.float32)
    a.zero_()  # touch every page before timing

    def copy() -> None:
        c.copy_(a)

    def triad() -> None:
        torch.add(b, c, alpha=3.0, out=a)

    def best(kernel: Callable[[], None], moved: int) -> float:
        timings = time_steps(kernel, device, warmup=2, repeat=repeat, on_step=on_step)
        return moved / min(timings.seconds)

    with torch.inference_mode():
        copy_bw = best(copy, 2 * n * _ELEMENT_BYTES)
        triad_bw = best(triad, 3 * n * _ELEMENT_BYTES)
    return BandwidthMeasurement(copy_bw, triad_bw, n, repeat)


@dataclass(frozen=True)
class GemvMeasurement:
    """Bytes per second of matmuls through 1, 2, ... ``len(by_rows)`` rows reading weights from memory: the median
    sweep over ``matrices`` distinct ``out_features`` x ``in_features`` weights of ``dtype``, less the per-kernel
    overhead."""

    by_rows: tuple[float, ...]
    dtype: str
    out_features: int
    in_features: int
    matrices: int
    repeat: int
    cache_bytes: int | None

    @property
    def bytes_per_s(self) -> float:
        """The rate through one row (a batch-1 decode's GEMV)."""
        return self.by_rows[0]

    @property
    def method(self) -> str:
        size = torch.empty(0, dtype=DTYPES[self.dtype]).element_size()
        total = self.matrices * self.out_features * self.in_features * size
        cache = "unknown" if self.cache_bytes is None else f"{self.cache_bytes / (1 << 20):,.0f} MiB"
        rates = ", ".join(f"{r / 1e9:,.2f}" for r in self.by_rows)
        return (f"F.linear of 1 to {len(self.by_rows)} {self.dtype} rows through {self.matrices} distinct "
                f"{self.out_features}x{self.in_features} weights ({total / (1 << 20):,.0f} MiB, last-level cache "
                f"{cache}), median of {self.repeat} sweeps, less the per-kernel overhead: {rates} GB/s")  # fmt: skip


def measure_gemv_rate(
    device: torch.device, dtype: str, overhead_s: float = 0.0, max_rows: int = 1,
    shape: tuple[int, int] = (4096, 1024), repeat: int = 7, total_bytes: int | None = None,
    on_step: StepCallback | None = None,
) -> GemvMeasurement:  # fmt: skip
    """Time ``F.linear(x, W)`` of ``r`` rows ``x`` (r = 1 ... ``max_rows``) through distinct ``shape`` (out x in,
    an FFN up-projection's layout as nn.Linear stores it) weights totalling ``total_bytes`` (default: twice the
    last-level cache, within a quarter of the free memory, at least 256 MiB), once each per sweep; bytes per second
    of the weights, input and output rows read and written, with ``overhead_s`` per kernel taken off (the time
    model counts it apart) but never more than half the sweep. The rows matter on a CPU: a BLAS runs one row as a
    GEMV and a few as a GEMM that first packs the weights (measured on this VM, one thread: 11-14 GB/s through 1 to
    3 rows, 6-7 GB/s through 4)."""
    torch_dtype = DTYPES[dtype]
    out_features, in_features = shape
    size = torch.empty(0, dtype=torch_dtype).element_size()
    cache = last_level_cache_bytes(device)
    if total_bytes is None:  # twice the cache, in at most a quarter of the free memory
        total_bytes = max(min(2 * (cache or 0), free_memory_bytes(device) // 4), 256 << 20)
    matrices = max(1, math.ceil(total_bytes / (out_features * in_features * size)))
    weights = [torch.randn(out_features, in_features, device=device).to(torch_dtype) for _ in range(matrices)]
    rates = []
    for r in range(1, max(max_rows, 1) + 1):
        x = torch.randn(r, in_features, device=device).to(torch_dtype)

        def sweep(x: torch.Tensor = x) -> None:
            for w in weights:
                F.linear(x, w)

        with torch.inference_mode():
            timings = time_steps(sweep, device, warmup=1, repeat=repeat, on_step=on_step)
        seconds = statistics.median(timings.seconds)
        seconds = max(seconds - matrices * overhead_s, seconds / 2)
        rates.append(
            matrices * (out_features * in_features + r * (in_features + out_features)) * size / seconds
        )
    return GemvMeasurement(tuple(rates), dtype, out_features, in_features, matrices, repeat, cache)
