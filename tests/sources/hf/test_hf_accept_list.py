"""The accept-list derived from transformers' configuration classes and modeling code (issues 23 and 31).

``scripts/hf_accept_list.py`` writes ``embedcalc/sources/hf/accept_list.json`` and ``modeling_reads.json`` from the
newest transformers; here they are regenerated and found current (with the newest: an older transformers of the
supported range skips that one test, and a newer one fails it until the files are regenerated), every file
transformers' own classes write for a supported family is accepted (the class's defaults, and every fixture re-saved
with ``save_pretrained``, counting what the original counts), a key the class writes is never "unknown", and a key
nothing in transformers reads is ignored and reported rather than refused, while a key the modeling code reads and
embedcalc does not map stays an error.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hf_reference import FIXTURES, quiet_transformers
from paths import SCRIPTS, load_script

from embedcalc.analysis.params import count_params
from embedcalc.errors import ConfigError
from embedcalc.sources.hf import FAMILIES, accept, derive, map_hf_config
from embedcalc.sources.hf import keys as hf_keys
from embedcalc.sources.hf.reader import Family, KeyReader
from embedcalc.sources.hf.registry import CONFIG_TYPE, REMOTE_CODE
from embedcalc.sources.loading import load_parsed, load_target

SCRIPT = SCRIPTS / "hf_accept_list.py"
# files of families transformers has a class for (the remote-code ones have none to re-save with)
FIXTURE_FILES = sorted(p for p in FIXTURES.glob("*.json")
                       if json.loads(p.read_text(encoding="utf-8")).get("model_type") not in REMOTE_CODE)  # fmt: skip
CLASS_FAMILIES = sorted(set(FAMILIES) - REMOTE_CODE)


@pytest.fixture(scope="module")
def transformers() -> Any:
    return quiet_transformers()


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".")[:3] if part.isdigit())


def test_accept_list_is_current(transformers: Any) -> None:
    """The files are what the scripts derive from the installed transformers (beyond the version they record):
    a newer release that declares, writes or reads a key differently fails here until they are regenerated."""
    recorded = accept.transformers_version()
    if _version(transformers.__version__) < _version(recorded):
        pytest.skip(f"transformers {transformers.__version__} is older than {recorded}, which the files were "
                    "generated from (the newest): the run-time consult of the installed version covers it")  # fmt: skip
    script = load_script("hf_accept_list")
    reads = script.generate_reads()
    for path, data in ((accept.PATH, script.generate(reads)), (accept.READS_PATH, reads)):
        assert script.render(data | {"transformers_version": recorded}) == path.read_text(encoding="utf-8"), (
            f"{path.name} is stale for transformers {transformers.__version__}: run `python scripts/hf_accept_list.py`"
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
    cls = transformers.CONFIG_MAPPING[CONFIG_TYPE.get(model_type, model_type)]
    if (
        model_type == "gemma4_assistant"
    ):  # its default text config's per-layer embeddings fail validate_architecture
        text = {
            "model_type": "gemma4_text",
            "hidden_size_per_layer_input": 0,
            "vocab_size_per_layer_input": 0,
        }
        assistant: dict[str, Any] = cls(text_config=text).to_dict()
        return assistant
    data: dict[str, Any] = cls().to_dict()
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
    data = _defaults(transformers, model_type)
    mapping = map_hf_config(data, "test")
    assert accept.class_keys(model_type) is not None
    reported = [m.key for m in mapping.report.mapped] + [i.key for i in mapping.report.ignored]
    seen = {part.strip().split(".")[0] for key in reported for part in key.split(",")}
    # every key the installed class writes is mapped or ignored with a reason
    assert set(data) - accept.base_keys() - {"model_type"} - seen == set()
    assert mapping.report.ignored_keys == []  # and none of them is a key nothing reads


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
    try:
        original = count_params(load_target(str(path)).config).total
    except ConfigError as exc:  # a file of a native family the general reader counts (an unbalanced T5Gemma)
        assert exc.code == "hf_refused_family", exc.message
        with pytest.raises(ConfigError) as again:
            load_target(str(resaved))
        assert again.value.code == exc.code
        return
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


def _widened(monkeypatch: pytest.MonkeyPatch, reads: frozenset[str]) -> None:
    """LlamaConfig as a newer transformers might have it: a parameter ``new_width`` (default 8), which the modeling
    code reads when ``reads`` says so; the installed transformers is not consulted."""
    listed = accept.class_keys("llama")
    assert listed is not None
    modeling = accept.Reads(("models/llama/modeling_llama.py",), reads, {})
    widened = replace(listed, params=listed.params | {"new_width"}, defaults=listed.defaults | {"new_width": 8},
                      reads=(modeling,))  # fmt: skip
    monkeypatch.setattr(accept, "class_keys", lambda model_type: widened)
    monkeypatch.setattr(accept, "installed_class_keys", lambda config_class: None)


def test_a_parameter_the_modeling_code_reads_is_accepted_only_at_its_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A parameter the class declares but the family leaves to the class default (as a newer transformers adds
    one): at the default it builds the model the counts were checked on; at another value, read by the modeling
    code, it is an error that names the reader."""
    _widened(monkeypatch, frozenset({"new_width"}))
    at_default = _reader({"new_width": 8})
    at_default.classify_rest()
    assert at_default.problems == [] and [i.key for i in at_default.ignored] == ["new_width"]
    assert not at_default.ignored[0].warn
    other = _reader({"new_width": 16})
    other.classify_rest()
    assert [(p.path, p.code) for p in other.problems] == [("new_width", "hf_unmapped_key")]
    assert "(default 8)" in other.problems[0].message
    assert "config.new_width in modeling_llama.py" in other.problems[0].message


