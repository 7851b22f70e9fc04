"""``local``: this machine as ``embedcalc bench --peak`` measured it (DESIGN.md §10), cached in
``$XDG_CACHE_HOME/embedcalc/local.json``: building the :class:`~embedcalc.devices.catalogue.Device` from a measurement
(merged with the previous one of the same device), writing it atomically and reading it back. The device schema and
the shipped catalogue are :mod:`embedcalc.devices.catalogue`.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from embedcalc.devices.catalogue import (
    LOCAL,
    Device,
    Link,
    Measurement,
    PeakDtype,
    match_cuda_name,
    parse_device,
)
from embedcalc.devices.figures import ByteFigure, Figure, GemvFigure, LatencyFigure, RateFigure
from embedcalc.errors import ConfigError, UnsupportedEnvironmentError
from embedcalc.sources.parsing import load_mapping


def local_path() -> Path:
    """``$XDG_CACHE_HOME/embedcalc/local.json`` (default ``~/.cache/embedcalc/local.json``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "embedcalc" / "local.json"


def load_local() -> Device:
    path = local_path()
    if (
        os.path.lexists(path) and not path.is_file()
    ):  # a directory, FIFO, device or broken link: not "missing"
        raise UnsupportedEnvironmentError(
            f"--hardware local: {path} exists but is not a regular file (a directory, FIFO or broken link); "
            "remove it and run `embedcalc bench --peak` to measure this machine again",
            code="local_unreadable",
        )
    if not path.is_file():
        raise UnsupportedEnvironmentError(
            f"--hardware local: this machine has not been measured yet ({path} does not exist); "
            "run `embedcalc bench --peak` (and `--dtype bf16` for its bf16 peak) first",
            code="local_not_measured",
        )
    for _ in range(_EMPTY_RETRIES):  # a writer of an older embedcalc truncates before it writes: wait it out
        try:
            return parse_device(load_mapping(path), str(path))
        except ConfigError as exc:
            if exc.code != "file_empty":
                raise
            time.sleep(0.05)
    raise UnsupportedEnvironmentError(
        f"--hardware local: {path} is empty (a `bench --peak` was interrupted while writing it?); run "
        "`embedcalc bench --peak` again",
        code="local_not_measured",
    )


_EMPTY_RETRIES = 5


def local_device(
    device_name: str,
    kind: Literal["gpu", "cpu"],
    peaks: dict[PeakDtype, tuple[float, str]],
    memory_bytes: int,
    bandwidth: tuple[float, str],
    torch_version: str,
    previous: Device | None = None,
    kernel_overhead: tuple[float, str] | None = None,
    gemm_half_rows: tuple[float, str] | None = None,
    link: tuple[float, float, str] | None = None,
    gemv: dict[PeakDtype, tuple[list[float], str]] | None = None,
) -> Device:
    """The ``local`` device from a measurement (peaks: dtype -> (FLOP/s, how); the per-kernel overhead: (seconds,
    how); the GEMM rows at half rate: (rows, how); the loopback link between processes: (bytes/s per direction,
    hop latency, how); the GEMV rate: dtype -> (bytes/s through 1, 2, ... rows, how)), merged with ``previous``
    peaks and GEMV rates of other dtypes and its link when ``previous`` measured the same device; efficiencies
    against the matched catalogue entry."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    stamp = f"measured by `embedcalc bench --peak` on {now}, torch {torch_version}"
    figures: dict[PeakDtype, Figure] = {}
    interconnect = None
    gemv_rates: dict[PeakDtype, GemvFigure] = {}
    if previous is not None and previous.measured is not None and previous.measured.device == device_name:
        figures.update(previous.peak_flops_per_s)
        gemv_rates.update(previous.gemv_bytes_per_s)
        interconnect = previous.interconnect
    for dtype, (by_rows, how) in (gemv or {}).items():
        gemv_rates[dtype] = GemvFigure(value=by_rows[0], by_rows=by_rows, source=stamp, note=how)
    if link is not None:
        interconnect = Link(
            kind="loopback",
            per_direction_bytes_per_s=RateFigure(value=link[0], source=stamp, note=link[2]),
            latency_s=LatencyFigure(value=link[1], source=stamp, note=link[2]),
        )
    for dtype, (value, how) in peaks.items():
        figures[dtype] = Figure(value=value, source=stamp, note=how)
    match = match_cuda_name(device_name) if kind == "gpu" else None
    efficiency: dict[str, float] = {}
    if match is not None:
        efficiency["memory"] = bandwidth[0] / match.bandwidth
        for dtype, figure in figures.items():
            spec = match.peak(dtype)
            if spec:
                efficiency[dtype] = figure.value / spec
    return Device(
        name=LOCAL, title=device_name, vendor="local", kind=kind,
        peak_flops_per_s=figures,
        memory_bytes=ByteFigure(value=memory_bytes, source=stamp, note="total memory of the device"),
        memory_bandwidth_bytes_per_s=RateFigure(value=bandwidth[0], source=stamp, note=bandwidth[1]),
        kernel_overhead_s=None if kernel_overhead is None else LatencyFigure(
            value=kernel_overhead[0], source=stamp, note=kernel_overhead[1]),
        gemm_half_rows=None if gemm_half_rows is None else Figure(
            value=gemm_half_rows[0], source=stamp, note=gemm_half_rows[1]),
        gemv_bytes_per_s=gemv_rates,
        interconnect=interconnect,
        measured=Measurement(measured_at=now, torch_version=torch_version, device=device_name,
                             matches=match.name if match else None, efficiency=efficiency),
    )  # fmt: skip


def save_local(device: Device) -> Path:
    """Write ``device`` to the local cache atomically; returns the path. The text goes to a temporary file of a
    name no other writer uses (two `bench --peak` at once shared one and failed, issue 24), flushed to disk, then
    renamed over local.json: a reader sees the old file or the new one, never a part."""
    path = local_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(device.model_dump(mode="json", exclude_none=True), indent=2) + "\n"
    fd, tmp = tempfile.mkstemp(prefix=".local.", suffix=".json.tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


def previous_local() -> Device | None:
    """The cached ``local`` device, or None when there is none or it no longer validates."""
    try:
        return load_local()
    except (UnsupportedEnvironmentError, ConfigError):
        return None
