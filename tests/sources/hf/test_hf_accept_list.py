"""The accept-list derived from transformers' configuration classes (issue 23, item 4).

``scripts/hf_accept_list.py`` writes ``embedcalc/sources/hf/accept_list.json`` from the installed transformers;
here it is regenerated and found current, every file transformers' own classes write for a supported family is
accepted (the class's defaults, and every fixture re-saved with ``save_pretrained``, counting what the original
counts), and a key the class writes is never "unknown": at the class default it is accepted, derived it is accepted
when it agrees, and at another value it stays an error.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hf_reference import FIXTURES, quiet_transformers
from paths import SCRIPTS, load_script

from embedcalc.analysis.params import count_params
from embedcalc.errors import ConfigError
from embedcalc.sources.hf import FAMILIES, accept, map_hf_config
from embedcalc.sources.hf import keys as hf_keys
from embedcalc.sources.hf.reader import Family, KeyReader
from embedcalc.sources.hf.registry import CONFIG_TYPE, REMOTE_CODE
from embedcalc.sources.loading import load_target

SCRIPT = SCRIPTS / "hf_accept_list.py"
# files of families transformers has a class for (the remote-code ones have none to re-save with)
FIXTURE_FILES = sorted(p for p in FIXTURES.glob("*.json")
                       if json.loads(p.read_text(encoding="utf-8")).get("model_type") not in REMOTE_CODE)  # fmt: skip
CLASS_FAMILIES = sorted(set(FAMILIES) - REMOTE_CODE)


@pytest.fixture(scope="module")
def transformers() -> Any:
    return quiet_transformers()


def test_accept_list_is_current(transformers: Any) -> None:
    recorded = accept.transformers_version()
    assert transformers.__version__ == recorded, (
        f"the accept-list was generated from transformers {recorded}, this is {transformers.__version__}: "
        "install that version (CI does) or regenerate with `python scripts/hf_accept_list.py`"
    )
    script = load_script("hf_accept_list")
    assert script.render(script.generate()) == accept.PATH.read_text(encoding="utf-8"), (
        "stale: run `python scripts/hf_accept_list.py`"
    )


def test_every_supported_family_is_listed() -> None:
    assert all(accept.class_keys(model_type) is not None for model_type in CLASS_FAMILIES)
    assert all(accept.class_keys(model_type) is None for model_type in REMOTE_CODE)
    for model_type in CLASS_FAMILIES:
        family = FAMILIES[model_type]
        keys = accept.class_keys(model_type)
        assert keys is not None and keys.config_class == family.config_class, model_type


def test_every_key_every_config_writes_has_a_reason() -> None:
    """PreTrainedConfig's own keys are harmless whatever the family: each has a common reason or is a key whose
    harmful values are named (CONDITIONAL)."""
    unclassified = [k for k in accept.base_keys() if k not in hf_keys.CONDITIONAL
                    and k != "architectures" and hf_keys.common_reason(k, None) is None]  # fmt: skip
    assert unclassified == []


def test_derived_keys_are_classified_by_what_transformers_does_with_them() -> None:
    deepseek, gemma3, cohere2 = (accept.class_keys(t) for t in ("deepseek_v3", "gemma3_text", "cohere2"))
    assert deepseek is not None and gemma3 is not None and cohere2 is not None
    assert deepseek.derived["qk_head_dim"] == "read"  # kept on the config and read by generation/utils.py
    assert deepseek.derived["head_dim"] == "recomputed"  # = qk_rope_head_dim, whatever the file says
    assert gemma3.derived == {"_sliding_window_pattern": "unread"}
    assert cohere2.derived == {"head_dim": "recomputed"}


def _defaults(transformers: Any, model_type: str) -> dict[str, Any]:
    data: dict[str, Any] = transformers.CONFIG_MAPPING[CONFIG_TYPE.get(model_type, model_type)]().to_dict()
    data["model_type"] = model_type  # kimi_k2's file names its own type beside DeepseekV3Config
    if model_type == "deepseek_v2":
        data["num_experts_per_tok"] = 6  # DeepseekV2Config's default is None, which no MoE model can use
    if model_type == "dots1":  # Dots1Config's experts are None by default, which no MoE model can use
        data |= {"n_routed_experts": 128, "num_experts_per_tok": 6, "n_shared_experts": 2}
    if model_type == "lfm2_moe":  # Lfm2MoeConfig's layer_types is None by default, which it cannot build
        data["layer_types"] = ["conv", "conv", "full_attention", "conv"] * (data["num_hidden_layers"] // 4)
    return data


@pytest.mark.parametrize("model_type", CLASS_FAMILIES)
def test_the_default_file_of_every_class_is_accepted(transformers: Any, model_type: str) -> None:
    """``to_dict()`` of the class with its defaults: every parameter and every key it derives, written out."""
    mapping = map_hf_config(_defaults(transformers, model_type), "test")
    keys = accept.class_keys(model_type)
    assert keys is not None
    reported = [m.key for m in mapping.report.mapped] + [i.key for i in mapping.report.ignored]
    seen = {part.strip().split(".")[0] for key in reported for part in key.split(",")}
    # every key it writes is mapped or ignored with a reason
    assert keys.written - {"model_type"} - seen == set()


def _resave(transformers: Any, raw: dict[str, Any], directory: Path) -> Path:
    loadable = {k: v for k, v in raw.items() if k != "auto_map"}
    config = transformers.CONFIG_MAPPING[raw["model_type"]].from_dict(loadable)
    config.save_pretrained(directory)
    return directory / "config.json"


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: p.stem)
def test_a_fixture_resaved_by_transformers_counts_the_same(
    transformers: Any, path: Path, tmp_path: Path
) -> None:
    """What a fine-tune saved with transformers 5 looks like (``qk_head_dim``, ``_sliding_window_pattern``, the
    derived keys written out): accepted, with the count of the file as published."""
    raw = json.loads(path.read_text(encoding="utf-8"))
    if raw.get("model_type") not in transformers.CONFIG_MAPPING:
        pytest.fail(f"{path.name}: transformers has no class for model_type {raw.get('model_type')!r}")
    try:
        resaved = _resave(transformers, raw, tmp_path)
    except Exception as exc:  # a file transformers itself refuses to load cannot be re-saved
        if path.stem == "llama-4-scout-17b-16e":  # attn_temperature_tuning: 4 in the hub file, a bool in 5.24
            return
        raise AssertionError(f"{path.name}: transformers refused it ({exc})") from exc
    original = count_params(load_target(str(path)).config).total
    if path.stem == "mt5-small":
        # MT5Config (5.24) sets tie_word_embeddings to true on load and writes it, without the marker T5Config
        # keeps (scale_decoder_outputs), so the re-saved file says tied and counts the head once
        original -= raw["vocab_size"] * raw["d_model"]
    assert count_params(load_target(str(resaved)).config).total == original


# --- what the reader does with the class's keys -------------------------------------------------------------------


def test_a_derived_key_is_accepted_when_it_agrees_and_named_when_not() -> None:
    raw = json.loads((FIXTURES / "deepseek-v3.json").read_text(encoding="utf-8"))
    report = map_hf_config(raw | {"qk_head_dim": 192}, "test").report
    assert any(i.key == "qk_head_dim" for i in report.ignored)
    with pytest.raises(ConfigError) as info:
        map_hf_config(raw | {"qk_head_dim": 100}, "test")
    (problem,) = info.value.problems
    assert problem.path == "qk_head_dim"
    assert "qk_nope_head_dim + qk_rope_head_dim = 192" in problem.message


def test_gemma3_sliding_window_pattern_written_on_save_is_accepted() -> None:
    raw = json.loads((FIXTURES / "gemma-3-1b.json").read_text(encoding="utf-8"))
    report = map_hf_config(raw | {"_sliding_window_pattern": 6}, "test").report
    (ignored,) = [i for i in report.ignored if i.key == "_sliding_window_pattern"]
    assert "no modeling code" in ignored.reason


def _reader(raw: dict[str, Any]) -> KeyReader:
    family = Family("llama", "LlamaConfig", "LlamaForCausalLM", "llama-2-7b", {}, lambda r: None)
    return KeyReader(raw, family)


def test_a_parameter_of_the_class_no_rule_maps_is_accepted_only_at_its_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A parameter the class declares but the family leaves to the class default (as a newer transformers adds
    one): at the default it builds the model the counts were checked on; at another value it is an error."""
    listed = accept.class_keys("llama")
    assert listed is not None
    widened = accept.ClassKeys(listed.config_class, listed.params | {"new_width"}, listed.defaults | {"new_width": 8},
                               listed.written, listed.derived, {})  # fmt: skip
    monkeypatch.setattr(accept, "class_keys", lambda model_type: widened)
    at_default = _reader({"new_width": 8})
    at_default.classify_rest()
    assert at_default.problems == [] and [i.key for i in at_default.ignored] == ["new_width"]
    other = _reader({"new_width": 16, "new_widht": 3})
    other.classify_rest()
    assert [(p.path, p.code) for p in other.problems] == [("new_width", "hf_unmapped_key"),
                                                          ("new_widht", "hf_unknown_key")]  # fmt: skip
    assert "(default 8)" in other.problems[0].message
    assert "did you mean 'new_width'?" in other.problems[1].message


def test_a_key_the_class_neither_declares_nor_writes_stays_unknown() -> None:
    raw = json.loads((FIXTURES / "llama-2-7b.json").read_text(encoding="utf-8"))
    with pytest.raises(ConfigError) as info:
        map_hf_config(raw | {"num_hiden_layers": 3}, "test")
    (problem,) = info.value.problems
    assert problem.code == "hf_unknown_key"
    assert "did you mean 'num_hidden_layers'?" in problem.message
    assert "LlamaConfig neither declares nor writes it" in problem.message


def test_the_transformers_js_config_is_accepted() -> None:
    raw = json.loads((FIXTURES / "llama-2-7b.json").read_text(encoding="utf-8"))
    report = map_hf_config(raw | {"transformers.js_config": {"dtype": "q4"}}, "test").report
    assert any(i.key == "transformers.js_config" for i in report.ignored)


def test_same_value_keeps_booleans_apart_from_numbers() -> None:
    assert accept.same_value(0, 0.0) and accept.same_value(None, None) and accept.same_value([1], [1])
    assert (
        not accept.same_value(True, 1) and not accept.same_value(0, False) and not accept.same_value("1", 1)
    )
