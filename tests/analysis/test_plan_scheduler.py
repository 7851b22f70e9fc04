"""The continuous-batching scheduler of ``plan`` (issue 35): its identities on a step cost given by hand, the
queue for KV slots past capacity, the step-cost interpolation against the time model, and the layouts the
search finds (replicas, attention-DP + EP). Structure and exact figures of the model, never a measured speed."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

import embedcalc
from embedcalc.analysis.plan.engine import Engine, default_engine
from embedcalc.analysis.plan.rows import reason_code
from embedcalc.analysis.plan.scheduler import simulate
from embedcalc.analysis.plan.steps import Speculation, StepCost, batch_grid, computed_prompt
from embedcalc.analysis.time.estimate import TimeRequest, estimate_time
from embedcalc.analysis.workload import Parallelism, Workload
from embedcalc.devices.resolve import load_device
from embedcalc.sources.loading import load_target


def _cost(prefill: float = 0.4, prompt: int = 5000, spec: Speculation | None = None) -> StepCost:
    return StepCost.build(lambda n: 0.015 + 1e-4 * n, prefill, prompt, 1024, spec)


def test_alone_a_request_sees_its_prefill_and_one_decode_step_per_token() -> None:
    load = simulate(_cost(), Engine(), 5000, 500, float("inf"), concurrency=1)
    assert load.ttft.mean == pytest.approx(0.4 * 2048 / 5000 + 0.4 * 2048 / 5000 + 0.4 * 904 / 5000)
    assert load.tpot.p50 == pytest.approx(0.015 + 1e-4)  # nothing else runs
    assert load.preemptions == 0 and load.mean_kv_wait_s == 0


def test_a_whole_prompt_in_one_step_when_the_budget_holds_it() -> None:
    load = simulate(_cost(), Engine(1024, 8192), 5000, 500, float("inf"), concurrency=1)
    assert load.ttft.p99 == pytest.approx(0.4) and load.e2e.mean == pytest.approx(0.4 + 499 * (0.015 + 1e-4))


def test_the_engines_host_work_is_added_to_every_step() -> None:
    """The per-step host time (scheduling, output processing) is paid by every step: alone, a request's TTFT is its
    prefill step plus that time and its TPOT the decode step plus it; plan's engines carry vLLM's measured 0.2 ms."""
    host = StepCost.build(lambda n: 0.015 + 1e-4 * n, 0.4, 5000, 1024, None, 0.002)
    load = simulate(host, Engine(1024, 8192), 5000, 500, float("inf"), concurrency=1)
    assert load.ttft.p50 == pytest.approx(0.4 + 0.002) and load.tpot.p50 == pytest.approx(
        0.015 + 1e-4 + 0.002
    )
    assert host.step(0, 5000) == pytest.approx(_cost().step(0, 5000) + 0.002)
    assert default_engine(80 * 2**30, "h100-sxm").host_step_s == pytest.approx(2e-4)


def test_ttft_rises_with_the_load() -> None:
    """The NIM case's shape: others' prefills and the step in flight are waited for (issue 35)."""
    ttft = [simulate(_cost(), Engine(1024, 8192), 5000, 500, float("inf"), concurrency=c).ttft.mean
            for c in (1, 5, 25, 50)]  # fmt: skip
    assert ttft == sorted(ttft) and ttft[3] >= 1.5 * ttft[0]


def test_closed_loop_clients_start_together_and_stay_in_cohorts() -> None:
    """As AIPerf, genai-perf and benchmark_serving start them: five clients of equal lengths are admitted in one
    step, finish in one step and are replaced together, so every measured request waits for the prefill of all
    five (5000 tokens in one step: 5 × 0.05 s), not for its own alone (0.05 s)."""
    cost = StepCost.build(lambda n: 0.015 + 1e-4 * n, 0.05, 1000, 1024)
    load = simulate(cost, Engine(1024, 8192), 1000, 100, float("inf"), concurrency=5)
    assert load.ttft.p50 == pytest.approx(0.25) and load.ttft.p99 == pytest.approx(0.25)
    assert load.tpot.p50 == pytest.approx(0.015 + 5e-4)  # the cohort decodes together, nothing else runs


def test_past_the_kv_capacity_requests_queue_for_kv_slots() -> None:
    cap = 20 * 5504  # 20 sequences of 5000 + 500 tokens
    under = simulate(_cost(), Engine(1024, 8192), 5000, 500, cap, concurrency=10)
    over = simulate(_cost(), Engine(1024, 8192), 5000, 500, cap, concurrency=80)
    assert over.mean_kv_wait_s > 10 * max(under.mean_kv_wait_s, 0.01)
    assert over.ttft.mean > under.ttft.mean + 1.0  # seconds of queue
    assert over.mean_running <= 21  # never more running than the blocks hold (with the rounding's slack)


def test_a_cache_of_exactly_one_sequence_serves_one_at_a_time() -> None:
    """A replica whose KV blocks hold one full sequence (8,192 + 1,024 tokens in 16-token blocks) is the memory
    model's answer that one fits: the lone request decodes to its end rather than preempting itself over the
    blocks' average rounding (it did, recomputing forever: 9,999 preemptions and no request completed)."""
    cap = 9216
    load = simulate(_cost(1.0, 8192), Engine(1024, 8192), 8192, 1024, cap, concurrency=2)
    assert load.sustained and load.measured > 0 and load.preemptions == 0
    assert load.mean_running <= 1.0 and load.ttft.mean > 1.0 + 1023 * 0.015  # waits for the one ahead of it


