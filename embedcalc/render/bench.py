"""Tables for ``embedcalc bench``: timing, throughput, utilisation, memory measured vs predicted."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from embedcalc.reconcile.bench import BenchResult, MemoryMatrix
from embedcalc.reconcile.peak import PeakResult
from embedcalc.render import units
from embedcalc.render.fit import FitTable


def bench_table(result: BenchResult) -> Table:
    analysis, m = result.analysis, result.measurement
    w = analysis.workload
    title = (
        f"Benchmark — {analysis.target} on {m.device}: {w.mode}, {w.dtype}, attention {w.attention}, "
        f"batch {w.batch_size}, seq_len {w.seq_len}"
    )
    table = FitTable(title=escape(title), title_justify="left", caption=escape(
        "Achieved FLOP/s = analytic matmul FLOPs / median step time. "
        f"Peak: {m.peak_source}. Predicted: {m.prediction_note}. Memory measured by {m.peak_memory_method}."
    ))  # fmt: skip
    p, e = m.predicted, m.to_json()["error_pct"]
    step, rate = p["median_s"], p["tokens_per_s"]
    table.add_column("quantity")
    table.add_column("value", justify="right", prefer_whole=True)
    rows = [
        ("build (to_empty + cheap fill)", f"{m.build_s * 1000:.1f} ms"),
        ("latency median", f"{m.median_s * 1000:.2f} ms"),
        (
            "latency predicted",
            units.predicted(None if step is None else f"{step * 1000:.2f} ms", e["median_s"]),
        ),
        ("latency p10 / p90", f"{m.p10_s * 1000:.2f} / {m.p90_s * 1000:.2f} ms"),
        ("tokens/s", f"{m.tokens_per_s:,.0f}"),
        ("tokens/s predicted", units.predicted(None if rate is None else f"{rate:,.0f}", e["tokens_per_s"])),
        ("sequences/s", f"{m.sequences_per_s:,.2f}"),
        ("FLOPs per step (analytic)", units.count(m.flops_per_step)),
        ("achieved FLOP/s", units.si(m.achieved_flops_per_s, "FLOP/s")),
        ("measured matmul peak", units.si(m.peak_flops_per_s, "FLOP/s")),
        ("utilisation (of measured peak)", units.percent(m.utilization)),
    ]
    if m.spec_peak_flops_per_s and m.spec_utilization is not None:
        rows += [
            ("datasheet peak", units.si(m.spec_peak_flops_per_s, "FLOP/s")),
            ("utilisation (of datasheet peak)", units.percent(m.spec_utilization)),
        ]
    rows += [
        ("peak memory measured", f"{units.binary_bytes(m.peak_memory_bytes)} ({m.peak_memory_bytes:,} B)"),
        (
            "peak memory predicted",
            f"{units.binary_bytes(m.predicted_memory_bytes)} ({m.predicted_memory_bytes:,} B)",
        ),
        ("measured vs predicted", f"{m.memory_error_pct:+.1f}%" if m.memory_error_pct is not None else "—"),
        ("threads", str(m.threads)),
    ]
    if m.noise:
        rows.append(("[yellow]noise[/]", escape(m.noise)))
    for label, value in rows:
        table.add_row(label, value)
    return table


def peak_table(result: PeakResult) -> Table:
    table = FitTable(title=escape(f"Matmul peak — {result.device}, {result.dtype}"), title_justify="left")
    table.add_column("quantity")
    table.add_column("value", justify="right", whole=True)
    table.add_row(
        f"measured ({result.size}×{result.size} GEMM, best run)", units.si(result.peak_flops_per_s, "FLOP/s")
    )
    if result.spec_peak_flops_per_s:
        table.add_row("datasheet", units.si(result.spec_peak_flops_per_s, "FLOP/s"))
        table.add_row("source", escape(str(result.spec_peak_source)))
    return table


def memory_matrix_table(matrix: MemoryMatrix) -> Table:
    """Predicted vs measured peak memory of one training step, per attention × recompute setting."""
    rows = matrix.rows
    method = rows[0].peak_memory_method if rows else ""
    device = rows[0].device if rows else ""
    table = FitTable(
        title=escape(f"Training-step peak memory — {matrix.target} on {device}"), title_justify="left",
        caption=escape(f"Measured by {method}; predicted = weights + gradients + optimizer + saved activations."),
    )  # fmt: skip
    for name, justify in (("attention", "left"), ("recompute", "left"), ("predicted", "right"),
                          ("measured", "right"), ("error", "right")):  # fmt: skip
        table.add_column(name, justify=justify, whole=True)
    for r in rows:
        err = r.memory_error_pct
        table.add_row(
            r.attention,
            r.recompute,
            units.binary_bytes(r.predicted_memory_bytes),
            units.binary_bytes(r.peak_memory_bytes),
            f"{err:+.1f}%" if err is not None else "—",
        )
    return table
