"""benchmarks/bench_throughput.py runs: every table has a figure for each of its length pairs or says none, a row
of each device plans, every DP x EP run plans as its layout with the KV holding its batch, and every column of the
stated-layout table plans as the layout it states (the ratios are the benchmark's output, never asserted: no speed in
a test)."""

from __future__ import annotations

import pytest
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


def test_every_stated_column_covers_the_lengths() -> None:
    assert all(len(figures) == len(bench.STATED_LENGTHS) for figures in bench.STATED.values())
    assert sum(f is not None for figures in bench.STATED.values() for f in figures) == 123
    kinds = [bench.stated_layout(layout)[0] for _, _, layout, _, _ in bench.STATED]
    assert kinds.count("DEP") == 12 and kinds.count("TP") == 12


def test_stated_dtypes_and_kv_dtypes_follow_the_page_and_the_checkpoints() -> None:
    """FP4 columns nvfp4 (NVIDIA's checkpoints) or the model's own mxfp4 (gpt-oss), FP8 columns fp8; the KV cache
    fp8 except gpt-oss on Hopper (the page's "Hopper: use auto": OpenAI's checkpoint quantizes no KV)."""
    for model, device, _, dtype, kv in bench.STATED:
        hopper = device in bench.HOPPER
        if model in bench.GPT_OSS:
            assert (dtype, kv) == ("mxfp4", "bf16" if hopper else "fp8")
        else:
            assert (dtype, kv) == ("fp8" if hopper else "nvfp4", "fp8")
        assert bench.other_kv(kv) != kv


@pytest.mark.slow  # 7 s: plans all 25 columns twice (the default suite stays under its 5 minutes)
def test_every_stated_column_plans_as_its_layout() -> None:
    """Each column's model, device and dtype plan the row of the layout it states (DEPn: DP n · EP n, one replica,
    TP 1; TPn: TP n), every model read (the gpt-oss-120b config among them) and the what-if KV dtype too on Hopper."""
    for model, device, layout, dtype, kv in bench.STATED:
        assert bench.predict_stated(model, device, layout, dtype, kv, 1024, 1024) > 0
    assert {m for m, *_ in bench.STATED} == {
        bench.DEEPSEEK, bench.GPT_OSS_120B, "gpt-oss-20b", "llama-3.1-70b", bench.MAVERICK, bench.QWEN3_235B,
        "qwen3-30b-a3b",
    }  # fmt: skip
    assert bench.predict_stated(bench.GPT_OSS_120B, "h100-sxm", "DEP4", "mxfp4", "fp8", 1024, 1024) > 0