def test_throughput_is_littles_law_of_the_closed_loop() -> None:
    load = simulate(_cost(), Engine(1024, 8192), 5000, 500, float("inf"), concurrency=25)
    assert load.requests_per_s * load.e2e.mean == pytest.approx(25, rel=0.1)
    assert load.tokens_per_s == pytest.approx(500 * load.requests_per_s, rel=0.1)


def test_open_loop_is_seeded_and_serves_the_rate() -> None:
    a = simulate(_cost(), Engine(1024, 8192), 5000, 500, float("inf"), rate=1.0, seed=3)
    b = simulate(_cost(), Engine(1024, 8192), 5000, 500, float("inf"), rate=1.0, seed=3)
    assert a == b and a.sustained
    assert a.tokens_per_s == pytest.approx(500, rel=0.15)
    over = simulate(_cost(), Engine(8, 8192), 5000, 500, float("inf"), rate=50.0)
    assert not over.sustained or over.requests_per_s < 0.9 * 50


def test_speculation_advances_the_expected_tokens_per_step() -> None:
    spec = Speculation(3, 0.7, 0.0)
    assert spec.tokens_per_step == pytest.approx((1 - 0.7**4) / (1 - 0.7))
    plain = simulate(_cost(), Engine(), 5000, 500, float("inf"), concurrency=1)
    fast = simulate(_cost(spec=spec), Engine(), 5000, 500, float("inf"), concurrency=1)
    assert fast.tpot.mean < plain.tpot.mean
    assert computed_prompt(5000, 0.5) == 2500 and computed_prompt(10, 0.999) == 1


def test_vllm_defaults_by_device_memory() -> None:
    assert default_engine(80 * 10**9, "h100-sxm") == Engine(1024, 8192)
    assert default_engine(80 * 10**9, "a100-80gb") == Engine(256, 2048)
    assert default_engine(24 * 10**9, "l4") == Engine(256, 2048)


def test_the_interpolated_decode_step_is_within_a_few_percent_of_the_time_model() -> None:
    config = load_target("llama-3.1-70b").config
    device = load_device("h200")
    w = Workload(seq_len=2048, gen_tokens=256, dtype="fp8", parallel=Parallelism(tp=2))

    def decode(n: int) -> float:
        return estimate_time(
            config, replace(w, batch_size=n), TimeRequest(device=device)
        ).decode_s_per_token_mean

    cost = StepCost.build(decode, 0.1, 2048, 512)
    assert cost.decode(64) == decode(64) and cost.decode(512) == decode(512)
    for n in (3, 24, 100, 300):
        assert cost.decode(n) == pytest.approx(decode(n), rel=0.05)
    assert set(cost.cache) <= set(batch_grid(512))  # the time model is asked only at the grid's batches


