"""``analyze --mode training --peft ...``: the options, the streams, the exit codes and the JSON keys of a fine-tune."""

from __future__ import annotations

import json
from typing import Any

import pytest
from paths import HF_FIXTURES


def test_done_when_lora_counts(cli: Any) -> None:
    result = cli(
        "analyze",
        "llama-2-7b",
        "--mode",
        "training",
        "--peft",
        "lora",
        "--lora-rank",
        "8",
        "--lora-targets",
        "q_proj,v_proj",
    )
    assert result.exit_code == 0, result.stderr
    assert "4,194,304" in result.stdout and "6,742,609,920" in result.stdout


def test_json_carries_the_finetune_and_its_device_memory(cli: Any) -> None:
    result = cli(
        "analyze",
        "mistral-7b",
        "--mode",
        "training",
        "--peft",
        "qlora",
        "--lora-targets",
        "all-linear",
        "--lora-rank",
        "16",
        "--optimizer",
        "paged_adamw_8bit",
        "--format",
        "json",
    )
    assert result.exit_code == 0, result.stderr
    entry = json.loads(result.stdout)["results"][0]
    tune = entry["finetune"]
    assert tune["method"] == "qlora" and tune["target_modules"] == 32 * 7
    assert tune["trainable_params"] == 41_943_040
    assert entry["memory"]["total_bytes"] == tune["memory"]["device_bytes"]
    assert tune["memory"]["breakdown"]["weights/nf4"] > 0


def test_peft_outside_training_is_a_usage_error(cli: Any) -> None:
    result = cli("analyze", "gpt2", "--peft", "lora")
    assert result.exit_code == 2
    assert "--mode training" in result.stderr


def test_unknown_target_module_names_the_modules(cli: Any) -> None:
    result = cli("analyze", "gpt2", "--mode", "training", "--peft", "lora", "--lora-targets", "q_proj")
    assert result.exit_code == 3
    assert "c_attn" in result.stderr and "q_proj" in result.stderr


def test_freeze_and_offload(cli: Any) -> None:
    result = cli(
        "analyze",
        "gpt2",
        "--mode",
        "training",
        "--freeze",
        "embedding,layers:0-5",
        "--offload",
        "optimizer",
        "--format",
        "json",
    )
    assert result.exit_code == 0, result.stderr
    memory = json.loads(result.stdout)["results"][0]["finetune"]["memory"]
    assert memory["host_bytes"] > 0 and memory["pcie_bytes_per_step"] > 0


def test_cli_plan_peft(cli: Any) -> None:
    result = cli("plan", "mistral-7b", "--mode", "training", "--peft", "qlora", "--train-tokens", "100M",
                 "--hardware", "rtx-4090", "--format", "json")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    rows = json.loads(result.stdout)["results"][0]["rows"]
    assert any(r["method"] == "qlora" and r["fits"] for r in rows)
    inference = cli("plan", "mistral-7b", "--peft", "qlora")
    assert inference.exit_code == 2 and "--mode training" in inference.stderr


# --- verify --peft ------------------------------------------------------------------------------------------------


def _rows(result: Any) -> dict[str, tuple[int, int]]:
    tune = json.loads(result.stdout)["results"][0]["finetune"]
    return {r["component"]: (r["analytic"], r["counted"]) for r in tune["rows"]}


@pytest.mark.torch
def test_verify_peft_on_a_preset_counts_embedcalc_s_adapters(cli: Any) -> None:
    """A preset: embedcalc's torch model with real adapters, exact; peft's side says why it did not run."""
    pytest.importorskip("torch")
    result = cli("verify", "gpt2", "--peft", "dora", "--lora-rank", "4", "--lora-targets", "all-linear",
                 "--modules-to-save", "lm_head", "--format", "json")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    tune = json.loads(result.stdout)["results"][0]["finetune"]
    rows = _rows(result)
    assert rows["trainable — embedcalc's torch model with adapters"] == (39_270_144, 39_270_144)
    assert rows["all — embedcalc's torch model with adapters"] == (163_709_952, 163_709_952)
    assert tune["agree"] and "not a Hugging Face config.json" in tune["not_run"][0]


@pytest.mark.torch
@pytest.mark.slow  # builds gpt2 twice on the meta device: embedcalc's and transformers' with peft
def test_verify_peft_on_a_hub_file_counts_as_peft(cli: Any) -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("peft")
    result = cli("verify", str(HF_FIXTURES / "gpt2.json"), "--peft", "lora", "--format", "json")
    assert result.exit_code == 0, result.stderr
    rows = _rows(result)
    assert rows["trainable — peft on transformers' GPT2LMHeadModel"] == (294_912, 294_912)
    assert rows["all — peft on transformers' GPT2LMHeadModel"] == (124_734_720, 124_734_720)
    table = cli("verify", str(HF_FIXTURES / "gpt2.json"), "--peft", "lora")
    assert "GPT2LMHeadModel" in table.stdout and "294,912" in table.stdout


def test_verify_peft_refusals(cli: Any) -> None:
    sharded = cli("verify", "gpt2", "--peft", "lora", "--tp", "2")
    assert sharded.exit_code == 2 and "--peft" in sharded.stderr
    no_peft = cli("verify", "gpt2", "--lora-targets", "c_attn")
    assert no_peft.exit_code == 2 and "--peft" in no_peft.stderr
    bad = cli("verify", "gpt2", "--peft", "lora", "--lora-targets", "q_proj")
    assert bad.exit_code == 3 and "c_attn" in bad.stderr


def test_plan_over_the_whole_catalogue_keeps_devices_it_cannot_time(cli: Any) -> None:
    """The done-when command as written (no --hardware): a device without a bf16 peak in the catalogue (T4) is a
    row with its reason, not the plan's failure; a 24 GB device fits QLoRA and full fine-tuning says why not."""
    result = cli("plan", "mistral-7b", "--mode", "training", "--peft", "qlora", "--train-tokens", "100M",
                 "--format", "json")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    rows = json.loads(result.stdout)["results"][0]["rows"]
    by = {(r["device"], r["method"]): r for r in rows}
    assert by["rtx-4090", "qlora"]["fits"] and by["rtx-4090", "qlora"]["memory_limit_bytes"] == 24 * 2**30
    assert (
        not by["rtx-4090", "full"]["fits"] and "memory does not fit" in by["rtx-4090", "full"]["reasons"][0]
    )
    assert any("cannot be timed" in r["reasons"][0] for r in rows if r["device"] == "t4")
