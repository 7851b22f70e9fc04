"""The measured results handed to the renderer are frozen objects whose JSON is the contract of DESIGN.md §5
(issue 14, item 3): ``bench --peak``, ``bench --memory-matrix``, ``sweep --measure`` and verify's reconciliation.

Built by hand here (no torch, no timing): the keys and their order are the ones the CLI has always written, and
the tables are drawn from the objects on a fixed-width colourless console.
"""

from __future__ import annotations

import dataclasses
import io
import json

import pytest
from rich.console import Console
from rich.table import Table

from embedcalc.reconcile.attention_split import METHOD, AttentionSplit, SplitRow
from embedcalc.reconcile.bench import MemoryMatrix, MemoryMatrixRow
from embedcalc.reconcile.peak import LocalMeasurement, PeakResult
from embedcalc.reconcile.verify import reconcile
from embedcalc.render.bench import memory_matrix_table, peak_table
from embedcalc.render.hardware import local_summary
from embedcalc.render.tables import measure_table, reconcile_table

LOCAL = LocalMeasurement(
    memory_bandwidth_bytes_per_s=2.0e12, copy_bytes_per_s=2.0e12, triad_bytes_per_s=1.9e12,
    bandwidth_method="STREAM-style copy", kernel_overhead_s=4.5e-6, kernel_overhead_method="chain of tiny kernels",
    gemm_half_rows=None, gemm_rows_method=None, gemv_bytes_per_s=1.5e12, gemv_method="F.linear of one row",
    memory_bytes=80 * 2**30, catalogue_match="h100-sxm",
    efficiency={"memory": 0.6}, cached_as="local", cache_path="/cache/embedcalc/local.json",
)  # fmt: skip
PEAK = PeakResult(device="NVIDIA H100", dtype="bfloat16", size=8192, peak_flops_per_s=7.0e14,
                  spec_peak_flops_per_s=9.89e14, spec_peak_source="datasheet", local=LOCAL)  # fmt: skip
SPLIT = AttentionSplit(
    device="cpu", threads=2, method=METHOD, measured_crossover_seq_len=None, predicted_crossover_seq_len=384,
    points=(SplitRow(16, 1.8e-3, 0.4e-3, 1.4e-3, 0.22, 0.03), SplitRow(32, 2.0e-3, 0.5e-3, 1.5e-3, 0.25, 0.06)),
)  # fmt: skip


def text(table: Table) -> str:
    console = Console(file=io.StringIO(), width=120, color_system=None, force_terminal=False)
    console.print(table)
    return console.file.getvalue()  # type: ignore[attr-defined, no-any-return]


def test_results_are_frozen() -> None:
    for result in (PEAK, LOCAL, SPLIT, SPLIT.points[0]):
        with pytest.raises(dataclasses.FrozenInstanceError):
            result.device = "x"  # type: ignore[misc, union-attr]


def test_peak_json_keys_in_order() -> None:
    entry = PEAK.to_json()
    assert list(entry) == ["target", "measurement"] and entry["target"] is None
    assert list(entry["measurement"]) == [
        "device", "dtype", "size", "peak_flops_per_s", "spec_peak_flops_per_s", "spec_peak_source",
        "memory_bandwidth_bytes_per_s", "copy_bytes_per_s", "triad_bytes_per_s", "bandwidth_method",
        "kernel_overhead_s", "kernel_overhead_method", "gemm_half_rows", "gemm_rows_method", "gemv_bytes_per_s",
        "gemv_method", "memory_bytes",
        "catalogue_match", "efficiency", "cached_as", "cache_path",
    ]  # fmt: skip
    json.dumps(entry)  # plain JSON values only
    shown = text(peak_table(PEAK)) + text(local_summary(PEAK))
    assert "GEMV (bfloat16, one row, weights from memory)" in shown
    assert "8192×8192" in shown and "datasheet" in shown and "of h100-sxm datasheet (memory)" in shown


def test_memory_matrix_from_measurements() -> None:
    measurement = {"device": "cpu", "predicted_memory_bytes": 2048, "peak_memory_bytes": 3072,
                   "memory_error_pct": 50.0, "peak_memory_method": "peak RSS growth", "median_s": 1.0}  # fmt: skip
    matrix = MemoryMatrix("tiny", (MemoryMatrixRow.from_measurement("sdpa", "none", measurement),))
    assert matrix.to_json() == {"target": "tiny", "memory_matrix": [{
        "attention": "sdpa", "recompute": "none", "predicted_memory_bytes": 2048, "peak_memory_bytes": 3072,
        "memory_error_pct": 50.0, "peak_memory_method": "peak RSS growth", "device": "cpu",
    }]}  # fmt: skip
    shown = text(memory_matrix_table(matrix))
    assert "tiny on cpu" in shown and "+50.0%" in shown and "peak RSS growth" in shown


def test_attention_split_json() -> None:
    data = SPLIT.to_json()
    assert list(data) == ["device", "threads", "method", "points", "measured_crossover_seq_len",
                          "predicted_crossover_seq_len"]  # fmt: skip
    assert list(data["points"][0]) == ["seq_len", "full_s", "attention_s", "rest_s", "measured_attention_share",
                                       "predicted_attention_share"]  # fmt: skip
    assert json.loads(json.dumps(data)) == data  # plain JSON types only
    shown = text(measure_table("tiny", SPLIT))
    assert "not reached in the range" in shown and "n* = 384" in shown and "22.0%" in shown


def test_reconcile_table_totals_from_the_reconciliation() -> None:
    rec = reconcile({"embeddings": 100, "blocks": 900}, {"embeddings": 100, "blocks": 890, "extra": 5})
    shown = text(reconcile_table("Parameters", rec))
    assert "-10" in shown and "+5" in shown
    total = next(line for line in shown.splitlines() if "total" in line)
    assert "1,000" in total and "995" in total and "-5" in total