@pytest.mark.slow
def test_done_when_70b_256_users_on_8_h200_finds_replicas() -> None:
    p = embedcalc.plan("llama-3.1-70b", hardware="h200", dtype="fp8", kv_dtype="fp8", seq_len=2048, gen_tokens=256,
                       concurrency=256, max_tpot=0.05, max_devices=8)  # fmt: skip
    assert p.ok
    best = p.rows[0]
    assert best.layout.devices <= 8 and best.times.tpot_s <= 0.05
    assert best.times.tokens_per_s / best.layout.devices >= 600  # the figure (a model output)
    replicated = next(r for r in p.rows if r.ok and r.layout.replicas > 1 and r.layout.disaggregated is None)
    assert replicated.times.tokens_per_s / replicated.layout.devices >= 600


@pytest.mark.slow
def test_done_when_deepseek_v3_1024_in_flight_finds_attention_dp_and_ep() -> None:
    p = embedcalc.plan("deepseek-v3", hardware="h200", dtype="fp8", kv_dtype="fp8", seq_len=1024, gen_tokens=2048,
                       concurrency=1024, max_devices=8)  # fmt: skip
    assert p.ok
    best = p.rows[0]
    assert best.layout.ep == best.layout.dp == 8 and best.layout.tp == 1 and best.times.concurrency == 1024
    tp8 = next(r for r in p.rows if r.layout.tp == 8 and r.layout.ep == 1)
    assert not tp8.ok and "replicated on every TP rank" in tp8.reasons[0]


def test_advice_never_names_a_flag_already_set() -> None:
    p = embedcalc.plan("llama-3.1-70b", hardware="l4", dtype="fp8", kv_dtype="fp8", concurrency=64, max_devices=2,
                       memory_utilization=0.95)  # fmt: skip
    assert not p.ok
    line = p.recommendation
    assert (
        "--kv-dtype fp8" not in line and "--memory-utilization 0.95" not in line and "--dtype fp8" not in line
    )
    assert "--max-devices 4" in line


def test_reserve_admission_never_preempts_and_queues_instead() -> None:
    cap = 20 * 5504
    on_demand = simulate(_cost(), Engine(1024, 8192), 5000, 500, cap, concurrency=40)
    reserve = simulate(_cost(), Engine(1024, 8192, kv_admission="reserve"), 5000, 500, cap, concurrency=40)
    assert reserve.preemptions == 0 and on_demand.preemptions > 0
    assert reserve.mean_running <= 20 and reserve.mean_kv_wait_s > 1.0


def test_disaggregated_rows_say_so_and_move_the_kv_over_the_link() -> None:
    from embedcalc.analysis.memory.serving import serving_memory

    p = embedcalc.plan("llama-3.1-70b", hardware="h200", dtype="fp8", kv_dtype="fp8", seq_len=8000, gen_tokens=512,
                       concurrency=128, max_tpot=0.04, max_devices=16)  # fmt: skip
    split = [r for r in p.rows if r.layout.disaggregated is not None]
    assert split and all("P" in r.layout.label and "D ×" in r.layout.label for r in split)
    for row in split:
        x, y = row.layout.disaggregated
        assert row.layout.devices == (x + y) * row.layout.replica_devices <= 16
        assert row.times.engines == y and row.times.kv_transfer_s > 0
        if row.ok:
            assert row.times.tpot_s <= 0.04
    aggregated = [r for r in p.rows if r.layout.disaggregated is None and r.times is not None]
    assert aggregated  # compared under the same objectives
    # the transfer: one prompt's KV per TP rank over NVLink (H200: 450 GB/s per direction)
    config = load_target("llama-3.1-70b").config
    w = Workload(seq_len=8000, dtype="fp8", parallel=Parallelism(tp=2))
    per_rank = serving_memory(config, w, 1, kv_dtype="fp8").kv_cache_bytes
    assert (
        per_rank == 8000 * 80 * 2 * 4 * 128
    )  # tokens × layers × (K, V) × KV heads per rank × head_dim, 1 byte
    for row in split:  # over NVLink within a node, slower beyond it
        rank = per_rank * 2 // row.layout.tp
        assert rank / 450e9 <= row.times.kv_transfer_s
        if row.layout.devices <= 8:
            assert row.times.kv_transfer_s < rank / 450e9 + 1e-3


