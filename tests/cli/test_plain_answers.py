"""Answers that do not mislead (issue 34): the serving total is what the server holds, set against the usable share
with the margin; training plan rows show the tokens per optimizer step they differ by; verify ends in a verdict;
bench names the noise its error may be."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from embedcalc.reconcile.bench import NOISY_SPREAD, Measurement

SERVING = ["analyze", "llama-3.1-8b", "--hardware", "rtx-4090", "--concurrency", "16"]


def _lines(text: str) -> list[str]:
    return [line.strip("│ ").rstrip() for line in text.splitlines()]


def test_the_serving_total_is_what_fits_in_the_usable_share(cli: Any) -> None:
    text = cli(*SERVING).stdout
    serving = json.loads(cli(*SERVING, "--format", "json").stdout)["results"][0]["memory"]["serving"]
    (total,) = [line for line in _lines(text) if line.startswith("serving total")]
    assert f"{serving['used_bytes']:,}" in total  # weights + workspace + KV, the reserve apart
    assert serving["used_bytes"] < serving["usable_bytes"]
    (usable,) = [line for line in _lines(text) if line.startswith("usable: 90% of 24.00 GiB")]
    assert f"{serving['usable_bytes']:,}" in usable
    (verdict,) = [line for line in _lines(text) if line.startswith("fits, ")]
    assert "to spare" in verdict and f"at most {serving['max_concurrency']:,} sequences fit" in verdict


def test_a_server_that_does_not_fit_says_by_how_much(cli: Any) -> None:
    text = cli(*SERVING, "--seq-len", "32k").stdout
    (verdict,) = [line for line in _lines(text) if line.startswith("does not fit, ")]
    assert "GiB short" in verdict


def test_training_plan_rows_show_their_tokens_per_step(cli: Any) -> None:
    args = ["plan", "llama-3.1-8b", "--mode", "training", "--train-tokens", "1B", "--top", "3"]
    text = cli(*args).stdout
    assert "tokens/step" in text
    assert "rows differ in tokens per optimizer step (--global-batch fixes one for all)" in " ".join(
        text.split()
    )
    rows = json.loads(cli(*args, "--format", "json").stdout)["results"][0]["layouts"][:3]
    for row in rows:  # DP replicas x micro-batch 1 x 4,096 tokens (plan's training default)
        dp = row["layout"]["dp"]
        assert row["train"]["tokens_per_step"] == dp * 4096
    fixed = cli(*args, "--global-batch", "512").stdout
    assert "global batch 512 sequences on every row" in " ".join(fixed.split())


def test_verify_ends_in_a_one_line_verdict(cli: Any) -> None:
    pytest.importorskip("torch")
    result = cli("verify", "bert-base")
    assert result.exit_code == 0
    tail = " ".join(result.stdout.split("└")[-1].split("\n", 1)[1].split())  # after the last table
    assert tail == (
        "verify bert-base: exact — 109,482,240 parameters over 11 components and 22,348,431,360 forward FLOPs over "
        "7 components, analytic = torch"
    )


def _measurement(**changes: Any) -> Measurement:
    base = Measurement(
        device="cpu", threads=2, build_s=0.1, median_s=1.0, p10_s=0.9, p90_s=1.1, repeat=10, tokens_per_s=128.0,
        sequences_per_s=1.0, flops_per_step=1, achieved_flops_per_s=1.0, peak_flops_per_s=1.0, peak_source="",
        utilization=1.0, spec_peak_flops_per_s=None, spec_peak_source=None, spec_utilization=None,
        peak_memory_bytes=1, peak_memory_method="", predicted_memory_bytes=1, memory_error_pct=0.0,
        predicted={"median_s": 1.0}, prediction_note="", load_average=0.5, cpus=2,
    )  # fmt: skip
    return replace(base, **changes)


def test_bench_names_the_noise_its_error_may_be() -> None:
    assert _measurement().noise is None
    assert _measurement().to_json()["noise"] is None
    busy = _measurement(load_average=12.2).noise
    assert busy is not None and busy.startswith("the machine is busy (load 12.2 on 2 CPUs)")
    spread = _measurement(p10_s=1.0, p90_s=NOISY_SPREAD * 1.4).noise
    assert spread is not None and "step times spread 2.1x (p90 / p10)" in spread


def test_the_verdict_never_calls_a_run_exact_that_differs_somewhere() -> None:
    from embedcalc.reconcile.verify import ReconcileRow, Reconciliation
    from embedcalc.render.tables import verify_verdict

    params = Reconciliation((ReconcileRow("embedding/token", 10, 10), ReconcileRow("head/lm", 5, 5)))
    flops = Reconciliation((ReconcileRow("head/lm", 7, 7),))
    assert verify_verdict("m", params, flops, [("every shard", True)]) == (
        "verify m: exact — 15 parameters over 2 components and 7 forward FLOPs over 1 component, analytic = torch; "
        "every shard too"
    )
    assert verify_verdict("m", params, flops, [("every shard", False)]).endswith(
        "exact, but every shard DIFFER"
    )
    off = Reconciliation((ReconcileRow("head/lm", 7, 8),))
    assert verify_verdict("m", params, off) == "verify m: DIFFER on 1 component(s): head/lm"
