"""Roofline time (issue 11, part 2): the done-when decode check written independently from the parameter counts,
bounds, the exact mean over a generation, KV dtypes, capacity, training runs, parallelism and the CLI edges."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from paths import DOCS
from typer.testing import CliRunner

from embedcalc.analysis.memory import estimate_memory, kv_cache_bytes
from embedcalc.analysis.memory.capacity_search import kv_adjusted_total
from embedcalc.analysis.params import count_params, param_tensors
from embedcalc.analysis.roofline import Efficiency, decode_step_flops
from embedcalc.analysis.time.estimate import TimeRequest, _sum_max_affine, estimate_time
from embedcalc.analysis.workload import Parallelism, Workload
from embedcalc.cli.app import app
from embedcalc.devices.resolve import load_device
from embedcalc.sources.loading import load_target

runner = CliRunner()
H100_BW = 3.35e12
H100_BF16 = 989.4e12


def _json(*args: str) -> dict[str, Any]:
    result = runner.invoke(app, [*args, "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["results"][0]  # type: ignore[no-any-return]


def _estimate(target: str, **workload: Any) -> Any:
    config = load_target(target).config
    return config, estimate_time(config, Workload(**workload), TimeRequest(device=load_device("h100-sxm")))


def test_done_when_llama2_7b_decode_on_h100_is_weights_plus_kv_over_bandwidth() -> None:
    r = _json("analyze", "llama-2-7b", "--hardware", "h100-sxm", "--dtype", "bfloat16", "--gen-tokens", "128")
    time = r["time"]
    # independently, from the published shape (4096 wide, 32 layers, 32 KV heads of 128, vocab 32000) and count
    d, layers, kv, vocab = 4096, 32, 32 * 128, 32000
    params = 6_738_415_616
    assert r["params"]["total"] == params
    weights = (params - vocab * d + 1 * d) * 2  # every matrix, only the one looked-up row of the token table
    kv_len = 128 + 128
    kv_read = 2 * kv_len * layers * kv * 2  # K and V of every cached token, every layer, bf16
    assert time["decode_kv_len"] == kv_len
    decode = time["breakdown"]["decode"]
    assert sum(c["weight_bytes"] for c in decode.values()) == weights
    assert sum(c["kv_read_bytes"] for c in decode.values()) == kv_read == r["memory"]["kv_cache_bytes"]
    # nothing else moves in a decode step: one token's activations stay on chip, its K and V write is 1/n of the read
    assert sum(c["activation_bytes"] + c["kv_write_bytes"] for c in decode.values()) == 0
    # the formula; the bytes are exact integers, the seconds a sum of per-component quotients (rounding only)
    bound = time["lower_bound"]
    assert bound["decode_s_per_token"] == pytest.approx((weights + kv_read) / H100_BW, rel=1e-12, abs=0)
    # the expected time is never under the bound
    assert time["decode_s_per_token"] > bound["decode_s_per_token"]
    assert time["bound"]["decode"] == "memory"
    assert all(c["bound"] == "memory" for c in decode.values())


def test_prefill_at_4096_tokens_is_compute_bound() -> None:
    r = _json("analyze", "llama-2-7b", "--hardware", "h100-sxm", "--dtype", "bfloat16", "--seq-len", "4096")
    time = r["time"]
    assert time["bound"]["prefill"] == "compute"
    prefill = time["breakdown"]["prefill"]
    for key in (
        "decoder/attention/qkv",
        "decoder/attention/out",
        "decoder/ffn/in",
        "decoder/ffn/out",
    ):
        assert prefill[key]["bound"] == "compute", key
    # the LM head computes the last position's logits only (--logits last, as servers and generate do): one row
    # of d x vocab, a GEMV bound by the bytes of its weights; with --logits all, every position's
    assert prefill["head/lm"]["flops"] == 2 * 4096 * 32000 and prefill["head/lm"]["bound"] == "memory"
    every = _json("analyze", "llama-2-7b", "--hardware", "h100-sxm", "--dtype", "bfloat16", "--seq-len", "4096",
                  "--logits", "all")["time"]["breakdown"]["prefill"]  # fmt: skip
    assert (
        every["head/lm"]["flops"] == 4096 * prefill["head/lm"]["flops"]
        and every["head/lm"]["bound"] == "compute"
    )
    assert {k: v for k, v in every.items() if k != "head/lm"} == {
        k: v for k, v in prefill.items() if k != "head/lm"
    }
    _, est = _estimate("llama-2-7b", seq_len=4096, dtype="bf16")
    for c in est.lower_bound.phases["prefill"].components:
        if c.key in prefill and c.bound == "compute":
            assert c.time_s == pytest.approx(c.traffic.flops / H100_BF16)
    # ≈ 2 N tokens / peak
    assert time["lower_bound"]["prefill_s"] > 2 * 6_738_415_616 * 4096 / H100_BF16 * 0.99


def test_decode_step_flops_are_one_query_against_the_cache() -> None:
    config = load_target("llama-2-7b").config
    flops = decode_step_flops(config, Workload(batch_size=3, seq_len=100), 257)
    assert flops["decoder/attention/scores"] == 32 * 2 * 3 * 32 * 257 * 128
    assert flops["decoder/attention/qkv"] == 32 * 2 * 3 * 4096 * 3 * 4096
    assert flops["head/lm"] == 2 * 3 * 4096 * 32000
    mistral = load_target("mistral-7b").config  # sliding window 4096: a query sees at most 4096 keys
    window = mistral.sliding_window
    assert window is not None
    far = decode_step_flops(mistral, Workload(), window + 500)
    assert far["decoder/attention/scores"] == 32 * 2 * 32 * window * 128


@pytest.mark.parametrize(("target", "workload"), [
    ("llama-2-7b", {"dtype": "bfloat16", "seq_len": 64, "gen_tokens": 40, "batch_size": 4}),
    ("mistral-7b", {"dtype": "bfloat16", "seq_len": 4080, "gen_tokens": 30}),  # crosses the window
    ("t5-small", {"seq_len": 64, "tgt_len": 8, "gen_tokens": 20}),
])  # fmt: skip
def test_mean_over_the_generation_is_the_exact_sum(target: str, workload: dict[str, Any]) -> None:
    config, est = _estimate(target, **workload)
    w = Workload(**workload)
    prompt = w.tgt_len or w.seq_len
    steps = [
        estimate_time(config, replace(w, gen_tokens=k), TimeRequest(device=load_device("h100-sxm")))
        .phases["decode"].time_s
        for k in range(1, w.gen_tokens + 1)
    ]  # fmt: skip
    assert est.decode_kv_len == prompt + w.gen_tokens
    assert est.decode_total_s == pytest.approx(sum(steps), rel=1e-9)
    assert est.decode_s_per_token == pytest.approx(steps[-1], rel=1e-12)


def test_sum_of_max_of_affine_functions_matches_brute_force() -> None:
    f, g, span = (1.0, 9.0), (5.0, 2.0), 37
    brute = sum(
        max(f[0] + (f[1] - f[0]) * x / span, g[0] + (g[1] - g[0]) * x / span) for x in range(span + 1)
    )
    assert _sum_max_affine(span, f, g) == pytest.approx(brute)
    assert _sum_max_affine(0, (2.0, 2.0), (3.0, 3.0)) == 3.0


def test_kv_reads_equal_the_analytic_cache_for_every_architecture() -> None:
    for target, workload in (("t5-small", Workload(seq_len=50, tgt_len=7, gen_tokens=9, batch_size=2)),
                             ("mistral-7b", Workload(seq_len=4000, gen_tokens=300)),
                             ("gpt2", Workload(seq_len=20, gen_tokens=5, batch_size=3))):  # fmt: skip
        config, est = _estimate(target, **workload.as_dict() | {"parallel": Parallelism()})
        read = sum(c.traffic.kv_read_bytes for c in est.phases["decode"].components)
        assert read == kv_cache_bytes(config, workload), target


@pytest.mark.parametrize("kv_len", [256, 1000])
def test_kv_sharing_layers_read_the_cache_they_share(kv_len: int) -> None:
    """Gemma 3n: the last num_kv_shared_layers hold no cache (memory) but attend to the last non-shared layer of their
    type, so a decode step reads that layer's keys and values once more per shared layer (window-limited for the
    sliding ones): counted from the config.json's own layer_types, not from embedcalc's layer model."""
    path = Path(__file__).parents[1] / "fixtures" / "hf" / "gemma-3n-e2b.json"
    text = json.loads(path.read_text())["text_config"]
    workload = Workload(seq_len=kv_len - 1, gen_tokens=1, dtype="bf16")
    config, est = _estimate(str(path), **workload.as_dict() | {"parallel": Parallelism()})
    read = sum(c.traffic.kv_read_bytes for c in est.phases["decode"].components)
    shared = text["layer_types"][-text["num_kv_shared_layers"] :]
    tokens = sum(min(kv_len, text["sliding_window"]) if t == "sliding_attention" else kv_len for t in shared)
    per_token = text["num_key_value_heads"] * 2 * text["head_dim"] * 2  # K and V, bf16
    assert (
        read == kv_cache_bytes(config, replace(workload, seq_len=kv_len, gen_tokens=0)) + tokens * per_token
    )


def test_kv_dtype_halves_the_cache_in_memory_and_in_decode_bytes() -> None:
    base = _json(
        "analyze", "llama-2-7b", "--hardware", "h100-sxm", "--dtype", "bfloat16", "--gen-tokens", "128"
    )
    fp8 = _json("analyze", "llama-2-7b", "--hardware", "h100-sxm", "--dtype", "bfloat16", "--gen-tokens", "128",
                "--kv-dtype", "fp8")  # fmt: skip
    assert fp8["memory"]["kv_cache_bytes"] * 2 == base["memory"]["kv_cache_bytes"]
    assert (
        fp8["memory"]["total_bytes"] == base["memory"]["total_bytes"] - base["memory"]["kv_cache_bytes"] // 2
    )
    read = sum(c["kv_read_bytes"] for c in fp8["time"]["breakdown"]["decode"].values())
    assert read * 2 == sum(c["kv_read_bytes"] for c in base["time"]["breakdown"]["decode"].values())
    assert fp8["time"]["kv_dtype"] == "fp8" and fp8["time"]["max_batch_size"] > base["time"]["max_batch_size"]


def test_capacity_is_the_largest_that_fits() -> None:
    r = _json("analyze", "llama-2-7b", "--hardware", "a100-40gb", "--dtype", "bfloat16", "--seq-len", "1024",
              "--kv-dtype", "fp8")  # fmt: skip
    config = load_target("llama-2-7b").config
    w = Workload(dtype="bfloat16", seq_len=1024)
    batch = r["time"]["max_batch_size"]

    def total(trial: Workload) -> int:
        return kv_adjusted_total(estimate_memory(config, trial), trial, "fp8")

    assert total(replace(w, batch_size=batch)) <= 40 * 2**30 < total(replace(w, batch_size=batch + 1))
    limited = _json("analyze", "llama-2-7b", "--dtype", "bfloat16", "--max-memory", "14GiB")["time"]
    assert limited["memory_limit_source"] == "--max-memory" and limited["hardware"] is None
    context = limited["max_context"]
    assert limited["max_context_limited_by"] == "memory"
    assert estimate_memory(config, replace(w, seq_len=context, batch_size=1)).total_bytes <= 14 * 2**30
    assert estimate_memory(config, replace(w, seq_len=context + 1, batch_size=1)).total_bytes > 14 * 2**30


def test_training_run_wall_time_device_hours_and_cost() -> None:
    r = _json("analyze", "llama-2-7b", "--hardware", "h100-sxm", "--dtype", "bfloat16", "--mode", "training",
              "--seq-len", "4096", "--batch-size", "2", "--train-tokens", "2T", "--devices", "256",
              "--price-per-hour", "2.5", "--efficiency", "0.4")  # fmt: skip
    time, run = r["time"], r["time"]["train"]
    assert run["tokens"] == 2 * 10**12 and run["devices"] == 256 and run["tokens_per_step"] == 2 * 4096 * 256
    assert run["wall_s"] == pytest.approx(2e12 / run["tokens_per_step"] * time["step_s"])
    assert run["device_hours"] == pytest.approx(run["wall_s"] * 256 / 3600)
    assert run["cost"] == pytest.approx(run["device_hours"] * 2.5)
    six_nd = 3 * r["flops"]["forward"] / (2 * 4096) * 2e12 / (256 * H100_BF16 * 0.4)  # 6 N D / (K peak MFU)
    assert six_nd <= run["wall_s"] < 1.3 * six_nd
    assert "optimizer" in time["breakdown"]["training_step"]


def test_tensor_parallel_halves_the_weights_each_device_reads() -> None:
    one = _json("analyze", "llama-2-7b", "--hardware", "h100-sxm", "--dtype", "bfloat16", "--gen-tokens", "8")
    two = _json("analyze", "llama-2-7b", "--hardware", "h100-sxm", "--dtype", "bfloat16", "--gen-tokens", "8",
                "--tp", "2")  # fmt: skip
    ratio = (
        two["time"]["lower_bound"]["decode_s_per_token"] / one["time"]["lower_bound"]["decode_s_per_token"]
    )
    assert 0.5 <= ratio < 0.51  # norms are replicated


def test_efficiency_scales_time_and_encoders_have_a_forward() -> None:
    full = _json("analyze", "bert-base", "--hardware", "l4", "--efficiency", "1")["time"]
    half = _json("analyze", "bert-base", "--hardware", "l4", "--efficiency", "0.5")["time"]
    kernels = "kernels at the achieved fractions of peak"
    assert half["terms"]["forward"][kernels] == pytest.approx(2 * full["terms"]["forward"][kernels])
    assert half["terms"]["forward"]["kernel overhead"] == full["terms"]["forward"]["kernel overhead"]
    assert full["terms"]["forward"][kernels] == pytest.approx(full["lower_bound"]["forward_s"])
    assert half["lower_bound"] == full["lower_bound"]  # the bound stays at peak
    assert full["decode_s_per_token"] is None
    assert set(full["breakdown"]) == {"forward"}


def test_table_output_and_compare() -> None:
    result = runner.invoke(app, ["analyze", "gpt2", "--hardware", "h100-sxm", "--gen-tokens", "16"],
                           env={"COLUMNS": "200"})  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "Roofline, decode" in result.stdout and "time to first token" in result.stdout
    both = runner.invoke(app, ["compare", "gpt2", "gpt2-medium", "--hardware", "mi300x", "--format", "json"])
    assert both.exit_code == 0, both.output
    assert all(r["time"]["hardware"] == "mi300x" for r in json.loads(both.stdout)["results"])


def test_cli_edges(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cases = [
        (["analyze", "gpt2", "--hardware", "local"], 4, "bench --peak"),
        (["analyze", "gpt2", "--hardware", "h100-sxm", "--efficiency", "measured"], 4, "bench --peak"),
        (["analyze", "gpt2", "--hardware", "h100-sxm", "--efficiency", "1.5"], 2, "[0.0001, 1]"),
        (["analyze", "gpt2", "--train-tokens", "1T"], 2, "--hardware"),
        (["analyze", "gpt2", "--hardware", "nope"], 2, "no such device"),
        (["analyze", "gpt2", "--hardware", "tpu-v5e"], 4, "no fp32 peak"),
    ]
    for args, code, words in cases:
        result = runner.invoke(app, args)
        assert result.exit_code == code, (args, result.output)
        assert words in result.stderr, (args, result.stderr)


def test_measured_efficiency_from_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from embedcalc.devices.local import local_device, save_local

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    save_local(local_device("NVIDIA H100 80GB HBM3", "gpu", {"bf16": (0.5 * H100_BF16, "matmul")}, 80 * 2**30,
                            (0.8 * H100_BW, "stream"), "2.5.0"))  # fmt: skip
    r = _json("analyze", "gpt2", "--hardware", "h100-sxm", "--dtype", "bfloat16", "--efficiency", "measured")
    assert r["time"]["efficiency"]["compute"] == pytest.approx(0.5)
    assert r["time"]["efficiency"]["memory"] == pytest.approx(0.8)
    local = _json("analyze", "gpt2", "--hardware", "local", "--dtype", "bfloat16")["time"]
    assert local["peak_flops_per_s"] == pytest.approx(0.5 * H100_BF16)


def test_efficiency_is_a_plain_fraction() -> None:
    assert Efficiency().compute == 1.0
    _, est = _estimate("gpt2")
    assert est.to_json()["efficiency"]["source"].startswith("calibration")
    assert count_params(load_target("gpt2").config).total == 124_439_808


def test_sweep_times_each_point_and_draws_the_roofline(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    plot = tmp_path / "s.png"
    result = runner.invoke(app, ["sweep", "gpt2", "--seq-len", "128,1024", "--hardware", "h100-sxm",
                                 "--plot", str(plot), "--format", "json"])  # fmt: skip
    assert result.exit_code == 0, result.output
    points = json.loads(result.stdout)["results"][0]["points"]
    single = _json("analyze", "gpt2", "--seq-len", "1024", "--hardware", "h100-sxm")["time"]
    assert points[1]["time"]["prefill_s"] == pytest.approx(single["prefill_s"])
    assert plot.is_file() and (tmp_path / "s.roofline.png").stat().st_size > 1000


@pytest.mark.parametrize("target", ["deepseek-v3", "gemma-2-9b", "gpt-oss-20b", "mixtral-8x7b"])
def test_layer_model_decode_reads_the_cache_the_memory_model_holds_and_only_the_routed_experts(
    target: str,
) -> None:
    r = _json("analyze", target, "--hardware", "h100-sxm", "--dtype", "bfloat16", "--seq-len", "8192",
              "--gen-tokens", "128")  # fmt: skip
    decode = r["time"]["breakdown"]["decode"]
    # MLA's compressed cache, per-layer windows: the same bytes the memory estimate holds at that length
    assert sum(c["kv_read_bytes"] for c in decode.values()) == r["memory"]["kv_cache_bytes"]
    experts = [c["weight_bytes"] for k, c in decode.items() if k.endswith("/moe/experts")]
    if experts:  # batch 1: top_k of the experts per layer, not all of them
        config = load_target(target).config
        moe = next(b.ffn for b in config.named_blocks.values() if b.ffn.moe)
        every = sum(t.numel for t in param_tensors(config) if t.key.endswith("/moe/experts")) * 2
        assert sum(experts) == every * moe.top_k // moe.num_experts


def test_the_time_page_example_numbers() -> None:
    """docs/concepts/time.md (the time model): the llama-2-7b example's printed numbers, from the same command."""
    args = ("analyze", "llama-2-7b", "--hardware", "h100-sxm", "--dtype", "bfloat16", "--gen-tokens", "128")
    time = _json(*args)["time"]
    bound = time["lower_bound"]
    page = (DOCS / "concepts" / "time.md").read_text(encoding="utf-8")
    shown = {  # the expected time, the bound in brackets
        "prefill (time to first token)                6.78 ms (bound 4.17 ms)":
            f"{time['prefill_s'] * 1e3:.2f} ms (bound {bound['prefill_s'] * 1e3:.2f} ms)",
        "decode per token at KV length 256            6.29 ms (bound 3.98 ms)":
            f"{time['decode_s_per_token'] * 1e3:.2f} ms (bound {bound['decode_s_per_token'] * 1e3:.2f} ms)",
        "decode tokens/s per sequence                 159.4 tokens/s (bound 251.6 tokens/s)":
            f"{time['decode_tokens_per_s']:.1f} tokens/s (bound {bound['decode_tokens_per_s']:.1f} tokens/s)",
        "largest batch in 80.00 GiB, h100-sxm memory  500": str(time["max_batch_size"]),
    }  # fmt: skip
    for line, value in shown.items():
        assert line in page and line.endswith(value), (line, value)
