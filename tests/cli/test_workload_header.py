"""analyze says what workload its numbers are for and which sizes nobody chose, and warns when a training run's
time rests on a step far smaller than any published run's (issue 34)."""

from __future__ import annotations

import json
from typing import Any

from embedcalc.analysis.time.estimate import SMALLEST_PUBLISHED_STEP_TOKENS

RUN = ["pythia-1.4b", "--mode", "training", "--hardware", "h100-sxm", "--train-tokens", "100B", "--dp", "8"]


def test_the_header_names_the_defaults_nobody_chose(cli: Any) -> None:
    first = cli("analyze", "gpt2").stdout.splitlines()[0]
    assert first.startswith("Workload — gpt2: inference, batch 1 × seq_len 128, fp32 (preset)")
    assert "--batch-size 1" in first and "--seq-len 128" in first
    chosen = cli("analyze", "gpt2", "--seq-len", "128").stdout.splitlines()[0]
    assert "--batch-size 1" in chosen and "--seq-len" not in chosen  # given, even at the default's value
    assert "defaults" not in cli("analyze", "gpt2", "-b", "2", "-n", "64").stdout.splitlines()[0]


def test_a_training_run_at_the_default_step_is_flagged(cli: Any) -> None:
    result = cli("analyze", *RUN, "--format", "json")
    assert result.exit_code == 0
    warnings = json.loads(result.stdout)["results"][0]["warnings"]
    (small,) = [w for w in warnings if w["code"] == "small_training_step"]
    assert "1,024 tokens per optimizer step" in small["message"]  # 1 x 128 x 8 replicas
    assert f"{SMALLEST_PUBLISHED_STEP_TOKENS:,}" in small["message"]


def test_a_training_run_at_a_published_step_is_not(cli: Any) -> None:
    result = cli("analyze", *RUN, "--seq-len", "2048", "-b", "8", "--global-batch", "512", "--format", "json")
    assert result.exit_code == 0
    codes = [w["code"] for w in json.loads(result.stdout)["results"][0]["warnings"]]
    assert "small_training_step" not in codes
