"""modeling/bandwidth.py's sizes and the GEMV rate (issue 35 item 7): STREAM's arrays and the GEMV's weights are
sized from the last-level cache as Linux lists it, and the GEMV rate counts exactly the bytes its sweep moves. No
speed is asserted: the machine is shared."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from embedcalc.modeling.bandwidth import (  # noqa: E402
    last_level_cache_bytes,
    measure_gemv_rate,
    stream_elements,
)

pytestmark = [pytest.mark.torch]


def _cache(root: Path, index: int, level: int, kind: str, size: str) -> None:
    d = root / f"index{index}"
    d.mkdir(parents=True)
    (d / "level").write_text(f"{level}\n")
    (d / "type").write_text(f"{kind}\n")
    (d / "size").write_text(f"{size}\n")


def test_the_last_level_cache_is_the_highest_data_or_unified_level(tmp_path: Path) -> None:
    _cache(tmp_path, 0, 1, "Data", "48K")
    _cache(tmp_path, 1, 1, "Instruction", "32K")
    _cache(tmp_path, 2, 2, "Unified", "2048K")
    _cache(tmp_path, 3, 3, "Unified", "307200K")  # this machine's Xeon: 300 MiB
    assert last_level_cache_bytes(torch.device("cpu"), tmp_path) == 307200 * 1024
    assert last_level_cache_bytes(torch.device("cpu"), tmp_path / "absent") is None
    (tmp_path / "index3" / "size").write_text("lots\n")
    assert last_level_cache_bytes(torch.device("cpu"), tmp_path) is None  # unreadable: unknown, not a guess


def test_stream_arrays_are_four_times_the_last_level_cache() -> None:
    assert stream_elements(False, None) == 1 << 25 and stream_elements(True, None) == 1 << 26
    assert stream_elements(False, 300 << 20) == 4 * (300 << 20) // 4  # 1200 MiB of float32
    assert stream_elements(True, 50 << 20) == 1 << 26  # a GPU's 50 MiB L2: 256 MiB arrays are already 4x
    # the three arrays take at most half the free memory, and never fall below the old fixed size
    assert stream_elements(False, 300 << 20, free_bytes=3 << 30) == (3 << 30) // 24
    assert stream_elements(False, 300 << 20, free_bytes=1 << 20) == 1 << 25


def test_gemv_rate_counts_the_bytes_its_sweep_moves() -> None:
    m = measure_gemv_rate(
        torch.device("cpu"), "bf16", max_rows=3, shape=(64, 32), repeat=2, total_bytes=40_000
    )
    assert m.matrices == math.ceil(40_000 / (64 * 32 * 2)) == 10  # whole bf16 matrices covering the total
    assert len(m.by_rows) == 3 and all(r > 0 for r in m.by_rows) and m.bytes_per_s == m.by_rows[0]
    assert m.dtype == "bf16" and (m.out_features, m.in_features, m.repeat) == (64, 32, 2)
    assert "F.linear of 1 to 3 bf16 rows through 10 distinct 64x32 weights" in m.method
    assert "median of 2 sweeps" in m.method
