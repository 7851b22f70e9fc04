"""``embedcalc plan`` (issue 21): every listed layout fits by analyze's own memory model and its numbers are
analyze's; rows sort as documented; the reasons name the figure that misses; the queue model's identities; bad
input exits with the documented code. Structure and exact integers, never a speed."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from typer.testing import CliRunner

import embedcalc
from embedcalc.analysis.memory import estimate_memory
from embedcalc.analysis.memory.serving import max_concurrency, paged_tokens, serving_memory
from embedcalc.analysis.plan.rows import (
    PlanResult,
    ServingRow,
    TrainingRow,
    parse_duration,
)
from embedcalc.analysis.workload import Parallelism, Workload
from embedcalc.cli.app import app
from embedcalc.sources.loading import load_target

runner = CliRunner()


def _analyze_json(*args: str) -> dict[str, Any]:
    result = runner.invoke(app, ["analyze", *args, "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["results"][0]  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def llama70b() -> PlanResult:
    """The done-when plan: llama-3.1-70b, 2048-token prompts, 256 output tokens, 32 in flight, whole catalogue."""
    return embedcalc.plan("llama-3.1-70b", seq_len=2048, gen_tokens=256, concurrency=32)


def _row(plan: PlanResult, device: str, tp: int, pp: int = 1) -> Any:
    [row] = [r for r in plan.rows if (r.layout.device, r.layout.tp, r.layout.pp) == (device, tp, pp)]
    return row


def test_done_when_70b_lists_h100_tp4_tp8_and_h200_tp2(llama70b: PlanResult) -> None:
    for device, tp in (("h100-sxm", 4), ("h100-sxm", 8), ("h200", 2)):
        row = _row(llama70b, device, tp)
        assert row.ok, row.reasons
        t = row.times
        assert row.max_concurrency >= 32 and t.concurrency == 32
        assert t.tokens_per_s > 0 and t.ttft_s > 0 and t.tpot_s > 0
    # h100-sxm at TP 2 holds the weights but not the KV of 32 sequences: replicas share the load (issue 35)
    tp2 = _row(llama70b, "h100-sxm", 2)
    assert tp2.max_concurrency < 32 and tp2.layout.replicas == -(-32 // tp2.max_concurrency)
    assert tp2.layout.devices == 2 * tp2.layout.replicas and tp2.times.batch == -(-32 // tp2.layout.replicas)


def test_done_when_l4_and_t4_single_node_layouts_are_out_for_memory(llama70b: PlanResult) -> None:
    for device in ("l4", "t4"):
        single_node = [r for r in llama70b.rows if r.layout.device == device and r.layout.pp == 1]
        out = [r for r in single_node if not r.ok]
        assert out, device
        for row in out:
            assert row.reasons[0].startswith(("weights do not fit", "KV for 32 sequences does not fit")), (
                row.reasons
            )
            assert "per device" in row.reasons[0] or "each" in row.reasons[0]
    # t4 has no bf16: without --dtype it is planned in fp16, as servers load a bf16 checkpoint there
    assert {r.dtype for r in llama70b.rows if r.layout.device == "t4"} == {"fp16"}


def test_every_listed_layout_fits_by_analyzes_memory_model(llama70b: PlanResult) -> None:
    config = load_target("llama-3.1-70b").config
    for row in llama70b.rows:
        if not row.ok:
            continue
        m = row.memory
        assert m.fits and m.used_bytes <= m.usable_bytes
        w = Workload(seq_len=2048, gen_tokens=256, dtype=row.dtype,
                     parallel=Parallelism(tp=row.layout.tp, pp=row.layout.pp))  # fmt: skip
        one = estimate_memory(config, w)  # analyze's memory of one sequence on this layout
        assert m.weights_bytes == one.weights_bytes
        # each engine holds its share of the 32 in flight (2048 + 256 is a whole number of 16-token blocks)
        assert m.kv_cache_bytes == row.times.batch * one.kv_cache_bytes
        assert row.times.batch * row.times.engines >= 32 > (row.times.batch - 1) * row.times.engines
        assert m.kv_paging_bytes == 0


def test_row_numbers_equal_analyze(llama70b: PlanResult) -> None:
    """One row's prefill, decode step and weights are what `analyze` prints for that device, layout and batch."""
    row = _row(llama70b, "h100-sxm", 4)
    common = ["llama-3.1-70b", "--hardware", "h100-sxm", "--tp", "4", "--dtype", "bf16", "--seq-len", "2048",
              "--gen-tokens", "256"]  # fmt: skip
    one = _analyze_json(*common, "--batch-size", "1")
    batch = _analyze_json(*common, "--batch-size", "32")
    assert row.times.prefill_s == one["time"]["prefill_s"]
    assert row.times.decode_step_s == batch["time"]["decode_s_per_token_mean"]
    assert row.memory.weights_bytes == one["memory"]["weights_bytes"]
    assert row.memory.kv_cache_bytes == batch["memory"]["kv_cache_bytes"]
    # and analyze's serving view of the same layout agrees
    serving = _analyze_json(*common, "--concurrency", "32", "--memory-utilization", "0.9")
    assert serving["memory"]["serving"] == row.memory.to_json()