def _analyze(*args: str) -> dict:
    import json

    from typer.testing import CliRunner

    from embedcalc.cli.app import app

    result = CliRunner().invoke(app, ["analyze", *args, "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["results"][0]


def test_a_replicated_row_is_analyzes_numbers_at_its_engines_share() -> None:
    p = embedcalc.plan("llama-3.1-70b", hardware="h200", dtype="fp8", kv_dtype="fp8", seq_len=2048, gen_tokens=256,
                       concurrency=256, max_tpot=0.05, max_devices=8)  # fmt: skip
    row = next(r for r in p.rows if r.layout.replicas == 4 and r.layout.tp == 2)
    assert row.times.batch == 64 and row.times.engines == 4 and row.layout.devices == 8
    common = ["llama-3.1-70b", "--hardware", "h200", "--tp", "2", "--dtype", "fp8", "--kv-dtype", "fp8",
              "--seq-len", "2048", "--gen-tokens", "256"]  # fmt: skip
    one, batch = _analyze(*common, "--batch-size", "1"), _analyze(*common, "--batch-size", "64")
    assert row.times.prefill_s == one["time"]["prefill_s"]
    assert row.times.decode_step_s == batch["time"]["decode_s_per_token_mean"]
    assert row.memory.weights_bytes == one["memory"]["weights_bytes"]
    assert row.memory.kv_cache_bytes == batch["memory"]["kv_cache_bytes"]


@pytest.mark.slow
def test_an_attention_dp_row_holds_what_analyze_gives_with_dp_and_ep() -> None:
    p = embedcalc.plan("deepseek-v3", hardware="h200", dtype="fp8", kv_dtype="fp8", seq_len=1024, gen_tokens=2048,
                       concurrency=1024, max_devices=8)  # fmt: skip
    row = next(r for r in p.rows if r.layout.ep == 8)
    assert row.times.batch == 128 and row.times.engines == 8  # 1024 requests, 128 on each rank
    common = ["deepseek-v3", "--hardware", "h200", "--dp", "8", "--ep", "8", "--dtype", "fp8", "--kv-dtype", "fp8",
              "--seq-len", "1024", "--gen-tokens", "2048", "--batch-size", "128"]  # fmt: skip
    memory = _analyze(*common)["memory"]
    assert row.memory.weights_bytes == memory["weights_bytes"]  # experts / 8, the rest whole
    assert row.memory.kv_cache_bytes == memory["kv_cache_bytes"]  # the rank's own requests' latent, once


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--spec-tokens", "3"], "spec_acceptance"),
        (["--spec-tokens", "3", "--spec-acceptance", "1.5"], "--spec-acceptance"),
        (["--spec-acceptance", "0.7"], "spec_tokens"),
        (["--prefix-hit", "1"], "--prefix-hit"),
        (["--kv-admission", "eager"], "kv-admission"),
        (["--mode", "training", "--train-tokens", "1B", "--max-num-seqs", "8"], "--max-num-seqs"),
    ],
)
def test_bad_serving_options_exit_2_naming_the_option(args: list[str], words: str) -> None:
    from typer.testing import CliRunner

    from embedcalc.cli.app import app

    result = CliRunner().invoke(app, ["plan", "llama-3.1-8b", "--hardware", "h100-sxm", *args])
    assert result.exit_code == 2, result.output
    assert words in result.output


