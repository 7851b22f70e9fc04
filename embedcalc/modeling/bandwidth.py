"""Measured device-memory bandwidth: STREAM-style copy and triad kernels in torch (McCalpin 1995, "STREAM").

``copy``  c = a           reads n, writes n elements: 2 n × 4 bytes moved
``triad`` a = b + s · c   reads 2 n, writes n elements: 3 n × 4 bytes moved (torch.add(b, c, alpha=s, out=a))

Arrays are float32 and large enough to defeat the caches (by default 2**26 elements = 256 MiB each on a GPU, 2**25
= 128 MiB on the CPU, far beyond any last-level cache). Like STREAM, the best of ``repeat`` timed runs is
reported, and bytes count what the kernel must read and write (write-allocate traffic on CPUs is not added, as
STREAM does not). The bandwidth reported for the roofline is the larger of the two kernels.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from embedcalc.modeling.timing import StepCallback, time_steps

_ELEMENT_BYTES = 4


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


def measure_memory_bandwidth(
    device: torch.device,
    elements: int | None = None,
    repeat: int = 10,
    on_step: StepCallback | None = None,
) -> BandwidthMeasurement:
    """Time STREAM copy and triad on ``device`` (module docstring) and return bytes per second of each."""
    n = elements or (1 << 26 if device.type == "cuda" else 1 << 25)
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
