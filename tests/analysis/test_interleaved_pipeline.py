"""The interleaved pipeline schedule (issue 35, item 5; Narayanan et al. 2021 §2.2.2): ``--pp-virtual v`` chunks per
rank cut the bubble v-fold at v times the stage-boundary sends, hold 1 + (p − 1)/(p·v) times 1F1B's activations,
and are refused where Megatron-LM refuses them. No speed is asserted."""

from __future__ import annotations

import json
from fractions import Fraction
from typing import Any

import pytest
from typer.testing import CliRunner

from embedcalc.analysis.time.schedule import bubble_fraction
from embedcalc.cli.app import app

runner = CliRunner()
GPT3 = ("analyze", "gpt3-175b", "--mode", "training", "--hardware", "a100-80gb", "--dtype", "bf16", "--seq-len",
        "2048", "--tp", "8", "--pp", "16", "--dp", "8", "--batch-size", "1", "--global-batch", "128",
        "--recompute", "full")  # fmt: skip


def _result(*extra: str) -> dict[str, Any]:
    result = runner.invoke(app, [*GPT3, *extra, "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["results"][0]  # type: ignore[no-any-return]


@pytest.mark.parametrize(("p", "m", "v"), [(16, 16, 1), (16, 16, 2), (8, 64, 4), (4, 4, 3)])
def test_bubble_is_megatrons_fraction_of_the_ideal_step(p: int, m: int, v: int) -> None:
    share = bubble_fraction(p, m, v)  # of the whole pipeline time
    assert share / (1 - share) == pytest.approx(
        (p - 1) / (v * m)
    )  # Megatron: bubble / ideal = (p − 1) / (v·m)
    if v == 1:
        assert share == pytest.approx((p - 1) / (m + p - 1))


def test_two_chunks_halve_the_bubble_and_double_the_sends() -> None:
    plain, interleaved = _result(), _result("--pp-virtual", "2")
    a, b = plain["time"]["terms"]["training_step"], interleaved["time"]["terms"]["training_step"]
    assert b["pipeline sends"] == pytest.approx(2 * a["pipeline sends"])
    per_mb_a = a["pipeline bubble"] / 15
    per_mb_b = b["pipeline bubble"] * 2 / 15
    # the same micro-batch time but for the extra sends of one micro-batch
    sends_per_mb = (b["pipeline sends"] - a["pipeline sends"]) / 16
    assert per_mb_b == pytest.approx(per_mb_a + sends_per_mb)
    assert (
        interleaved["time"]["schedule"]["accumulation_steps"]
        == plain["time"]["schedule"]["accumulation_steps"]
    )
    assert interleaved["time"]["step_s"] < plain["time"]["step_s"]


def test_interleaving_holds_more_activations_on_the_first_stage() -> None:
    plain = _result()["memory"]["activations_bytes"]
    interleaved = _result("--pp-virtual", "2")["memory"]["activations_bytes"]
    assert Fraction(interleaved, plain) == pytest.approx(1 + 15 / 32, abs=1e-9)


@pytest.mark.parametrize(
    ("args", "code", "words"),
    [
        (("--pp", "1", "--pp-virtual", "2"), 3, "--pp 1"),
        (("--pp-virtual", "4"), 3, "64 model chunks"),  # 96 blocks over 16 · 4 chunks
        (("--pp-virtual", "2", "--global-batch", "136"), 2, "multiple of --batch-size 1 × --dp 8 × --pp 16"),
    ],
)
def test_layouts_megatron_refuses_are_refused(args: tuple[str, ...], code: int, words: str) -> None:
    base = [a for a in GPT3 if a not in ("--global-batch", "128")]
    if "--global-batch" not in args:
        base += ["--global-batch", "128"]
    if "--pp" in args:
        i = base.index("--pp")
        del base[i : i + 2]
    result = runner.invoke(app, [*base, *args])
    assert result.exit_code == code, result.output
    assert words in result.stderr and "Traceback" not in result.output


def test_inference_has_no_virtual_stages() -> None:
    result = runner.invoke(app, ["analyze", "gpt2", "--pp", "2", "--pp-virtual", "2"])
    assert result.exit_code == 3 and "--mode training" in result.stderr