def test_a_prefix_cache_shortens_the_prefill_and_speculation_the_tpot() -> None:
    base = dict(hardware="h100-sxm", seq_len=4096, gen_tokens=256, concurrency=8)
    plain = embedcalc.plan("llama-3.1-8b", **base).rows[0]
    cached = embedcalc.plan("llama-3.1-8b", prefix_hit=0.75, **base).rows[0]
    spec = embedcalc.plan("llama-3.1-8b", spec_tokens=3, spec_acceptance=0.7, **base).rows[0]
    assert cached.times.prefill_s < plain.times.prefill_s and cached.times.ttft_s < plain.times.ttft_s
    assert spec.times.tpot_s < plain.times.tpot_s
    assert spec.times.engine == plain.times.engine  # the same vLLM defaults on the same device


def test_a_saturated_closed_loop_queues_by_littles_law() -> None:
    cap = 20 * 5504
    direct = simulate(_cost(), Engine(1024, 8192, kv_admission="reserve"), 5000, 500, cap, concurrency=40)
    deep = simulate(_cost(), Engine(1024, 8192, kv_admission="reserve"), 5000, 500, cap, concurrency=4000)
    assert deep.tokens_per_s == pytest.approx(direct.tokens_per_s, rel=0.05)  # the same running batch
    assert deep.e2e.mean == pytest.approx(4000 / deep.requests_per_s)  # latency = C / X
    assert deep.tpot.mean == pytest.approx(direct.tpot.mean, rel=0.05)


def test_a_load_no_request_completes_is_out_not_zero() -> None:
    """One prompt token per step: 64 prompts of 2,048 tokens take more engine steps than the scheduler's bound, so no
    request completes in the simulation; the row says so and shows no times (it showed TTFT 0 s and status ok)."""
    p = embedcalc.plan("llama-3.1-8b", hardware=["h100-sxm"], seq_len=2048, gen_tokens=16, concurrency=64,
                       max_num_batched_tokens=1, max_devices=1)  # fmt: skip
    [row] = [r for r in p.rows if r.layout.tp == 1 and r.layout.replicas == 1]
    assert not row.ok and row.times is None
    assert reason_code(row.reasons[-1]) == "load" and "no request completes" in row.reasons[-1]


def test_a_step_prefilling_several_prompts_reads_the_weights_once() -> None:
    """A chunk within one prompt costs its share of T_p(1); a chunk spanning k prompts costs T_p(k), the prompts
    batched in one pass (exact at powers of two, linear between), not k passes over the weights."""
    batched = {1: 0.003, 2: 0.004, 4: 0.006, 8: 0.010}
    calls: list[int] = []

    def prefill_of(b: int) -> float:
        calls.append(b)
        return batched[b]

    cost = StepCost.build(lambda n: 0.002, 0.003, 128, 64, batched=prefill_of)
    assert cost.share(64) == pytest.approx(0.0015) and cost.share(128) == pytest.approx(0.003)
    assert cost.share(512) == pytest.approx(0.006) and cost.share(384) == pytest.approx(0.005)
    assert cost.share(768) == pytest.approx(0.006 + 0.004 * 2 / 4)
    assert sorted(set(calls)) == [2, 4, 8] and len(calls) == 3  # each batch asked once
    assert StepCost.build(lambda n: 0.002, 0.003, 128, 64).share(512) == pytest.approx(
        0.012
    )  # no batched: k · T_p


def test_the_batched_prefill_is_analyzes_prefill_at_that_batch() -> None:
    """plan's step cost on llama-3.1-8b, 128-token prompts on an H100: 16 prompts in one step cost analyze's
    prefill_s at batch 16, far below 16 × its prefill at batch 1 (one pass over the weights, not sixteen)."""
    from embedcalc.analysis.plan.rows import Layout
    from embedcalc.analysis.plan.serving import ServingRequest, Unit, build_unit

    config = load_target("llama-3.1-8b").config
    h100 = load_device("h100-sxm")
    w = Workload(seq_len=128, gen_tokens=128, dtype="fp8")
    request = ServingRequest(w, concurrency=64, kv_dtype="fp8")
    unit = build_unit(config, h100, Layout("h100-sxm"), request, None)
    assert isinstance(unit, Unit)
    analyze = estimate_time(
        config, replace(w, batch_size=16, gen_tokens=0), TimeRequest(device=h100, kv_dtype="fp8")
    )
    assert unit.cost.share(16 * 128) == analyze.prefill_s
    assert analyze.prefill_s is not None and analyze.prefill_s < 16 * unit.cost.prefill_s / 2