def test_rows_sort_ok_first_then_cheapest_per_million_tokens() -> None:
    p = embedcalc.plan("llama-3.1-8b", hardware=["h100-sxm", "a100-80gb", "l4"], concurrency=16,
                       price_per_hour={"h100-sxm": 2.5, "a100-80gb": 1.3, "l4": 0.8})  # fmt: skip
    oks = [r.ok for r in p.rows]
    assert oks == sorted(oks, reverse=True) and any(oks)
    costs = [r.cost_per_million_tokens for r in p.rows if r.ok]
    assert costs == sorted(costs)
    best = p.rows[0]
    assert best.cost_per_hour == pytest.approx(best.price.per_device_hour * best.layout.devices)
    assert best.cost_per_million_tokens == pytest.approx(
        best.cost_per_hour / (3600 * best.times.tokens_per_s) * 1e6
    )
    assert p.recommendation.startswith(f"Serve on {best.layout.devices} × {best.layout.device}")
    assert all(r.price.source == "--price-per-hour" for r in p.rows)


def test_done_when_objectives_mark_the_figure_that_misses() -> None:
    p = embedcalc.plan("llama-3.1-8b", max_ttft=0.2, max_tpot=0.05, concurrency=64)
    served = [r for r in p.rows if r.times is not None]
    assert served
    for row in served:
        t, text = row.times, "; ".join(row.reasons)
        assert ("TTFT" in text) == (t.ttft_s > 0.2)
        assert ("TPOT" in text) == (t.tpot_s > 0.05)
        assert row.ok == (t.ttft_s <= 0.2 and t.tpot_s <= 0.05)
    for row in p.rows:
        assert row.ok == (not row.reasons)
    misses = [r for r in served if not r.ok]
    for row in misses:  # "TPOT 58.2 ms > 50 ms": the figure, then the objective
        assert any(" > " in reason for reason in row.reasons)


def test_concurrency_default_is_as_many_as_fit_up_to_the_engines_max_num_seqs() -> None:
    p = embedcalc.plan("llama-3.1-8b", hardware=["h100-sxm", "l4"])
    for row in p.rows:
        if row.times is not None:  # vLLM's defaults: 1024 on an H100 (80 GB), 256 on an L4 (24 GB)
            cap = 1024 if row.layout.device == "h100-sxm" else 256
            assert row.times.concurrency == min(row.max_concurrency, cap)
            assert row.times.engine.max_num_seqs == cap