def test_a_parameter_nothing_reads_is_ignored_and_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    _widened(monkeypatch, frozenset())
    reader = _reader({"new_width": 16})
    reader.classify_rest()
    assert reader.problems == []
    (ignored,) = reader.ignored
    assert ignored.warn and "no modeling code" in ignored.reason


def test_a_key_the_class_does_not_declare_is_ignored_and_reported() -> None:
    """transformers keeps it as a plain attribute and builds the same model: so does embedcalc, and says so."""
    raw = json.loads((FIXTURES / "llama-2-7b.json").read_text(encoding="utf-8"))
    report = map_hf_config(raw | {"num_hiden_layers": 3}, "test").report
    (ignored,) = report.ignored_keys
    assert ignored.key == "num_hiden_layers" and ignored.value == 3
    assert "LlamaConfig does not declare it" in ignored.reason
    assert "did you mean 'num_hidden_layers'?" in ignored.reason
    assert report.as_dict()["ignored_keys"] == [ignored.as_dict()]
    (warning,) = report.warnings()
    assert warning.path == "num_hiden_layers" and warning.code == "hf_ignored_key"


def test_an_ignored_key_of_a_file_with_its_own_modeling_code_says_which_model_is_counted() -> None:
    """A file that names its own modeling code (auto_map, trust_remote_code): a key transformers' class ignores may
    be one that code reads (Kimi-K3's ``attn_res_block_size`` on its ``kimi_linear`` text config), so the warning
    says the count is of transformers' own class and names the file's code; without auto_map it does not."""
    raw = json.loads((FIXTURES / "llama-2-7b.json").read_text(encoding="utf-8")) | {"block_res_size": 12}
    remote = raw | {
        "auto_map": {
            "AutoConfig": "configuration_x.XConfig",
            "AutoModelForCausalLM": "modeling_x.XForCausalLM",
        }
    }
    (ignored,) = map_hf_config(remote, "test").report.ignored_keys
    assert "transformers' own class builds, which embedcalc counts" in ignored.reason
    assert "XForCausalLM in auto_map" in ignored.reason and "XConfig" not in ignored.reason
    (plain,) = map_hf_config(raw, "test").report.ignored_keys
    assert "auto_map" not in plain.reason


def _config(raw: dict[str, Any]) -> Any:
    return load_parsed(raw, "file", "test", target="test").config


@pytest.mark.parametrize(
    ("fixture", "extra"),
    [
        ("glm-5", {"indexer_rope_interleave": True}),  # GLM-5 / DeepSeek-V3.2 files: no transformers class reads it
        ("llama-3.1-8b", {"use_qk_norm": False}),
        ("qwen3-8b", {"partial_rotary_factor": 1.0}),
        ("deepseek-v3", {"indexer_rope_interleave": True, "use_qk_norm": True}),
    ],
)  # fmt: skip
def test_keys_transformers_ignores_do_not_refuse_a_file(fixture: str, extra: dict[str, Any]) -> None:
    """Issue 31's cases: files refused only for keys transformers itself ignores are read, each key listed."""
    raw = json.loads((FIXTURES / f"{fixture}.json").read_text(encoding="utf-8"))
    mapping = map_hf_config(raw | extra, "test")
    assert {i.key for i in mapping.report.ignored} >= set(extra)
    assert count_params(_config(raw | extra)).total == count_params(_config(raw)).total


def test_a_key_the_shared_modules_read_is_refused_natively() -> None:
    """``sliding_window`` on a LLaMA file: transformers' caches and masks read it (``getattr(config,
    "sliding_window", None)``; a cache built from the config keeps a window), so the native reader refuses it, with
    the code that hands the file to the general reader (which runs those caches); a null window is absent."""
    raw = json.loads((FIXTURES / "llama-2-7b.json").read_text(encoding="utf-8"))
    with pytest.raises(ConfigError) as info:
        map_hf_config(raw | {"sliding_window": 4096}, "test")
    (problem,) = info.value.problems
    assert problem.code == "hf_shared_read_key" and "reads it" in problem.message
    assert info.value.code == "hf_refused_family"
    map_hf_config(raw | {"sliding_window": None}, "test")


