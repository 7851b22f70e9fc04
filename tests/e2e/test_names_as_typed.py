"""Names and sizes as people type them (issue 34): presets, devices and dtypes in any case, the device spellings
of model cards and cloud consoles, and token lengths with vLLM's suffixes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from embedcalc.analysis.budget import SizeError, parse_length
from embedcalc.config.dtypes import DtypeError, canonical_dtype


def _json(cli: Any, *args: str) -> dict[str, Any]:
    result = cli(*args, "--format", "json")
    assert result.exit_code == 0, result.stderr
    return dict(json.loads(result.stdout))


def test_a_preset_in_the_case_of_its_model_card(cli: Any) -> None:
    typed = _json(cli, "analyze", "Llama-3.1-8B")["results"][0]
    shipped = _json(cli, "analyze", "llama-3.1-8b")["results"][0]
    assert typed["params"]["total"] == shipped["params"]["total"] == 8_030_261_248


@pytest.mark.parametrize("typed", ["H100-SXM", "H100 SXM", "h100_sxm", " h100-sxm "])
def test_a_device_in_any_case_and_separator(cli: Any, typed: str) -> None:
    entry = _json(cli, "analyze", "gpt2", "--hardware", typed)["results"][0]
    assert entry["time"]["hardware"] == "h100-sxm"


H100S = "h100-pcie or h100-sxm"


@pytest.mark.parametrize(("typed", "offered"), [("H100", H100S), ("h100-80gb", H100S),
                                                ("A100", "a100-40gb or a100-80gb")])  # fmt: skip
def test_a_device_family_or_variant_offers_the_family(cli: Any, typed: str, offered: str) -> None:
    result = cli("analyze", "gpt2", "--hardware", typed)
    assert result.exit_code == 2
    assert f"did you mean {offered}?" in result.stderr
    assert "a100-80gb" not in result.stderr or typed.lower().startswith("a100")


def test_plan_prices_and_repeats_name_devices_as_hardware_does(cli: Any) -> None:
    result = cli("plan", "llama-3.1-8b", "--hardware", "H100-SXM", "--hardware", "h100-sxm")
    assert result.exit_code == 2 and "given twice" in result.stderr
    plan = _json(cli, "plan", "llama-3.1-8b", "--hardware", "H100-SXM", "--price-per-hour", "H100-sxm=3")
    assert plan["results"][0]["layouts"][0]["price"] == {"per_device_hour": 3.0, "source": "--price-per-hour"}


@pytest.mark.parametrize(("typed", "short"), [("BF16", "bf16"), ("BFloat16", "bf16"), ("torch.float16", "fp16"),
                                              ("FP8", "fp8"), ("Int4", "int4")])  # fmt: skip
def test_a_dtype_in_any_case(typed: str, short: str) -> None:
    assert canonical_dtype(typed) == short


def test_a_dtype_flag_in_upper_case(cli: Any) -> None:
    assert _json(cli, "analyze", "gpt2", "--dtype", "BF16")["workload"]["dtype"] == "bf16"
    with pytest.raises(DtypeError):
        canonical_dtype("bf17")


@pytest.mark.parametrize(("typed", "tokens"), [("4096", 4096), ("8k", 8_000), ("8K", 8_192), ("128K", 131_072),
                                               ("25.6k", 25_600), ("1m", 1_000_000), ("1M", 1_048_576)])  # fmt: skip
def test_token_lengths_read_as_vllm_reads_them(typed: str, tokens: int) -> None:
    assert parse_length(typed) == tokens


@pytest.mark.parametrize("typed", ["1.5K", "8kb", "-3", "abc", "1.0001k", ""])
def test_token_lengths_that_do_not_parse(typed: str) -> None:
    with pytest.raises(SizeError):
        parse_length(typed)


def test_seq_len_flag_takes_suffixes_everywhere(cli: Any) -> None:
    assert _json(cli, "analyze", "llama-3.1-8b", "--seq-len", "8K")["workload"]["seq_len"] == 8_192
    planned = _json(
        cli, "plan", "llama-3.1-8b", "--hardware", "h100-sxm", "--seq-len", "8K", "--gen-tokens", "1k"
    )
    assert (planned["workload"]["seq_len"], planned["workload"]["gen_tokens"]) == (8_192, 1_000)
    result = cli("analyze", "gpt2", "--seq-len", "1.5K")
    assert result.exit_code == 2 and "ambiguous" in result.stderr
    result = cli("analyze", "gpt2", "--seq-len", "0")
    assert result.exit_code == 2 and "at least 1" in result.stderr


def test_check_with_set_and_no_model_says_what_set_changes(cli: Any) -> None:
    result = cli("check", "--set", "embed_dim=1000", "--set", "num_heads=12")
    assert result.exit_code == 2
    message = " ".join(result.stderr.replace("│", " ").split())
    assert "embedcalc check bert-base --set embed_dim=1000 --set num_heads=12" in message
    assert "embedcalc heads 1000" in message


def test_explain_with_a_topic_for_target_names_the_order(cli: Any) -> None:
    result = cli("explain", "heads")
    assert result.exit_code == 2
    message = " ".join(result.stderr.replace("│", " ").split())
    assert "'heads' is a topic" in message and "embedcalc explain bert-base heads" in message
    assert "unknown preset" not in message