def test_without_a_load_latency_objectives_cap_the_sequences_in_flight() -> None:
    p = embedcalc.plan("llama-3.1-70b", max_tpot=0.03, hardware=["h100-sxm", "h200", "l4"])
    served = [r for r in p.rows if r.times is not None]
    capped = [r for r in served if r.ok and r.times.concurrency < min(r.max_concurrency, 1024)]
    assert capped  # some layout serves fewer than fit, to stay within the TPOT objective
    for row in served:
        assert row.times.concurrency <= min(row.max_concurrency, row.times.engine.max_num_seqs)
        assert row.memory.concurrency == row.times.concurrency
        assert row.ok == (row.times.tpot_s <= 0.03)
        if not row.ok:  # not even one sequence meets it
            assert row.times.concurrency == 1


def test_a_rate_is_served_at_that_rate() -> None:
    p = embedcalc.plan("llama-3.1-8b", hardware=["h100-sxm"], rate=2.0)
    row = p.rows[0]
    assert row.ok and row.times.tokens_per_s == pytest.approx(2.0 * 256, rel=0.15)  # Poisson: a sample
    assert row.memory.concurrency == row.times.batch <= row.max_concurrency
    too_fast = embedcalc.plan("llama-3.1-8b", hardware=["l4"], rate=1e6)
    assert not too_fast.ok and all("rate" in r.reasons[0] for r in too_fast.rows if r.memory is not None)


# --- serving memory -----------------------------------------------------------------------------------------------


def test_paged_kv_rounds_each_sequence_to_16_token_blocks() -> None:
    config = load_target("llama-3.1-8b").config
    w = Workload(seq_len=1000, gen_tokens=50, dtype="bf16")  # 1050 tokens -> 1056
    assert paged_tokens(1050) == 1056 and paged_tokens(1056) == 1056
    m = serving_memory(config, w, 8, 80 * 2**30, 0.9)
    per_token = estimate_memory(config, replace(w, gen_tokens=51)).kv_cache_bytes - estimate_memory(
        config, w).kv_cache_bytes  # fmt: skip
    assert m.kv_cache_bytes == 8 * estimate_memory(config, w).kv_cache_bytes
    assert m.kv_paging_bytes == 8 * 6 * per_token
    assert m.reserve_bytes == 80 * 2**30 - int(0.9 * 80 * 2**30)
    assert m.total_bytes == m.used_bytes + m.reserve_bytes
    assert m.workspace_bytes == estimate_memory(config, replace(w, gen_tokens=0)).activations_bytes


def test_max_concurrency_is_the_largest_that_fits() -> None:
    config = load_target("llama-3.1-8b").config
    for seq_len, usable in ((1024, 30 * 2**30), (64, 60 * 2**30), (2048, 17 * 2**30)):
        w = Workload(seq_len=seq_len, gen_tokens=64, dtype="bf16")
        most = max_concurrency(config, w, usable, None)
        assert most is not None and most > 0
        assert serving_memory(config, w, most, usable).fits
        assert not serving_memory(config, w, most + 1, usable).fits
    tiny = Workload(seq_len=128, gen_tokens=0, dtype="bf16")
    assert max_concurrency(config, tiny, 2**30, None) == 0  # not even the weights