def test_a_generation_setting_is_no_model_key() -> None:
    """``use_mtp`` (MiniMax-M2.5's config.json): read by transformers' generation off a GenerationConfig, never by
    the model, so listed and ignored, not refused."""
    raw = json.loads((FIXTURES / "llama-2-7b.json").read_text(encoding="utf-8"))
    report = map_hf_config(raw | {"use_mtp": True}, "test").report
    assert any(row.key == "use_mtp" for row in report.ignored)


def test_a_falcon_file_saved_by_transformers_5_25_is_read() -> None:
    """FalconConfig (5.25) derives num_key_value_heads (num_kv_heads, or 1 for multi-query) and writes it."""
    raw = json.loads((FIXTURES / "falcon-7b.json").read_text(encoding="utf-8"))
    assert raw.get("multi_query") is True and not raw.get("new_decoder_architecture")
    assert count_params(_config(raw | {"num_key_value_heads": 1})).total == count_params(_config(raw)).total
    with pytest.raises(ConfigError) as info:
        map_hf_config(raw | {"num_key_value_heads": 71}, "test")
    assert [p.path for p in info.value.problems] == ["num_key_value_heads"]


def test_paligemma_text_config_with_num_image_tokens_is_read(transformers: Any) -> None:
    """PaliGemmaConfig writes num_image_tokens into its text_config (GemmaConfig does not declare it)."""
    if not hasattr(transformers, "PaliGemmaConfig"):
        pytest.skip(f"transformers {transformers.__version__} has no PaliGemmaConfig")
    raw = transformers.PaliGemmaConfig().to_dict()
    mapping = map_hf_config(raw, "test")
    if "num_image_tokens" in raw["text_config"]:
        assert "text_config.num_image_tokens" in {i.key for i in mapping.report.ignored}


def test_the_installed_transformers_is_consulted_when_the_shipped_data_does_not_clear_a_key(
    transformers: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A key the shipped data does not know (here: LlamaConfig's attention_bias, hidden from it) but the installed
    transformers' class declares, at its default, is cleared by the installed class, whose version it cites."""
    listed = accept.class_keys("llama")
    assert listed is not None
    defaults = {k: v for k, v in listed.defaults.items() if k != "attention_bias"}
    hidden = replace(
        listed, params=listed.params - {"attention_bias"}, defaults=defaults, reads=(), version="0.0"
    )
    monkeypatch.setattr(accept, "class_keys", lambda model_type: hidden)
    monkeypatch.setattr(accept, "installed_version", lambda: "0.0-test")
    accept.installed_class_keys.cache_clear()
    try:
        found = accept.verdict("llama", "LlamaConfig", "attention_bias", False)
    finally:
        accept.installed_class_keys.cache_clear()
    assert accept.classify(hidden, "attention_bias", False).fate == "warn"  # the shipped data alone
    assert found is not None and found.fate == "ignored"
    assert "LlamaConfig's default" in found.text and transformers.__version__ in found.text


def test_the_modeling_scan_finds_config_reads() -> None:
    source = (
        "class A:\n"
        "    def __init__(self, config):\n"
        "        self.width = config.hidden_size\n"
        "        self.norm = getattr(config, 'use_qk_norm', False)\n"
        "        self.win = getattr(self.config, 'sliding_window')\n"
        "        if hasattr(text_config, 'moe_latent_size'): pass\n"
        "        config.written_here = 3\n"
        "        self.other = model.hidden\n"
    )
    plain, fallbacks = derive.scan(source)
    assert plain == {"hidden_size", "sliding_window", "moe_latent_size"}
    assert fallbacks == {"use_qk_norm": [False]}
    reads_self = derive.scan("class C:\n    def f(self):\n        return self.max_window_layers\n", True)[0]
    assert reads_self == {"max_window_layers"}


def test_the_transformers_js_config_is_accepted() -> None:
    raw = json.loads((FIXTURES / "llama-2-7b.json").read_text(encoding="utf-8"))
    report = map_hf_config(raw | {"transformers.js_config": {"dtype": "q4"}}, "test").report
    assert any(i.key == "transformers.js_config" for i in report.ignored)


def test_same_value_keeps_booleans_apart_from_numbers() -> None:
    assert accept.same_value(0, 0.0) and accept.same_value(None, None) and accept.same_value([1], [1])
    assert (
        not accept.same_value(True, 1) and not accept.same_value(0, False) and not accept.same_value("1", 1)
    )


def test_an_alias_of_the_class_is_judged_as_the_attribute_it_sets() -> None:
    """An attribute_map alias the family's reader does not know (a newer transformers adds one) sets the attribute
    it names: judged as that attribute, so a width transformers reads is refused, its default accepted."""
    listed = accept.class_keys("llama")
    assert listed is not None
    aliased = replace(listed, aliases={"d_model_alias": "hidden_size"})
    refused = accept.classify(aliased, "d_model_alias", listed.defaults["hidden_size"] * 2)
    assert refused.fate == "problem" and "alias of hidden_size" in refused.text
    assert accept.classify(aliased, "d_model_alias", listed.defaults["hidden_size"]).fate == "ignored"
