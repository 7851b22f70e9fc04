"""The device a measurement runs on and what it says about memory: device resolution, torch's CPU threads, free and
total memory, the process's resident set size, and :func:`peak_memory`, the one way every run (bench, generation,
each torchrun rank) measures its peak and names the method.

Peak memory is measured as honestly as the device allows, and the method is part of the reading: on CUDA
``torch.cuda.max_memory_allocated`` after a reset (tensors only, not the allocator's cached-but-free blocks); on
the CPU the growth of the process's peak resident set size over a baseline taken after a page-in
run, a miniature of the same work, has made the kernels' code pages resident (they are hundreds of MiB of
libtorch, not the model's memory). The CPU figure includes allocator slack and anything else the process touches:
an upper bound. On glibc the slack is kept small: before the page-in, the allocator is told to serve every block of
128 KiB or more by ``mmap`` (``mallopt(M_MMAP_THRESHOLD, 128 KiB)``), so a freed tensor's pages go back to the
system at once. By default glibc raises that threshold each time such a block is freed (up to 32 MiB, its
``DEFAULT_MMAP_THRESHOLD_MAX`` on 64-bit), after which tensors below it come from the heap, whose freed pages stay
resident: measured on gpt2 (LoRA, seq_len 128, fp32) that slack was 13% of the step's peak and grew step by step.
The peak is the high-water mark reset at the baseline (``VmHWM`` after ``/proc/self/clear_refs``), where the
kernel allows it; else the lifetime ``ru_maxrss``, which also holds any transient before the baseline (with it, a CI
run under load read a LoRA step 46% over its prediction, the same step 5.6% over alone).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os
import platform
import resource
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

DTYPES: dict[str, torch.dtype] = {  # embedcalc's dtype names (embedcalc.config.dtypes) -> torch's
    "fp32": torch.float32,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
}
CUDA_METHOD = "torch.cuda.max_memory_allocated (tensors only, allocator cache excluded)"
RSS_METHOD = "peak RSS growth over a warmed-up baseline (ru_maxrss; includes allocator slack)"
RSS_METHOD_MMAP = "peak RSS growth over a warmed-up baseline (ru_maxrss; blocks of 128 KiB or more mmapped)"
# glibc's mallopt parameter number (malloc.h) and the threshold it is set to (glibc's own initial default)
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD_BYTES = 128 * 1024


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


def set_threads(threads: int | None) -> int:
    """Use ``threads`` CPU threads for torch's kernels (None: leave torch's choice); the count in effect."""
    if threads is not None:
        torch.set_num_threads(threads)
    return torch.get_num_threads()


def _meminfo_bytes(key: str) -> int:
    with open("/proc/meminfo", encoding="ascii") as fh:
        for line in fh:
            if line.startswith(f"{key}:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"cannot read {key} from /proc/meminfo")


def free_memory_bytes(device: torch.device) -> int:
    """Memory free for this run: CUDA ``mem_get_info`` free bytes, or MemAvailable from /proc/meminfo."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    return available_host_bytes()


def available_host_bytes() -> int:
    """This machine's available RAM (MemAvailable), whatever the device: what the ranks' processes share."""
    return _meminfo_bytes("MemAvailable")


def gpu_count() -> int:
    """CUDA devices torch sees (0 without CUDA)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def total_memory_bytes(device: torch.device) -> int:
    """The device's memory capacity: CUDA total memory, or MemTotal from /proc/meminfo."""
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory)
    return _meminfo_bytes("MemTotal")


def current_rss_bytes() -> int:
    """Resident set size of this process now (from /proc/self/statm)."""
    with open("/proc/self/statm", encoding="ascii") as fh:
        pages = int(fh.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE")


def reset_peak_rss() -> bool:
    """Reset this process's resident high-water mark to its current size (Linux >= 4.0: ``5`` written to
    ``/proc/self/clear_refs`` resets ``VmHWM``); True when done. Without it the peak is the process's lifetime
    one, and a transient earlier than the baseline (the model's build, an import) reads as the block's own."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
            fh.write("5")
    except OSError:
        return False
    return status_bytes("VmHWM") is not None


def status_bytes(field: str) -> int | None:
    """A size of /proc/self/status (``VmHWM``: the resident high-water mark since the last reset; ``RssFile``:
    the resident pages backed by files, the libraries' code among them), or None where there is none."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        return None
    return None


def peak_rss_bytes(reset: bool = False) -> int:
    """Peak resident set size of this process: since :func:`reset_peak_rss` when ``reset`` (``VmHWM``), else
    since it started (``ru_maxrss``, KiB on Linux). ``ru_maxrss`` is never lowered by a reset: the kernel folds
    the mark of every exited thread into it."""
    if reset and (hwm := status_bytes("VmHWM")) is not None:
        return hwm
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def release_freed_memory() -> bool:
    """On glibc, serve blocks of 128 KiB or more by ``mmap`` from now on, so that freeing a tensor returns its pages
    (the module docstring); True when set. A fixed threshold also stops glibc's dynamic raising of it."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    return bool(ctypes.CDLL(name).mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_BYTES))


@dataclass
class PeakMemory:
    """What :func:`peak_memory` read when its block ended: the peak in bytes and how it was measured."""

    bytes: int = 0
    method: str = ""


@contextmanager
def peak_memory(device: torch.device, page_in: Callable[[], object] | None = None) -> Iterator[PeakMemory]:
    """Measure the peak memory of the block (module docstring): on CUDA reset the peak statistics first; on the
    CPU run ``page_in`` (a miniature of the block's work) and take the RSS baseline after it. The reading is filled
    in when the block ends."""
    reading = PeakMemory()
    cuda = device.type == "cuda"
    released = False
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    else:
        released = release_freed_memory()
        if page_in is not None:
            page_in()
        gc.collect()
    baseline, file_baseline = current_rss_bytes(), status_bytes("RssFile")
    reset = not cuda and reset_peak_rss()
    yield reading
    if cuda:
        reading.bytes, reading.method = int(torch.cuda.max_memory_allocated(device)), CUDA_METHOD
        return
    method = (RSS_METHOD_MMAP if released else RSS_METHOD).replace(
        "ru_maxrss", "VmHWM reset at the baseline" if reset else "ru_maxrss"
    )
    # file-backed pages read back during the block (libtorch's code, evicted under memory pressure before the
    # baseline) are no memory of the model's: taken off, as the growth of RssFile from the baseline to the end
    file_end = status_bytes("RssFile")
    refaulted = max(0, file_end - file_baseline) if file_end is not None and file_baseline is not None else 0
    if refaulted >= 2**20:
        method += f", less {refaulted / 2**20:.0f} MiB of file-backed pages read back during it"
    reading.bytes, reading.method = max(0, peak_rss_bytes(reset) - baseline - refaulted), method