def test_analyze_shows_the_reserve_and_paging_rows() -> None:
    args = ["analyze", "llama-3.1-8b", "--dtype", "bf16", "--seq-len", "1000", "--gen-tokens", "50",
            "--hardware", "l4", "--concurrency", "64"]  # fmt: skip
    result = runner.invoke(app, args, env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    for words in (
        "paged KV rounding",
        "runtime reserve",
        "KV cache (64 sequences)",
        "does not fit",
        "at most",
    ):
        assert words in result.stdout, words
    j = _analyze_json(*args[1:])
    s = j["memory"]["serving"]
    assert s["utilization"] == 0.9 and s["kv_paging_bytes"] > 0 and s["fits"] is False
    assert s["max_concurrency"] < 64


# --- training -----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def training() -> PlanResult:
    return embedcalc.plan("llama-3.1-8b", mode="training", train_tokens=10**12, deadline_s=30 * 86400,
                          hardware=["h100-sxm", "a100-40gb"], max_devices=256)  # fmt: skip


def test_done_when_training_layouts_fit_by_analyze_and_show_the_deadline(training: PlanResult) -> None:
    config = load_target("llama-3.1-8b").config
    fits = [r for r in training.rows if r.fits]
    assert fits and any(r.ok for r in fits) and any(not r.meets_deadline for r in fits)
    for row in fits:
        lay = row.layout
        w = Workload(seq_len=4096, dtype="bf16", mode="training", recompute=lay.recompute,
                     parallel=Parallelism(tp=lay.tp, pp=lay.pp, dp=lay.dp, zero=lay.zero))  # fmt: skip
        assert estimate_memory(config, w).total_bytes == row.memory_bytes <= row.memory_limit_bytes
        if not row.meets_deadline:
            assert row.reasons[0].startswith("deadline 30.00 d: takes ") and "over)" in row.reasons[0]
    # within the deadline first, fastest first
    keys = [(not r.meets_deadline, r.wall_s) for r in fits]
    assert keys == sorted(keys)
    assert all(r.fits for r in training.rows[: len(fits)])


def test_training_row_equals_analyze(training: PlanResult) -> None:
    row = next(r for r in training.rows if r.ok and r.layout.dp > 1)
    lay = row.layout
    j = _analyze_json("llama-3.1-8b", "--mode", "training", "--hardware", lay.device, "--dtype", "bf16",
                      "--seq-len", "4096", "--tp", str(lay.tp), "--pp", str(lay.pp), "--dp", str(lay.dp),
                      "--zero", str(lay.zero), "--recompute", lay.recompute, "--train-tokens", "1T",
                      "--price-per-hour", str(row.price.per_device_hour))  # fmt: skip
    assert j["memory"]["total_bytes"] == row.memory_bytes
    assert {key: j["memory"][key] for key in row.memory} == row.memory  # every kind, not only the total
    assert j["time"]["train"] == row.train
    assert j["time"]["step_s"] == row.step_s
    assert j["time"]["train"]["wall_s"] == row.wall_s
    assert j["time"]["train"]["device_hours"] == row.device_hours


def test_training_with_a_global_batch_equals_analyze() -> None:
    p = embedcalc.plan("llama-3.1-8b", mode="training", train_tokens=10**12, hardware=["h100-sxm"], max_devices=64,
                       global_batch=512)  # fmt: skip
    row = next(r for r in p.rows if r.ok and r.layout.dp == 64)
    lay = row.layout
    j = _analyze_json("llama-3.1-8b", "--mode", "training", "--hardware", lay.device, "--dtype", "bf16",
                      "--seq-len", "4096", "--tp", str(lay.tp), "--pp", str(lay.pp), "--dp", str(lay.dp),
                      "--zero", str(lay.zero), "--recompute", lay.recompute, "--train-tokens", "1T",
                      "--global-batch", "512", "--price-per-hour", str(row.price.per_device_hour))  # fmt: skip
    assert j["time"]["train"] == row.train and j["time"]["step_s"] == row.step_s
    odd = embedcalc.plan("llama-3.1-8b", mode="training", train_tokens=10**12, hardware=["h100-sxm"],
                         max_devices=64, global_batch=96)  # fmt: skip
    assert all("not a multiple" in r.reasons[0] for r in odd.rows if r.layout.dp in (64, 128))


def test_training_chooses_recompute_only_when_it_makes_it_fit() -> None:
    p = embedcalc.plan("llama-3.1-70b", mode="training", train_tokens=10**12, hardware=["h100-sxm"],
                       max_devices=64)  # fmt: skip
    config = load_target("llama-3.1-70b").config
    limit = 80 * 2**30
    chosen = [r for r in p.rows if r.fits and (r.layout.recompute != "none" or r.layout.zero > 1)]
    assert chosen
    for row in chosen:
        lay = row.layout
        lighter = Workload(seq_len=4096, dtype="bf16", mode="training", recompute="none",
                           parallel=Parallelism(tp=lay.tp, pp=lay.pp, dp=lay.dp, zero=min(lay.zero, 1)))  # fmt: skip
        assert estimate_memory(config, lighter).total_bytes > limit  # the plain layout does not fit
        assert "makes it fit" in row.memory_choice


def test_parse_duration() -> None:
    assert parse_duration("30d") == 30 * 86400
    assert parse_duration("36h") == 36 * 3600 and parse_duration("2w") == 14 * 86400
    assert parse_duration("90min") == 5400 and parse_duration("1.5d") == 1.5 * 86400
    for bad in ("30", "d", "-1d", "nand", "infd"):
        with pytest.raises(ValueError, match="not a duration"):
            parse_duration(bad)


# --- the command --------------------------------------------------------------------------------------------------


def test_cli_table_has_the_recommendation_and_the_reasons() -> None:
    result = runner.invoke(app, ["plan", "llama-3.1-70b", "--hardware", "h100-sxm,l4", "--seq-len", "2048",
                                 "--concurrency", "32", "--top", "0"], env={"COLUMNS": "200"})  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("Serve on ")
    assert "weights 131.42 GiB > 72.00 GiB usable" in result.stdout and "TTFT" in result.stdout


def test_done_when_default_table_shows_why_l4_and_t4_are_out(llama70b: PlanResult) -> None:
    from embedcalc.render.plan import _shown

    shown, folded = _shown(llama70b, 20)
    assert all(r.times is not None for r in shown) and len(shown) == 20
    lines = {(row.layout.device, label): row.reasons[0] for row, label in folded}
    assert lines[("l4", "TP 1, 2, 4")].startswith("weights do not fit")
    assert lines[("t4", "TP 1, 2, 4, 8")].startswith("weights do not fit")
    assert lines[("h100-sxm", "TP 1")].startswith("weights do not fit")
    result = runner.invoke(app, ["plan", "llama-3.1-70b", "--seq-len", "2048", "--gen-tokens", "256",
                                 "--concurrency", "32"], env={"COLUMNS": "220"})  # fmt: skip
    assert result.exit_code == 0
    assert "TP 1, 2, 4, 8" in result.stdout and "weights 16.43 GiB > 14.40 GiB usable" in result.stdout


@pytest.mark.parametrize("fmt", ["json", "csv", "markdown"])
def test_cli_formats_list_every_layout(fmt: str) -> None:
    args = ["plan", "llama-3.1-8b", "--hardware", "h100-sxm", "--hardware", "l4", "--concurrency", "8",
            "--format", fmt]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    evaluated = len(embedcalc.plan("llama-3.1-8b", hardware=["h100-sxm", "l4"], concurrency=8).rows)
    if fmt == "json":
        j = json.loads(result.stdout)
        assert j["command"] == "plan" and j["status"] == "ok"
        [r] = j["results"]
        assert r["layouts_evaluated"] == len(r["layouts"]) == evaluated
        assert {"layout", "memory", "times", "reasons", "cost_per_million_tokens"} <= set(r["layouts"][0])
    elif fmt == "csv":
        assert len(result.stdout.splitlines()) == evaluated + 1
    else:
        assert len([line for line in result.stdout.splitlines() if line.startswith("| ")]) == evaluated + 1


@pytest.mark.parametrize(
    ("args", "code", "words"),
    [
        (["--concurrency", "0"], 2, "--concurrency"),
        (["--hardware", "h100"], 2, "no such device"),
        (["--memory-utilization", "1.5"], 2, "fraction in (0, 1]"),
        (["--concurrency", "4", "--rate", "1"], 2, "not both"),
        (["--price-per-hour", "h100-sxm"], 2, "DEVICE=PRICE"),
        (["--hardware", "h100-sxm", "--price-per-hour", "l4=1"], 2, "not among the devices"),
        (["--mode", "training"], 2, "--train-tokens"),
        (["--mode", "training", "--train-tokens", "1T", "--deadline", "30"], 2, "not a duration"),
        (["--train-tokens", "1T"], 2, "training"),
        (["--set", "num_heads=7"], 3, "num_heads"),
    ],
)
def test_bad_input_exits_with_the_documented_code(args: list[str], code: int, words: str) -> None:
    result = runner.invoke(app, ["plan", "llama-3.1-8b", *args])
    assert result.exit_code == code, result.output
    assert words in result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_a_deadline_no_layout_meets_exits_5_naming_the_fix() -> None:
    args = ["plan", "llama-3.1-8b", "--mode", "training", "--train-tokens", "1T", "--deadline", "1d", "--hardware",
            "h100-sxm", "--max-devices", "8"]  # fmt: skip
    result = runner.invoke(app, args, env={"COLUMNS": "160"})
    assert result.exit_code == 5, result.output
    assert "deadline" in result.stderr and "--max-devices" in result.stderr
    assert "over)" in result.stdout  # the table was printed, with the shortfall
    j = runner.invoke(app, [*args, "--format", "json"])
    assert j.exit_code == 5
    envelope = json.loads(j.stdout)
    assert envelope["status"] == "error" and envelope["problems"][0]["code"] == "plan_unmet"
    assert envelope["results"][0]["layouts"]


def test_an_encoder_has_nothing_to_serve() -> None:
    result = runner.invoke(app, ["plan", "bert-base"])
    assert result.exit_code == 3 and "encoder" in result.stderr


def test_rows_are_typed() -> None:
    p = embedcalc.plan("llama-3.1-8b", hardware=["h100-sxm"], concurrency=4)
    assert all(isinstance(r, ServingRow) for r in p.rows)
    t = embedcalc.plan("gpt2", mode="training", train_tokens=10**9, hardware=["h100-sxm"], max_devices=2)
    assert all(isinstance(r, TrainingRow) for r in t.rows)


def test_small_costs_and_rates_keep_their_digits() -> None:
    from embedcalc.units import amount, dollars

    assert dollars(0.00299) == "$0.00299" and dollars(59377.0) == "$59,377.00" and dollars(0) == "$0.00"
    assert amount(0.0256) == "0.0256" and amount(42.71) == "42.7" and amount(14881.3) == "14,881"


def test_a_device_without_the_dtype_says_so_and_nothing_else() -> None:
    result = runner.invoke(app, ["plan", "llama-3.1-8b", "--hardware", "v100-sxm2", "--dtype", "bf16"])
    assert result.exit_code == 5
    assert "v100-sxm2 has no bf16 peak" in result.stderr and "--max-devices" not in result.stderr


def test_training_adds_pipeline_stages_only_where_memory_needs_them() -> None:
    p = embedcalc.plan("llama-3.1-70b", mode="training", train_tokens=10**12, hardware=["a100-40gb"],
                       max_devices=256)  # fmt: skip
    by_layout = {(r.layout.tp, r.layout.pp, r.layout.dp): r for r in p.rows}
    staged = [r for r in p.rows if r.layout.pp > 1]
    assert staged
    for row in staged:
        lay = row.layout
        assert lay.tp == 8  # TP over the whole node first
        fewer = by_layout[(lay.tp, lay.pp // 2, lay.dp)]
        assert not fewer.fits  # the layout with half the stages did not fit
    for (tp, pp, dp), row in by_layout.items():
        if row.fits and tp == 8:
            assert (tp, 2 * pp, dp) not in by_layout  # nothing beyond the first that fits


def test_a_recurrent_state_is_held_per_sequence_in_flight() -> None:
    config = load_target("granite-4.0-h-small").config
    w = Workload(seq_len=1024, gen_tokens=256, dtype="bf16")
    one = estimate_memory(config, w)
    assert one.recurrent_state_bytes > 0
    usable = 72 * 2**30
    m = serving_memory(config, w, 8, usable)
    assert m.recurrent_state_bytes == 8 * one.recurrent_state_bytes
    assert m.used_bytes == (m.weights_bytes + m.workspace_bytes + m.kv_cache_bytes + m.kv_paging_bytes
                            + m.recurrent_state_bytes)  # fmt: skip
    most = m.max_concurrency
    assert most is not None and serving_memory(config, w, most, usable).fits
    assert not serving_memory(config, w, most + 1, usable).fits
