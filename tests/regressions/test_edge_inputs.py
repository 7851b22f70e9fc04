"""Inputs that once misbehaved: YAML 1.1 number forms, generated tokens past the context, budgets on impossible
workloads, astronomically deep stacks under pipelining, output that cannot be written, numeric-looking text."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from embedcalc.analysis.parallel import stage_layout
from embedcalc.sources.loading import load_target

SMALL = {"architecture": "decoder", "vocab_size": 1024, "max_seq_len": 64, "embed_dim": 64, "num_heads": 4,
         "num_layers": 2}  # fmt: skip


@pytest.mark.parametrize(
    ("text", "key", "hint"),
    [
        ("max_seq_len: 0512", "max_seq_len", "write 512"),  # YAML 1.1 octal: would silently be 330
        ("num_layers: 1:30", "num_layers", "plain decimal"),  # YAML 1.1 base 60: would be 90
        ("num_heads: 0x4", "num_heads", "plain decimal"),
        ("num_layers: 1_0", "num_layers", "plain decimal"),
    ],
)
def test_yaml_11_number_forms_are_refused(cli: Any, tmp_path: Path, text: str, key: str, hint: str) -> None:
    lines = [f"{k}: {v}" for k, v in SMALL.items() if k != key] + [text]
    path = tmp_path / "c.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = cli("check", str(path))
    assert result.exit_code == 3
    assert key in result.stderr and hint in result.stderr


def test_yaml_12_floats_and_decimal_ints_still_load(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("\n".join(f"{k}: {v}" for k, v in SMALL.items()) + "\ndropout: 1e-1\n", encoding="utf-8")
    config = load_target(str(path)).config
    assert config.dropout == 0.1 and config.max_seq_len == 64


def test_set_octal_looking_value_is_refused(cli: Any) -> None:
    result = cli("check", "gpt2", "--set", "max_seq_len=0512")
    assert result.exit_code == 3 and "write 512" in result.stderr


def test_text_field_override_stays_text(cli: Any) -> None:
    result = cli("check", "gpt2", "--set", "name=123", "--format", "json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["results"][0]["config"]["name"] == "123"


def test_gen_tokens_past_a_learned_context_is_invalid(cli: Any) -> None:
    result = cli("analyze", "gpt2", "--seq-len", "1000", "--gen-tokens", "100")
    assert result.exit_code == 3
    assert "1100 exceeds max_seq_len 1024" in result.stderr
    ok = cli("analyze", "gpt2", "--seq-len", "1000", "--gen-tokens", "24", "--format", "json")
    assert ok.exit_code == 0


def test_gen_tokens_where_nothing_decodes_warns(cli: Any) -> None:
    result = cli("analyze", "bert-base", "--gen-tokens", "10", "--format", "json")
    assert result.exit_code == 0
    assert "--gen-tokens is ignored" in result.stderr
    assert json.loads(result.stdout)["results"][0]["memory"]["kv_cache_bytes"] == 0


def test_check_budget_on_an_impossible_workload_is_invalid(cli: Any) -> None:
    result = cli("check", "bert-base", "--seq-len", "100000", "--max-memory", "100GiB", "--format", "json")
    assert result.exit_code == 3
    data = json.loads(result.stdout)
    assert data["status"] == "error" and data["workload"]["seq_len"] == 100000
    assert data["problems"][0]["code"] == "seq_len_over_context"


def test_stage_layout_is_arithmetic_for_any_depth() -> None:
    config = load_target(
        "transformer-base", ["num_layers=100000000000000000000", "num_decoder_layers=7"]
    ).config
    stages = stage_layout(config, 3)
    assert sum(s.num_layers for s in stages) == 10**20 + 7
    assert [s.num_layers for s in stages] == [
        33333333333333333336,
        33333333333333333336,
        33333333333333333335,
    ]
    assert stages[-1].layers == {"encoder": 33333333333333333328, "decoder": 7}


def test_cli_counts_an_astronomically_deep_stack(cli: Any) -> None:
    result = cli(
        "analyze", "gpt2", "--set", "num_layers=100000000000000000000", "--pp", "4", "--format", "json"
    )
    assert result.exit_code == 0, result.stderr
    # one gpt2 block has 7,087,872 parameters; embeddings 39,383,808; final norm 1,536
    assert (
        json.loads(result.stdout)["results"][0]["params"]["total"] == 7_087_872 * 10**20 + 39_383_808 + 1_536
    )


def test_unwritable_stdout_is_an_error_not_a_traceback(tmp_path: Path) -> None:
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full on this system")
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "embedcalc", "analyze", "bert-base", "--format", "json"],
                              stdout=full, stderr=subprocess.PIPE, text=True, timeout=60, check=False)  # fmt: skip
    assert proc.returncode == 1
    assert "cannot write output" in proc.stderr and "Traceback" not in proc.stderr


def test_malformed_set_is_a_usage_error(cli: Any) -> None:
    result = cli("check", "bert-base", "--set", "=5")
    assert result.exit_code == 2 and "key=value" in result.stderr


def test_pasteable_fix_in_heads_message(cli: Any, write_config: Callable[..., Path]) -> None:
    result = cli("check", "bert-base", "--set", "num_heads=10")
    assert "--set num_heads=8 or --set num_heads=12" in result.stderr


ATTENTION_FREE = {"model_type": "granitemoehybrid"}  # GraniteMoeHybridConfig's defaults: every layer Mamba-2


@pytest.mark.parametrize("args", [
    ("analyze", "--format", "json"), ("check", "--format", "json"), ("explain", "width-depth", "--format", "json"),
    ("explain", "cost", "--format", "json"), ("sweep", "--seq-len", "128,1024", "--format", "json"),
])  # fmt: skip
def test_a_model_without_attention_has_no_crossover(
    cli: Any, write_config: Callable[..., Path], args: tuple[str, ...]
) -> None:
    """No softmax attention layer, no n² term: n* is null in JSON and "none" in tables, not a ZeroDivisionError
    (every command that reports the crossover traced back on an all-Mamba model)."""
    path = write_config(ATTENTION_FREE, "config.json")
    result = cli(args[0], str(path), *args[1:])
    assert result.exit_code == 0, result.stderr or result.exception
    text = json.dumps(json.loads(result.stdout))
    assert '"crossover_seq_len": null' in text or args[0] == "check"
    table = cli(args[0], str(path), *args[1:-2])
    assert table.exit_code == 0 and "Traceback" not in table.stdout + table.stderr
    if args[0] == "analyze":
        assert "none (no n² term)" in table.stdout
