"""``embedcalc diff A B`` (issue 13): every tensor of two torch models, kept / reshaped / new / dropped; the
loadable parameters against the analytic answer of ``explain fine-tune``; exit 4 without torch."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest
from typer.testing import CliRunner

from embedcalc.analysis.explain import explain_fine_tune
from embedcalc.cli.app import build_app
from embedcalc.sources.loading import load_target

pytestmark = pytest.mark.torch
pytest.importorskip("torch")

APP = build_app("diff")


def diff(*args: str) -> Any:
    return CliRunner().invoke(APP, ["diff", *args], env={"COLUMNS": "200", "NO_COLOR": "1"})


def diff_json(*args: str) -> dict[str, Any]:
    result = diff(*args, "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["command"] == "diff" and data["status"] == "ok"
    (entry,) = data["results"]
    return dict(entry)


def test_gqa_conversion_loads_everything_but_k_and_v() -> None:
    result = diff_json("llama-2-7b", "llama-2-7b", "--set", "num_kv_heads=8")
    assert result["totals"]["loadable_params"] == 5_664_673_792
    assert result["totals"]["params_a"] == 6_738_415_616
    reshaped = [t for t in result["tensors"] if t["status"] == "reshaped"]
    assert len(reshaped) == 64 and all(t["name"].endswith((".k.weight", ".v.weight")) for t in reshaped)
    assert all(t["shape_b"] == [1024, 4096] for t in reshaped)
    assert [n["code"] for n in result["notes"]] == ["kv_heads_changed"]


def test_bert_base_to_large_loads_nothing_width_dependent() -> None:
    result = diff_json("bert-base", "bert-large")
    kept = [t for t in result["tensors"] if t["status"] == "kept"]
    assert not [t for t in kept if 768 in t["shape_a"] or 1024 in t["shape_b"]]
    assert result["totals"]["loadable_params"] == sum(t["params_b"] for t in kept) == 0
    assert result["totals"]["params_to_initialise"] == 335_141_888
    new = {t["name"].split(".")[2] for t in result["tensors"] if t["status"] == "new"}
    assert new == {str(i) for i in range(12, 24)}
    assert "embed_dim_changed" in [n["code"] for n in result["notes"]]


def test_more_layers_keep_every_tensor_of_gpt2() -> None:
    result = diff_json("gpt2", "gpt2", "--set", "num_layers=24")
    in_a = [t for t in result["tensors"] if t["shape_a"] is not None]
    assert in_a and all(t["status"] == "kept" for t in in_a)
    assert result["totals"]["loadable_params"] == 124_439_808
    assert {t["status"] for t in result["tensors"]} == {"kept", "new"}
    per_block = 16  # weight and bias of Q, K, V, out, FFN in and out, and of 2 norms
    assert result["groups"]["decoder"]["tensors"]["new"] == 12 * per_block


def test_heads_alone_keep_every_shape_and_say_what_changes() -> None:
    result = diff_json("bert-base", "bert-base", "--set", "num_heads=16")
    assert result["totals"]["params_to_initialise"] == 0
    (note,) = result["notes"]
    assert note["code"] == "num_heads_changed" and "64 -> 48" in note["message"]


def test_identical_models() -> None:
    result = diff_json("t5-small", "t5-small")
    assert result["notes"][0]["code"] == "identical"
    assert result["totals"]["loadable_params"] == result["totals"]["params_b"] == 60_506_624


@pytest.mark.parametrize("preset", ["bert-base", "gpt2", "t5-small", "llama-2-7b"])
def test_analytic_fine_tune_answer_equals_the_torch_diff(preset: str) -> None:
    """explain fine-tune (analytic tensor list) and diff (torch names) are two implementations of one answer."""
    config = load_target(preset).config
    for scenario in explain_fine_tune(config).scenarios:
        overrides = [f"{scenario.field}={scenario.value_b}"]
        if scenario.field == "num_layers" and config.num_decoder_layers is not None:
            overrides.append(f"num_decoder_layers={2 * config.num_decoder_layers}")
        if scenario.field == "num_heads" and config.num_kv_heads is not None:
            overrides.append(f"num_kv_heads={min(config.num_kv_heads, scenario.value_b)}")
        args = [a for o in overrides for a in ("--set", o)]
        totals = diff_json(preset, preset, *args)["totals"]
        assert totals["loadable_params"] == scenario.loadable_params, (preset, scenario.field)
        assert totals["params_b"] == scenario.params_b, (preset, scenario.field)


def test_table_groups_by_component_and_folds_layers() -> None:
    result = diff("gpt2", "gpt2", "--set", "num_layers=24")
    assert result.exit_code == 0
    out = result.stdout
    assert "decoder.layers.0-11.attention.qkv.q.weight" in out
    assert "decoder.layers.12-23.attention.qkv.q.weight" in out
    assert "loadable from A unchanged" in out and "124,439,808" in out


def test_invalid_b_exits_3() -> None:
    result = diff("bert-base", "bert-base", "--set", "num_heads=10", "--format", "json")
    assert result.exit_code == 3
    assert json.loads(result.stdout)["status"] == "error"


def test_without_torch_exits_4(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    result = diff("bert-base", "bert-large")
    assert result.exit_code == 4
    assert "PyTorch is not installed" in result.stderr
