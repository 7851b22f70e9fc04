"""The expected-time model's structure (issue 20): each term appears where it should, scales as it should and
vanishes where it should; the schedule's integers are exact. No speed is asserted: the fitted constants may move."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
import yaml
from paths import ROOT
from typer.testing import CliRunner

from embedcalc.analysis.comm.volumes import Collective
from embedcalc.analysis.time.comm import Path as LinkPath
from embedcalc.analysis.time.comm import (
    collective_s,
    collectives_s,
    group_span,
    link_path,
    ring_rails,
    ring_steps,
)
from embedcalc.analysis.time.model import kernels_per_forward, parse_efficiency
from embedcalc.analysis.time.schedule import bubble_fraction
from embedcalc.analysis.workload import Parallelism, Workload
from embedcalc.cli.app import app
from embedcalc.config.limits import efficiency_problem
from embedcalc.devices.calibration import TimeConstants, load_calibration
from embedcalc.devices.resolve import load_device
from embedcalc.sources.loading import load_target

runner = CliRunner()
TP_COMM = "tensor/expert-parallel communication"
GPT3 = ("analyze", "gpt3-175b", "--mode", "training", "--hardware", "a100-80gb", "--dtype", "bf16", "--seq-len",
        "2048", "--tp", "8", "--pp", "8", "--dp", "16", "--batch-size", "1", "--global-batch", "1536",
        "--train-tokens", "300B")  # fmt: skip


def _time(*args: str) -> dict[str, Any]:
    result = runner.invoke(app, [*args, "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["results"][0]  # type: ignore[no-any-return]


def _decode(tp: int) -> dict[str, Any]:
    return _time("analyze", "llama-2-7b", "--hardware", "a100-80gb", "--dtype", "bf16", "--tp", str(tp),
                 "--seq-len", "5", "--gen-tokens", "8")["time"]  # fmt: skip


def test_tensor_parallel_communication_is_zero_at_tp1_and_grows_with_tp() -> None:
    comm = [_decode(tp)["terms"]["decode"][TP_COMM] for tp in (1, 2, 4, 8)]
    assert comm[0] == 0
    assert 0 < comm[1] < comm[2] < comm[3]


def test_every_expected_time_is_at_least_its_lower_bound() -> None:
    for tp in (1, 8):
        t = _decode(tp)
        for key in ("prefill_s", "decode_s_per_token", "total_generation_s"):
            assert t[key] >= t["lower_bound"][key], (tp, key)
        assert t["decode_tokens_per_s"] <= t["lower_bound"]["decode_tokens_per_s"]


def test_training_schedule_accumulation_bubble_and_recompute() -> None:
    full = _time(*GPT3, "--recompute", "full")
    none = _time(*GPT3, "--recompute", "none")
    schedule = full["time"]["schedule"]
    assert schedule["accumulation_steps"] == 1536 // (1 * 16) == 96
    assert schedule["bubble_fraction"] == pytest.approx(7 / (96 + 7))
    terms = full["time"]["terms"]["training_step"]
    assert terms["pipeline bubble"] > 0 and terms[TP_COMM] > 0 and terms["pipeline sends"] > 0
    # recompute adds exactly one forward's FLOPs per micro-batch: 4 passes' worth instead of 3
    flops = {name: sum(c["flops"] for c in r["time"]["breakdown"]["training_step"].values())
             for name, r in (("full", full), ("none", none))}  # fmt: skip
    assert flops["full"] * 3 == flops["none"] * 4
    assert none["time"]["step_s"] < full["time"]["step_s"]
    assert none["time"]["train"]["wall_s"] < full["time"]["train"]["wall_s"]
    # memory is the micro-batch's, whatever the global batch
    alone = _time(*[a for a in GPT3 if a not in ("--global-batch", "1536")], "--recompute", "none")
    assert alone["memory"] == none["memory"]
    assert full["time"]["train"]["tokens_per_step"] == 1536 * 2048


def test_bubble_vanishes_without_a_pipeline() -> None:
    r = _time("analyze", "gpt2", "--mode", "training", "--hardware", "a100-40gb", "--dtype", "bf16", "--dp", "8",
              "--batch-size", "12", "--global-batch", "480")  # fmt: skip
    t = r["time"]
    assert t["schedule"] == {"accumulation_steps": 5, "global_batch": 480, "bubble_fraction": 0.0}
    assert t["terms"]["training_step"]["pipeline bubble"] == 0
    assert t["terms"]["training_step"]["pipeline sends"] == 0
    assert t["terms"]["training_step"][TP_COMM] == 0
    assert bubble_fraction(1, 7) == 0 and bubble_fraction(4, 4) == pytest.approx(3 / 7)


@pytest.mark.parametrize(("args", "words"), [
    (("--global-batch", "1000"), "--global-batch 1000 must be a multiple of --batch-size 1 × --dp 16 = 16"),
    (("--global-batch", "8"), "must be a multiple"),
])  # fmt: skip
def test_a_global_batch_that_is_not_whole_micro_batches_is_a_usage_error(
    args: tuple[str, ...], words: str
) -> None:
    base = [a for a in GPT3 if a not in ("--global-batch", "1536")]
    result = runner.invoke(app, [*base, *args])
    assert result.exit_code == 2, result.output
    assert words in result.stderr and "--global-batch" in result.stderr


def test_global_batch_needs_training_and_hardware() -> None:
    inference = runner.invoke(app, ["analyze", "gpt2", "--hardware", "h100-sxm", "--global-batch", "8"])
    assert inference.exit_code == 2 and "--mode training" in inference.stderr
    no_device = runner.invoke(app, ["analyze", "gpt2", "--mode", "training", "--global-batch", "8"])
    assert no_device.exit_code == 2 and "--hardware" in no_device.stderr


def test_efficiency_one_number_or_one_per_roof() -> None:
    assert parse_efficiency("0.6", efficiency_problem).compute == 0.6
    both = parse_efficiency("compute=0.55,memory=0.8", efficiency_problem)
    assert (both.compute, both.memory) == (0.55, 0.8)
    assert parse_efficiency("memory=0.5", efficiency_problem).compute == 1.0
    for bad in ("speed=0.5", "compute=2", "0"):
        with pytest.raises(ValueError):
            parse_efficiency(bad, efficiency_problem)
    r = _time("analyze", "gpt2", "--hardware", "h100-sxm", "--efficiency", "compute=0.55,memory=0.8")
    assert r["time"]["efficiency"]["compute"] == 0.55 and r["time"]["model"]["efficiency_override"]


def test_alpha_beta_collectives() -> None:
    c = TimeConstants(
        **{**load_calibration().constants.__dict__, "collective_base_s": 1e-5, "link_fraction": 0.5}
    )
    path = LinkPath("nvlink", 100e9, 1e-6)
    one = Collective("all-reduce", "tp", 1, "x", 3, 10**6)
    assert collective_s(one, path, c) == 0
    eight = Collective("all-reduce", "tp", 8, "x", 2, 8 * 10**6)
    assert ring_steps(eight) == 14
    assert collective_s(eight, path, c) == pytest.approx(2 * (1e-5 + 14e-6) + eight.wire_bytes / 50e9)
    # a data-parallel group beyond the 8-GPU node is limited by the network, a TP group of 8 is not
    a100 = load_device("a100-80gb")
    par = Parallelism(tp=8, dp=16)
    dp = Collective("all-reduce", "dp", 16, "grads", 1, 1)
    assert group_span(dp, par) == 128 and group_span(eight, par) == 8
    assert link_path(a100, 8, c).name == "nvlink"  # type: ignore[union-attr]
    assert link_path(a100, 128, c).name == "infiniband"  # type: ignore[union-attr]


@pytest.mark.parametrize(("tp", "rails"), [(1, 8), (2, 4), (4, 2), (8, 1)])
def test_a_ring_across_nodes_runs_on_the_nics_its_members_in_a_node_have(tp: int, rails: int) -> None:
    """NCCL's ring bus bandwidth is nChannels × the per-channel inter-node bandwidth: a data-parallel ring with
    8 / tp members in each 8-GPU H100 node runs on that many 50 GB/s NICs at once (at most NVLink's 450 GB/s);
    beside TP 8 it has one member per node and one NIC. Sends and all-to-alls keep one NIC."""
    c = load_calibration().constants
    h100 = load_device("h100-sxm")
    assert h100.interconnect is not None and h100.network is not None
    nic = h100.network.per_direction_bytes_per_s.value
    nvlink = h100.interconnect.per_direction_bytes_per_s.value
    par = Parallelism(tp=tp, dp=64 // tp)
    gather = Collective("all-gather", "dp", 64 // tp, "weights", 1, 10**9)
    assert ring_rails(gather, par, h100) == rails
    path = link_path(h100, group_span(gather, par), c, rails)
    assert path is not None and path.bandwidth_bytes_per_s == min(rails * nic, nvlink)
    alone = link_path(h100, group_span(gather, par), c)
    assert alone is not None and alone.bandwidth_bytes_per_s == nic
    bytes_s = (
        collectives_s([gather], h100, par, c) - c.collective_base_s - (64 // tp - 1) * path.hop_latency_s
    )
    assert bytes_s == pytest.approx(gather.wire_bytes / (min(rails * nic, nvlink) * c.link_fraction))
    for other in (
        Collective("send", "pp", 2, "acts", 1, 10**6),
        Collective("all-to-all", "dp", 64 // tp, "x", 1, 1),
    ):
        assert ring_rails(other, par, h100) == 1
    # a group inside one node never reaches the network: its rails do not matter
    assert (
        ring_rails(Collective("all-gather", "dp", 8 // tp, "w", 1, 1), Parallelism(tp=tp, dp=8 // tp), h100)
        >= 1
    )


def _fsdp_exposed(gpus: int) -> float:
    r = _time("analyze", "llama-2-7b", "--hardware", "h100-sxm", "--mode", "training", "--dtype", "bf16",
              "--seq-len", "2048", "--dp", str(gpus), "--zero", "3", "--batch-size", "2",
              "--global-batch", str(2 * gpus))  # fmt: skip
    return float(r["time"]["terms"]["training_step"]["data-parallel communication (exposed)"])


def test_fsdp_across_nodes_is_as_fast_per_gpu_as_inside_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """llm-foundry's MPT-13B on H100s (FULL_SHARD, micro-batch 2, 2,048 tokens) measured 4,792, 4,767, 4,811
    and 4,800 tokens/s per GPU on 8, 16, 32 and 64 GPUs: the all-gathers and reduce-scatters across nodes hide
    behind the compute as they do inside one node. Llama-2-7B at micro-batch 2: one NIC per ring (the model before
    the ring's rails) exposes communication on 64 GPUs (0.66 s a micro-batch with the 2026-12 constants), none
    inside a node; eight NICs hide it as NVLink does."""
    assert [_fsdp_exposed(8), _fsdp_exposed(64)] == [0.0, 0.0]
    monkeypatch.setattr("embedcalc.analysis.time.comm.ring_rails", lambda *args: 1)
    assert _fsdp_exposed(8) == 0.0 and _fsdp_exposed(64) > 0.0


def test_kernels_scale_with_the_layers() -> None:
    config = load_target("gpt2").config
    w = Workload()
    deeper = load_target("gpt2", overrides=["num_layers=24"]).config
    per_layer = kernels_per_forward(deeper, w, False) - kernels_per_forward(config, w, False)
    assert per_layer > 0 and per_layer % 12 == 0


def _overhead_terms(device: Any, overhead_s: float) -> dict[str, float]:
    from embedcalc.analysis.time.estimate import TimeRequest, estimate_time

    config = load_target("gpt2").config
    w = Workload(seq_len=64, gen_tokens=4)
    cal = load_calibration().with_constants(kernel_overhead_s=overhead_s)
    estimate = estimate_time(config, w, TimeRequest(device=device, calibration=cal))
    return {phase: dict(terms)["kernel overhead"] for phase, terms in estimate.terms().items()}


def test_a_measured_kernel_overhead_replaces_the_calibrations() -> None:
    from embedcalc.devices.figures import LatencyFigure

    config, w = load_target("gpt2").config, Workload(seq_len=64, gen_tokens=4)
    kernels = {
        "prefill": kernels_per_forward(config, w, False),
        "decode": kernels_per_forward(config, w, True),
    }
    catalogue = load_device("a100-80gb")
    assert catalogue.kernel_overhead_s is None
    assert _overhead_terms(catalogue, 0.0) == {"prefill": 0.0, "decode": 0.0}  # the term vanishes at zero
    assert _overhead_terms(catalogue, 2e-6) == pytest.approx(
        {k: n * 2e-6 for k, n in kernels.items()}, rel=1e-12
    )
    measured = catalogue.model_copy(update={"kernel_overhead_s": LatencyFigure(value=7e-6, source="test")})
    # the device's own figure is used in place of the constant, never added to it
    for constant in (
        0.0,
        2e-6,
    ):
        assert _overhead_terms(measured, constant) == pytest.approx({k: n * 7e-6 for k, n in kernels.items()},
                                                                     rel=1e-12)  # fmt: skip


def test_a_measured_devices_own_constants_replace_the_calibrations() -> None:
    from embedcalc.analysis.time.estimate import TimeRequest, estimate_time
    from embedcalc.analysis.time.expected import device_constants
    from embedcalc.devices.figures import Figure, LatencyFigure

    cal = load_calibration()
    catalogue = load_device("a100-80gb")
    assert device_constants(cal.constants, catalogue) == cal.constants
    measured = catalogue.model_copy(update={"kernel_overhead_s": LatencyFigure(value=7e-6, source="test"),
                                            "gemm_half_rows": Figure(value=2.0, source="test")})  # fmt: skip
    own = device_constants(cal.constants, measured)
    assert (own.kernel_overhead_s, own.gemm_half_rows) == (7e-6, 2.0)
    assert own == cal.constants.__class__(**{**cal.constants.__dict__, "kernel_overhead_s": 7e-6,
                                             "gemm_half_rows": 2.0})  # fmt: skip
    config, w = load_target("gpt2").config, Workload(seq_len=64, gen_tokens=4)
    on_device = estimate_time(config, w, TimeRequest(device=measured))
    by_hand = estimate_time(config, w, TimeRequest(device=catalogue, calibration=cal.with_constants(
        kernel_overhead_s=7e-6, gemm_half_rows=2.0)))  # fmt: skip
    assert on_device.to_json() == by_hand.to_json()  # used in place of the constants, nothing added


def test_the_calibration_is_data_with_its_provenance() -> None:
    cal = load_calibration()
    assert cal.fitted_on and cal.held_out and not set(cal.fitted_on) & set(cal.held_out)
    assert 0 < cal.constants.gemm_fraction <= 1 and 0 < cal.constants.memory_fraction <= 1
    r = _decode(1)
    assert r["model"]["calibration"] == cal.name and r["model"]["fitted_on"] == list(cal.fitted_on)


def test_the_readme_shows_the_calibrations_measured_held_out_error() -> None:

    cal = load_calibration()
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    line = f"held-out: median |error| {100 * cal.held_out_median_error:.1f}%, worst {cal.held_out_max_ratio:.2f}x"
    assert line in readme and f"({len(cal.held_out)} runs)" in readme.split(line, 1)[1].splitlines()[0]


def test_a_devices_achievable_matmul_scales_the_matrix_fractions_not_the_bound(tmp_path: Any) -> None:
    """The fitted GEMM and attention fractions hold the fit device's clock and tile efficiency (A100 SXM: 86.9% of
    its BF16 peak at best, the calibration's reference_matmul_fraction). An H100 SXM reaches 80.3% of its own (the
    same measurement, mamf-finder.py): its fractions are scaled by 0.803 / 0.869, for every dtype; the roofline bound
    and every memory-bound term are not touched; a device with no measurement is taken as the fit's device."""
    from embedcalc.analysis.time.expected import device_constants
    from embedcalc.devices.catalogue import parse_device
    from embedcalc.errors import ConfigError

    cal = load_calibration().constants
    assert cal.reference_matmul_fraction == 0.869
    h100 = load_device("h100-sxm")
    assert h100.matmul_fraction is not None and h100.matmul_fraction.value == 0.803
    own = device_constants(cal, h100)
    assert own.gemm_fraction == pytest.approx(cal.gemm_fraction * 0.803 / 0.869)
    assert own.attention_fraction == pytest.approx(cal.attention_fraction * 0.803 / 0.869)
    assert (own.memory_fraction, own.kernel_overhead_s) == (cal.memory_fraction, cal.kernel_overhead_s)
    assert device_constants(cal, load_device("a100-80gb")) == cal  # the reference itself
    assert load_device("l40s").matmul_fraction is None
    assert device_constants(cal, load_device("l40s")) == cal

    args = ("analyze", "llama-3.1-70b", "--dtype", "fp8", "--tp", "8", "--seq-len", "2048", "--gen-tokens",
            "4")  # fmt: skip
    measured = _time(*args, "--hardware", "h100-sxm")["time"]
    data = h100.model_dump(exclude_none=True)
    data.pop("matmul_fraction")
    as_reference = tmp_path / "h100-as-a100.yaml"
    as_reference.write_text(yaml.safe_dump({**data, "name": "h100-as-a100"}), encoding="utf-8")
    held = _time(*args, "--hardware", str(as_reference))["time"]
    assert measured["lower_bound"] == held["lower_bound"]  # the bound stays at the datasheet peak
    assert measured["prefill_s"] > held["prefill_s"]  # compute-bound: slower at the lower fraction
    data["matmul_fraction"] = {"value": 1.2, "source": "test"}
    with pytest.raises(ConfigError, match="matmul_fraction"):
        parse_device(data, "test.yaml")


def test_inference_attention_runs_at_the_serving_kernels_fraction_training_at_the_calibrations() -> None:
    """Serving engines on Hopper run FlashAttention-3-class attention (FA3, causal, head dim 128, 8k tokens: 602 of
    989.4 TFLOPS, 0.608); the calibration's attention fraction (FlashAttention-2-era runs) stays for training."""
    from embedcalc.analysis.time.expected import device_constants

    cal = load_calibration().constants
    h100 = load_device("h100-sxm")
    assert h100.inference_attention_fraction is not None and h100.inference_attention_fraction.value == 0.608
    assert device_constants(cal, h100, inference=True).attention_fraction == 0.608
    training = device_constants(cal, h100)
    assert training.attention_fraction == pytest.approx(cal.attention_fraction * 0.803 / 0.869)
    assert device_constants(cal, h100, inference=True) == replace(training, attention_fraction=0.608)
    assert (
        device_constants(cal, load_device("a100-80gb"), inference=True) == cal
    )  # none measured: the calibration's

    prefill = _time(
        "analyze", "llama-3.1-8b", "--hardware", "h100-sxm", "--dtype", "bf16", "--seq-len", "16384"
    )
    scores = prefill["time"]["breakdown"]["prefill"]["decoder/attention/scores"]
    assert scores["bound"] == "compute"
    assert scores["time_s"] == pytest.approx(scores["flops"] / (989.4e12 * 0.608))


def test_every_fit_run_ran_on_the_reference_device() -> None:
    """reference_matmul_fraction means "the device the fitted fractions were fitted on": every run
    bench_published.py fits on ran on a device whose measured matmul fraction is that reference, so that a device
    at the reference keeps the fitted fractions exactly."""
    from paths import BENCHMARKS, load_script

    bench = load_script("bench_published", BENCHMARKS)
    reference = load_calibration().constants.reference_matmul_fraction
    fit = [run for run in bench.RUNS if run.role == "fit"]
    assert {run.id for run in fit} == set(load_calibration().fitted_on)
    for run in fit:
        device = load_device(run.args[run.args.index("--hardware") + 1])
        assert device.matmul_fraction is not None and device.matmul_fraction.value == reference, run.id


DISPATCH = "MoE token dispatch"


def test_moe_dispatch_is_per_token_expert_pair_and_does_not_shrink_with_tp() -> None:
    """A routed-expert layer's dispatch and combine move moe_dispatch_bytes per (token, chosen expert, hidden
    element) on every TP rank (each holds a slice of every expert): the term is exact, the same at TP 1 and TP 8
    while the expert GEMMs' share shrinks, in the training step's passes too, and absent from a dense model."""
    cal = load_calibration().constants
    config = load_target("qwen3-30b-a3b").config
    moe = next(b.ffn for b in config.named_blocks.values() if b.ffn is not None and b.ffn.moe)
    layers, d, k = config.num_layers, config.embed_dim, moe.top_k
    args = ("analyze", "qwen3-30b-a3b", "--hardware", "h200", "--dtype", "fp8", "--seq-len", "2048",
            "--batch-size", "2", "--gen-tokens", "4")  # fmt: skip
    one, eight = (_time(*args, "--tp", str(tp))["time"] for tp in (1, 8))
    stream = 4.8e12 * cal.memory_fraction  # h200's bandwidth at the streaming fraction
    for t in (one, eight):
        assert t["terms"]["prefill"][DISPATCH] == pytest.approx(
            layers * 2 * 2048 * k * d * cal.moe_dispatch_bytes / stream
        )
        assert t["terms"]["decode"][DISPATCH] == pytest.approx(
            layers * 2 * k * d * cal.moe_dispatch_bytes / stream
        )
    experts = [t["breakdown"]["prefill"]["decoder/moe/experts"]["time_s"] for t in (one, eight)]
    assert experts[1] < experts[0] / 4  # the GEMMs split over the ranks; the dispatch does not
    training = _time(*args[:-2], "--mode", "training")["time"]["terms"]["training_step"][DISPATCH]
    assert training == pytest.approx(3 * layers * 2 * 2048 * k * d * cal.moe_dispatch_bytes / stream)
    dense = _time("analyze", "llama-3.1-8b", "--hardware", "h200", "--dtype", "fp8", "--gen-tokens", "4")
    assert DISPATCH not in dense["time"]["terms"]["prefill"]
