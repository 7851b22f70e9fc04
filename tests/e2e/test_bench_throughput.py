"""benchmarks/bench_throughput.py runs: every table has a figure for each of its length pairs or says none, a row
of each device plans, and every DP x EP run plans as its layout with the KV holding its batch (the ratios are the
benchmark's output, never asserted: no speed in a test)."""

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


def test_every_dp_ep_run_plans_as_attention_dp_and_expert_parallel() -> None:
    """DeepSeek-R1's runs (B200 NVFP4 with an FP8 and a bf16 KV cache, H200 FP8): the DP 8 · EP 8 row exists, holds
    the run's per-rank batch in its KV cache (no reason against it) and has a throughput."""
    assert len(bench.DP_EP) == 3
    assert {(run.device, run.dtype, run.kv_dtype) for run in bench.DP_EP} == {
        ("b200", "nvfp4", "fp8"), ("b200", "nvfp4", "bf16"), ("h200", "fp8", "bf16")
    }  # fmt: skip
    for run in bench.DP_EP:
        assert run.concurrency == run.ranks * run.max_batch_size  # the runs fill every rank's batch
        assert bench.predict_dp_ep(run) > 0
