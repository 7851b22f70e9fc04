"""Context parallelism (``--cp``, issue 35 item 5: Megatron-core's, TransformerEngine's ring attention): a rank
holds its stage's weights and seq_len / cp tokens' activations, ZeRO shards and gradients reduce over dp × cp, the
ring passes key/value chunks point to point, a rank's attention cores do 1 / cp of the sequence's work; what the
ring layout cannot split is refused naming --cp (exit 3); plan splits long sequences with it. Identities between
layouts, exact integers, never a speed."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

import embedcalc
from embedcalc.cli.app import app

runner = CliRunner()
MODEL = "llama-3.1-8b"  # 32 layers, 8 KV heads of 128, full causal attention
BASE = ("--mode", "training", "--dtype", "bf16", "--hardware", "h100-sxm", "--train-tokens", "1B")


def _analyze(*args: str) -> dict[str, Any]:
    result = runner.invoke(app, ["analyze", MODEL, *BASE, *args, "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["results"][0]  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def runs() -> dict[str, dict[str, Any]]:
    return {
        # 4 context-parallel ranks of a 16k sequence, TP 2, DP 2, ZeRO 1
        "cp": _analyze("--seq-len", "16384", "--tp", "2", "--cp", "4", "--dp", "2", "--zero", "1"),
        # the same sequence on one rank per TP group
        "whole": _analyze("--seq-len", "16384", "--tp", "2", "--dp", "2", "--zero", "1"),
        # what one CP rank computes, run without CP; and ZeRO over as many ranks as dp × cp
        "local": _analyze("--seq-len", "4096", "--tp", "2", "--dp", "8", "--zero", "1"),
    }


def test_memory_is_the_weights_and_a_quarter_of_the_sequence(runs: dict[str, dict[str, Any]]) -> None:
    cp, whole, local = (runs[k]["memory"] for k in ("cp", "whole", "local"))
    assert cp["weights_bytes"] == whole["weights_bytes"] and cp["gradients_bytes"] == whole["gradients_bytes"]
    assert cp["optimizer_bytes"] == local["optimizer_bytes"]  # ZeRO 1 over dp × cp = 8 ranks
    assert cp["activations_bytes"] == local["activations_bytes"]  # seq_len / cp tokens' activations
    assert cp["activations_bytes"] * 4 == whole["activations_bytes"]  # fused attention: linear in the tokens


def test_a_rank_computes_its_tokens_and_a_quarter_of_the_attention(runs: dict[str, dict[str, Any]]) -> None:
    cp, whole, local = (runs[k]["time"]["breakdown"]["training_step"] for k in ("cp", "whole", "local"))
    assert cp.keys() == whole.keys()
    for key, c in cp.items():
        if key.rsplit("/", 1)[-1] in ("scores", "context"):  # its queries against every key, balanced
            assert c["flops"] * 4 == whole[key]["flops"], key
        elif key != "optimizer":
            assert c["flops"] == local[key]["flops"] and c["weight_bytes"] == local[key]["weight_bytes"], key
    train = runs["cp"]["time"]["train"]
    assert train["devices"] == 2 * 4 * 2  # tp × cp × dp
    assert train["tokens_per_step"] == runs["whole"]["time"]["train"]["tokens_per_step"]  # sequences: dp's


def test_the_ring_and_the_gradient_group(runs: dict[str, dict[str, Any]]) -> None:
    by_kind = {(c["group"], c["phase"]): c for c in runs["cp"]["communication"]["collectives"]}
    ring = by_kind[("cp", "forward")]
    # each layer: cp - 1 sends of the rank's chunk, 4096 tokens × its 4 KV heads (8 over TP 2) × (K + V) 128 wide
    per_send = 4096 * 4 * (128 + 128) * 2
    assert ring["kind"] == "send" and ring["group_size"] == 4
    assert ring["count"] == 32 * 3 and ring["payload_bytes"] == 32 * 3 * per_send
    back = by_kind[("cp", "backward")]
    assert back["count"] == 2 * ring["count"] and back["payload_bytes"] == 2 * ring["payload_bytes"]
    dp = [c for c in runs["cp"]["communication"]["collectives"] if c["group"] == "dp"]
    local_dp = [c for c in runs["local"]["communication"]["collectives"] if c["group"] == "dp"]
    assert dp == local_dp  # gradients over dp × cp = 8 ranks holding the same weights
    tp = [c for c in runs["cp"]["communication"]["collectives"] if c["group"] == "tp"]
    assert tp == [
        c for c in runs["local"]["communication"]["collectives"] if c["group"] == "tp"
    ]  # its tokens
    assert "context-parallel ring (exposed)" in runs["cp"]["time"]["terms"]["training_step"]


@pytest.mark.parametrize(
    ("target", "args", "code"),
    [
        (MODEL, ("--seq-len", "8192", "--cp", "2"), "cp_inference"),
        (MODEL, ("--mode", "training", "--seq-len", "8190", "--cp", "2"), "cp_seq_len"),
        (MODEL, ("--mode", "training", "--seq-len", "8192", "--cp", "2", "--attention", "eager"), "cp_eager"),
        ("qwen3-next-80b-a3b", ("--mode", "training", "--seq-len", "8192", "--cp", "2"), "cp_model"),
        ("bert-base", ("--mode", "training", "--seq-len", "512", "--cp", "2"), "cp_model"),
        ("gemma-2-9b", ("--mode", "training", "--seq-len", "8192", "--cp", "2"), "cp_model"),
    ],
)
def test_what_the_ring_cannot_split_is_refused(target: str, args: tuple[str, ...], code: str) -> None:
    result = runner.invoke(app, ["analyze", target, *args, "--format", "json"])
    assert result.exit_code == 3, result.output
    problems = json.loads(result.stdout)["problems"]
    assert any(p["path"] == "--cp" and p["code"] == code for p in problems), problems
    assert "Traceback" not in result.output


def test_plan_splits_a_long_sequence_and_its_rows_are_analyzes() -> None:
    p = embedcalc.plan(MODEL, mode="training", train_tokens=10**10, seq_len=131072, hardware=["h100-sxm"],
                       max_devices=32)  # fmt: skip
    split = [r for r in p.rows if r.layout.cp > 1 and r.fits]
    assert split, [r.layout.label for r in p.rows]
    row = min(split, key=lambda r: r.wall_s or 0)
    assert (
        f"CP {row.layout.cp}" in row.layout.label
        and row.layout.devices == row.layout.tp * row.layout.cp * (row.layout.dp)
    )
    args = ["--seq-len", "131072", "--tp", str(row.layout.tp), "--cp", str(row.layout.cp), "--dp", str(row.layout.dp),
            "--zero", str(row.layout.zero), "--recompute", row.layout.recompute, "--train-tokens", "10B"]  # fmt: skip
    result = runner.invoke(app, ["analyze", MODEL, "--mode", "training", "--dtype", row.dtype, "--hardware",
                                 "h100-sxm", *args, "--format", "json"])  # fmt: skip
    assert result.exit_code == 0, result.output
    a = json.loads(result.stdout)["results"][0]
    assert row.memory_bytes == a["memory"]["total_bytes"] and row.step_s == a["time"]["step_s"]
    # a short sequence is not split, even where the model state makes a layout recompute (the 70B at 4096 tokens)
    for model in (MODEL, "llama-3.1-70b"):
        short = embedcalc.plan(model, mode="training", train_tokens=10**10, seq_len=4096, hardware=["h100-sxm"],
                               max_devices=64)  # fmt: skip
        assert any(r.layout.recompute != "none" for r in short.rows if r.fits) or model == MODEL
        assert all(r.layout.cp == 1 for r in short.rows), model
