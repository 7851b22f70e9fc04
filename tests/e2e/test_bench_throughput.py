"""benchmarks/bench_throughput.py runs: every table has a figure for each of its length pairs or says none, and a
row of each device plans (the ratios are the benchmark's output, never asserted: no speed in a test)."""

from __future__ import annotations

from paths import BENCHMARKS, load_script

bench = load_script("bench_throughput", BENCHMARKS)


def test_every_table_covers_the_lengths() -> None:
    assert all(len(figures) == len(bench.LENGTHS) for figures in bench.TABLES.values())
    assert sum(f is not None for figures in bench.TABLES.values() for f in figures) == 210


def test_a_row_of_each_device_and_model_plans() -> None:
    """Each device's first table and each MoE model's (their published config.json files read and planned)."""
    done: set[str] = set()
    for model, device, tp, dtype in bench.TABLES:
        if device not in done or (model in bench.MOE and model not in done):
            assert bench.predict(model, device, tp, dtype, 1000, 1000) > 0
            done |= {device, model}
    assert {"h100-sxm", "h200", "b200", "gb200"} | bench.MOE <= done