def test_the_busiest_expert_parallel_rank_follows_the_measured_routing() -> None:
    """The busiest rank's excess pairs (expert_parallel.busiest_rank_excess): none on one rank; the measured
    anchor (DeepSeek-R1, 256 experts on 32 ranks, 1,024 pairs per rank: TensorRT-LLM measured 1.564) within 10%;
    it grows with the ranks, shrinks with the experts each rank averages over and with the pairs drawn; and it is
    within 10% of a seeded Monte Carlo of the lognormal loads it stands for."""
    import numpy as np

    from embedcalc.analysis.plan.expert_parallel import busiest_rank_excess
    from embedcalc.devices.calibration import load_calibration

    cv = load_calibration().constants.moe_expert_load_cv
    assert busiest_rank_excess(1, 256, 1e6, cv) == 0.0
    assert busiest_rank_excess(32, 256, 32 * 1024, cv) == pytest.approx(1.564, rel=0.1)
    by_ranks = [busiest_rank_excess(n, 256, 1e6, cv) for n in (2, 4, 8, 16, 32)]
    assert by_ranks == sorted(by_ranks) and by_ranks[0] < 0.1
    assert busiest_rank_excess(8, 128, 1e6, cv) > busiest_rank_excess(8, 256, 1e6, cv)
    assert busiest_rank_excess(8, 256, 512, cv) > busiest_rank_excess(8, 256, 1e6, cv)
    rng = np.random.default_rng(0)
    s = np.sqrt(np.log1p(cv * cv))
    for experts, ranks in ((256, 8), (128, 4)):
        loads = rng.poisson(rng.lognormal(-s * s / 2, s, size=(4000, experts)) * 8.0).astype(float)
        per_rank = loads.reshape(4000, ranks, experts // ranks).sum(axis=2)
        mean = per_rank.mean(axis=1)
        mc = float(((per_rank.max(axis=1) - mean) / mean).mean())
        assert busiest_rank_excess(ranks, experts, 8.0 * experts, cv) == pytest.approx(mc, rel=0.1)


def test_an_attention_dp_ranks_experts_run_the_busiest_ranks_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    """rank_times charges the routed experts at the busiest rank's share: analyze's expert components for
    ceil((1 + x) · N · b) tokens, over N — more than balanced routing (x = 0) gives."""
    from embedcalc.analysis.plan import expert_parallel
    from embedcalc.devices.calibration import load_calibration

    config = load_target("deepseek-v3").config
    device = load_device("h200")
    w = Workload(seq_len=1024, gen_tokens=256, dtype="fp8")
    request = TimeRequest(device=device, kv_dtype="fp8")
    asked: list[int] = []

    def estimate(x: Workload):  # type: ignore[no-untyped-def]
        asked.append(x.batch_size * x.seq_len if x.gen_tokens == 0 else x.batch_size)
        return estimate_time(config, x, request, lower_bound=False)

    decode, _ = expert_parallel.rank_times(config, w, device, 8, estimate)
    asked.clear()
    skewed = decode(64)
    cv = load_calibration().constants.moe_expert_load_cv
    x = expert_parallel.busiest_rank_excess(8, 256, 8 * 64 * 8, cv)  # 8 ranks × 64 tokens × top 8
    assert 0.3 < x < 0.6
    assert asked == [
        64,
        math.ceil((1 + x) * 8 * 64),
    ]  # the rank's own batch, then the busiest rank's share × 8
    monkeypatch.setattr(expert_parallel, "busiest_rank_excess", lambda *a: 0.0)
    balanced, _ = expert_parallel.rank_times(config, w, device, 8, estimate)
    assert skewed > balanced(64)
