"""``bench --peak --nproc N``: the all-reduce between N processes of this machine (gloo on the CPU, NCCL on
CUDA), timed at a small and a large message, for the ``local`` device's link.

The ranks are started by torchrun's launcher (:func:`embedcalc.modeling.launch.launch`, the path ``bench --nproc``
runs), on one node. Each rank times ``repeat`` all-reduces of a ``small_bytes`` and of a ``large_bytes`` float32
tensor, a barrier before each, after two untimed ones; the group's time of a call is the slowest rank's median.
What the α–β model makes of the two times is :mod:`embedcalc.reconcile.peak`'s.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass
from typing import Any

import torch

from embedcalc.modeling.launch import Rendezvous, launch


@dataclass(frozen=True)
class AllReduceMeasurement:
    """Seconds of one all-reduce over ``nproc`` ranks of this machine, small and large message."""

    nproc: int
    backend: str
    small_bytes: int
    small_s: float
    large_bytes: int
    large_s: float
    repeat: int


def _time_all_reduce(numel: int, repeat: int, device: torch.device) -> float:
    import torch.distributed as dist

    tensor = torch.ones(numel, dtype=torch.float32, device=device)
    seconds = []
    for i in range(repeat + 2):
        dist.barrier()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        dist.all_reduce(tensor)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if i >= 2:  # two untimed calls first: the connections are set up on the first
            seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def _rank(cuda: bool, small: int, large: int, repeat: int) -> dict[str, Any]:
    """One rank: its median seconds of the small and the large all-reduce."""
    import torch.distributed as dist

    if cuda:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    try:
        torch.set_num_threads(1)
        return {"small_s": _time_all_reduce(max(1, small // 4), repeat, device),
                "large_s": _time_all_reduce(max(1, large // 4), repeat, device)}  # fmt: skip
    finally:
        dist.destroy_process_group()


def measure_all_reduce(
    nproc: int, cuda: bool, small_bytes: int = 4, large_bytes: int = 64 << 20, repeat: int = 10
) -> AllReduceMeasurement:
    """The all-reduce of ``nproc`` ranks on this machine at ``small_bytes`` and ``large_bytes`` (module docstring)."""
    results = launch(_rank, (cuda, small_bytes, large_bytes, repeat), nproc, Rendezvous(),
                     f"embedcalc-loopback-{os.getpid()}")  # fmt: skip
    small = max(r["small_s"] for r in results.values())
    large = max(r["large_s"] for r in results.values())
    return AllReduceMeasurement(nproc, "nccl" if cuda else "gloo", 4 * max(1, small_bytes // 4), small,
                                4 * max(1, large_bytes // 4), large, repeat)  # fmt: skip
