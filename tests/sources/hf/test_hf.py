"""Hugging Face ``config.json`` files: the loader, the ``check`` report, and parity with transformers.

Parity (issue 4): for every family, embedcalc's parameter count equals the ``numel`` of the model transformers
builds from the same file (on the meta device: nothing is downloaded or allocated), embedcalc's forward FLOPs equal
``FlopCounterMode`` on that model with eager attention, and embedcalc's own torch model has the same multiset of
parameter shapes. Checked on hub files (``tests/fixtures/hf``, older formats and transformers 5's) with their
published sizes, and on seeded random small configs of every family.

The counting rule: encoders as ``AutoModel``, decoders as ``AutoModelForCausalLM``, encoder-decoders as
``AutoModelForSeq2SeqLM``. Two transformers conventions are normalised in the shape comparison and said so where
they are: GPT-2's ``Conv1D`` stores weights as (in, out) and fuses Q, K, V into ``c_attn``; and transformers >= 5
ties T5's head in a model built from a config alone, while ``from_pretrained`` keeps the separate ``lm_head`` of the
v1.1 checkpoints (see ``embedcalc.sources.hf.families.t5._t5_head``), so for an untied T5 the head is untied here
the same way.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hf_reference import forward_flops as hf_forward_flops
from hf_reference import mapped_config, published, unaccounted_keys
from hypothesis import given, settings
from hypothesis import strategies as st
from paths import DOCS, HF_FIXTURES

from embedcalc.analysis.flops import forward_flops
from embedcalc.analysis.memory import kv_cache_bytes
from embedcalc.analysis.params import count_params
from embedcalc.analysis.sweep import evaluate_point, sweep_target
from embedcalc.analysis.workload import Workload
from embedcalc.api.sweep import sweep_base as load_base
from embedcalc.config.schema import ModelConfig
from embedcalc.errors import ConfigError
from embedcalc.sources.hf import FAMILIES, accept, is_hf_config, map_hf_config
from embedcalc.sources.hf.registry import REMOTE_CODE
from embedcalc.sources.loading import load_target

FIXTURES = HF_FIXTURES
# This module's families; the families of the later issues have their fixtures and tests in test_hf_*.py.
CORE_FAMILIES = ("bert", "roberta", "distilbert", "gpt2", "opt", "t5", "llama", "mistral", "qwen2")

# fixture -> transformers' total: this module's group of tests/fixtures/published_sizes.yaml (every row's size is
# checked by tests/sources/hf/test_published_sizes.py)
PUBLISHED = {name: row.total for name, row in published("test_hf").items()}
FIXTURE_FILES = sorted(p for p in FIXTURES.glob("*.json") if p.stem in PUBLISHED)


def _raw(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def test_every_fixture_has_a_published_size() -> None:
    assert {p.stem for p in FIXTURE_FILES} == set(PUBLISHED)
    assert {_raw(p)["model_type"] for p in FIXTURE_FILES} == set(CORE_FAMILIES)
    assert set(CORE_FAMILIES) <= set(FAMILIES)


# --- KV cache (issue 4, "Done when") ----------------------------------------------------------------------------


@pytest.mark.parametrize("target", ["llama-2-7b", str(FIXTURES / "llama-2-7b.json")])
def test_llama_2_7b_kv_cache_at_4096_tokens_fp16_is_2_gib(target: str) -> None:
    config = load_target(target).config
    assert kv_cache_bytes(config, Workload(seq_len=4096, dtype="float16")) == 2 * 2**30


@pytest.mark.parametrize("target", ["llama-2-70b", str(FIXTURES / "llama-2-70b.json")])
def test_llama_2_70b_kv_cache_is_327680_bytes_per_token(target: str) -> None:
    config = load_target(target).config
    assert config.resolved_kv_heads == 8
    for tokens in (1, 7, 4096):
        assert kv_cache_bytes(config, Workload(seq_len=tokens, dtype="float16")) == 327_680 * tokens
    # 2 (K and V) x 80 layers x 8 KV heads x 128 head_dim x 2 bytes
    assert 2 * 80 * 8 * 128 * 2 == 327_680


def test_kv_cache_through_the_cli(cli: Any) -> None:
    result = cli("analyze", str(FIXTURES / "llama-2-7b.json"), "--seq-len", "4096", "--dtype", "float16",
                 "--format", "json")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["results"][0]["memory"]["kv_cache_bytes"] == 2 * 2**30


def test_mistral_sliding_window_caps_the_kv_cache() -> None:
    config = load_target(str(FIXTURES / "mistral-7b-v0.1.json")).config
    assert config.sliding_window == 4096
    per_token = 2 * 32 * 8 * 128 * 2
    assert kv_cache_bytes(config, Workload(seq_len=1000, dtype="float16")) == 1000 * per_token
    assert kv_cache_bytes(config, Workload(seq_len=16384, dtype="float16")) == 4096 * per_token
    assert kv_cache_bytes(config, Workload(seq_len=4000, gen_tokens=500, dtype="float16")) == 4096 * per_token
    v03 = load_target(str(FIXTURES / "mistral-7b-v0.3.v5.json")).config
    assert v03.sliding_window is None
    assert kv_cache_bytes(v03, Workload(seq_len=16384, dtype="float16")) == 16384 * per_token


def test_sliding_window_causal_flops_skip_the_masked_pairs() -> None:
    config = load_target("mistral-7b").config
    n, w, h, hd, layers = 6000, 4096, 32, 128, 32
    flops = forward_flops(config, Workload(seq_len=n))
    pairs = w * (w + 1) // 2 + (n - w) * w
    assert flops.causal_breakdown is not None
    assert flops.causal_breakdown["decoder/attention/scores"] == layers * 2 * h * pairs * hd
    assert flops.breakdown["decoder/attention/scores"] == layers * 2 * h * n * n * hd  # eager computes all n²


# --- loading: formats, defaults, the report --------------------------------------------------------------------


def test_detected_by_model_type() -> None:
    assert is_hf_config({"model_type": "bert"})
    assert not is_hf_config({"architecture": "encoder"})


def test_today_and_older_formats_agree() -> None:
    """rope_theta / torch_dtype at top level (older) and rope_parameters / dtype (transformers 5) map alike."""
    old = _raw(FIXTURES / "llama-2-7b.json")
    new = {k: v for k, v in old.items() if k not in ("rope_scaling", "torch_dtype", "transformers_version")}
    new |= {
        "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
        "dtype": "float16",
        "transformers_version": "5.24.0",
        "head_dim": 128,
        "attention_bias": False,
        "mlp_bias": False,
    }
    old |= {"rope_theta": 10000.0}
    a, b = mapped_config(old), mapped_config(new)
    assert count_params(a).as_dict() == count_params(b).as_dict()
    assert a.model_dump(exclude={"name", "head_dim"}) == b.model_dump(exclude={"name", "head_dim"})


# transformers' own default config of these families cannot run: DeepseekV2Config() routes to
# num_experts_per_tok=None experts (Dots1Config() n_routed_experts=None too; Lfm2MoeConfig() has layer_types=None,
# which Lfm2MoeDecoderLayer indexes); embedcalc refuses it, asking for the key, rather than guess
UNRUNNABLE_DEFAULTS = {
    "deepseek_v2": "num_experts_per_tok",
    "dots1": "n_routed_experts",
    "lfm2_moe": "layer_types",
    "nemotron-nas": "block_configs",  # DeciLMConfig's default None, which DeciLMDecoderLayer indexes
    # Gemma4AssistantConfig's default text config has per-layer embeddings, which its validate_architecture refuses
    "gemma4_assistant": "hidden_size_per_layer_input",
}


@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_a_bare_model_type_uses_transformers_defaults(model_type: str) -> None:
    """A file with nothing but its model_type is transformers' default config of the family."""
    if model_type in UNRUNNABLE_DEFAULTS:
        with pytest.raises(ConfigError, match=UNRUNNABLE_DEFAULTS[model_type]):
            map_hf_config({"model_type": model_type}, "test")
        return
    mapping = map_hf_config({"model_type": model_type}, "test")
    assert all(m.origin in ("default", "family") for m in mapping.report.mapped)
    assert mapping.report.ignored == []
    mapped_config({"model_type": model_type})


def test_family_defaults_are_transformers_defaults() -> None:
    transformers = pytest.importorskip("transformers")
    import dataclasses

    own = {("t5", "n_positions"), ("t5", "tie_word_embeddings"), ("opt", "tie_word_embeddings"),
           ("roberta", "pad_token_id"), ("mt5", "n_positions"), ("xlm-roberta", "pad_token_id"),
           ("camembert", "pad_token_id"), ("ernie4_5", "attention_dropout"),
           ("ernie4_5_moe", "attention_dropout"), ("umt5", "n_positions")}  # fmt: skip
    # the Qwen VL text configs have no tie_word_embeddings (the outer config's, default False, ties the head), and
    # Qwen3VLTextConfig no sliding-window keys (its layers never slide): the readers' defaults say so
    own |= {("qwen2_5_vl_text", "tie_word_embeddings"), ("qwen3_vl_text", "tie_word_embeddings")}
    own |= {("qwen3_vl_text", key) for key in ("use_sliding_window", "sliding_window", "max_window_layers")}
    # issue 31's vision-language text models: Qwen2-VL's and GLM-4.1V's text configs have no tie_word_embeddings
    # either, Qwen3-VL-MoE's no use_sliding_window, GLM-4.5V's no use_qk_norm (its attention has no q/k norms), and
    # Qwen3.5-MoE's no intermediate_size (every layer is MoE)
    own |= {("qwen2_vl_text", "tie_word_embeddings"), ("glm4v_text", "tie_word_embeddings"),
            ("qwen3_vl_moe_text", "use_sliding_window"), ("glm4v_moe_text", "use_qk_norm"),
            ("qwen3_5_moe_text", "intermediate_size")}  # fmt: skip
    # MistralLarge4TextConfig deletes GLM-5's q_lora_rank (one full-rank q_proj): the reader's null says so
    own |= {("mistral_large4_text", "q_lora_rank")}
    shipped = tuple(int(p) for p in accept.transformers_version().split(".")[:2])
    older = tuple(int(p) for p in transformers.__version__.split(".")[:2]) < shipped
    for family in FAMILIES.values():
        if (
            family.model_type in REMOTE_CODE
        ):  # no transformers class: the reader cites the remote code's defaults
            continue
        cls = getattr(transformers, family.config_class)
        fields = {f.name: f.default for f in dataclasses.fields(cls)}
        instance = (
            None  # built only for a key the class computes (Gemma4AssistantConfig() fails its own validation)
        )
        for key, value in family.defaults.items():
            if (family.model_type, key) in own and key not in fields:
                continue
            if key not in fields and instance is None:
                instance = cls()
            expected = fields[key] if key in fields else getattr(instance, key)
            if value != expected and older and _newest_default(family.model_type, key, value):
                continue  # an older transformers of the supported range: the readers follow the newest's defaults
            assert value == expected, (family.model_type, key, value, expected)
    assert transformers.T5Config().tie_word_embeddings is True
    assert transformers.OPTConfig().tie_word_embeddings is True
    assert transformers.RobertaConfig().pad_token_id == 1


def _newest_default(model_type: str, key: str, value: Any) -> bool:
    """Whether ``value`` is the default of ``key`` in the newest transformers (accept_list.json, generated from it;
    ``test_accept_list_is_current`` checks it there), where an older release of the supported range has another
    (KimiLinearConfig's head_dim: 64 in 5.24, null in 5.25)."""
    keys = accept.class_keys(model_type)
    return keys is not None and key in keys.defaults and accept.same_value(value, keys.defaults[key])


def test_roberta_positions_start_after_the_padding_index() -> None:
    config = mapped_config(_raw(FIXTURES / "roberta-base.json"))
    assert (config.max_seq_len, config.position_offset, config.position_rows) == (512, 2, 514)
    shifted = mapped_config(_raw(FIXTURES / "roberta-base.json") | {"pad_token_id": 0})
    assert (shifted.max_seq_len, shifted.position_offset) == (513, 1)


def test_opt_350m_projections_and_post_norm() -> None:
    config = mapped_config(_raw(FIXTURES / "opt-350m.json"))
    assert (config.resolved_norm_placement, config.resolved_final_norm) == ("post", False)
    assert config.resolved_token_embed_dim == 512 and config.embedding_projection
    params = count_params(config).as_dict()
    assert params["embedding/token"] == 50272 * 512
    assert params["embedding/project_in"] == params["head/project_out"] == 512 * 1024
    assert params["embedding/position"] == (2048 + 2) * 1024
    assert "decoder/final_norm" not in params and "head/lm" not in params  # tied
    removed = mapped_config(_raw(FIXTURES / "opt-125m.json") | {"_remove_final_layer_norm": True})
    assert count_params(removed).total == PUBLISHED["opt-125m"] - 2 * 768


def test_qwen2_biases_on_qkv_only() -> None:
    config = mapped_config(_raw(FIXTURES / "qwen2-0.5b.json"))
    assert (config.resolved_qkv_bias, config.resolved_out_bias, config.resolved_ffn_bias) == (
        True,
        False,
        False,
    )
    params = count_params(config).as_dict()
    d, q, kv, layers = 896, 896, 128, 24
    assert params["decoder/attention/qkv"] == layers * (d * (q + 2 * kv) + q + 2 * kv)
    assert params["decoder/attention/out"] == layers * q * d


def test_t5_head_untied_in_either_format() -> None:
    v1 = mapped_config(_raw(FIXTURES / "t5-small.json"))
    v11_old = mapped_config(_raw(FIXTURES / "t5-v1_1-small.json"))
    # tie_word_embeddings true, scale_decoder_outputs false
    v11_new = mapped_config(_raw(FIXTURES / "t5-v1_1-base.v5.json"))
    assert (v1.tie_embeddings, v11_old.tie_embeddings, v11_new.tie_embeddings) == (True, False, False)
    assert (v11_old.activation, v1.activation, v11_new.relative_attention_max_distance) == (
        "geglu",
        "relu",
        128,
    )


def test_distilbert_sinusoidal_still_counts_its_table() -> None:
    a = mapped_config(_raw(FIXTURES / "distilbert-base-uncased.json"))
    b = mapped_config(_raw(FIXTURES / "distilbert-base-uncased.json") | {"sinusoidal_pos_embds": True})
    assert count_params(a).total == count_params(b).total == 66_362_880
    assert (a.type_vocab_size, a.resolved_pooler) == (0, False)


def test_gpt2_n_ctx_is_not_the_table_size() -> None:
    mapping = map_hf_config(_raw(FIXTURES / "gpt2.json") | {"n_ctx": 2048}, "test")
    (n_ctx,) = [i for i in mapping.report.ignored if i.key == "n_ctx"]
    assert "n_positions" in n_ctx.reason and "differs" in n_ctx.reason
    assert mapping.data["max_seq_len"] == 1024


def test_report_accounts_for_every_key() -> None:
    for path in FIXTURE_FILES:
        assert not unaccounted_keys(_raw(path), str(path)), path.name


# --- errors -------------------------------------------------------------------------------------------------------


def test_unknown_model_type_is_exit_3_with_the_families_and_the_yaml_way(cli: Any, write_config: Any) -> None:
    """A model_type neither embedcalc nor the installed transformers knows (one transformers builds, such as rwkv,
    is counted by the general reader instead: tests/reconcile/test_general.py)."""
    path = write_config({"model_type": "wholly_new_lm", "attention_hidden_size": 768}, "config.json")
    result = cli("check", str(path))
    assert result.exit_code == 3
    assert result.stdout == ""
    for word in (*FAMILIES, "wholly_new_lm", "YAML", "embedcalc presets show"):
        assert word in result.stderr
    as_json = cli("analyze", str(path), "--format", "json")
    assert as_json.exit_code == 3
    assert json.loads(as_json.stdout)["problems"][0]["code"] == "hf_unsupported_family"


@pytest.mark.parametrize(
    ("extra", "key", "code"),
    [
        ({"pruned_heads": {"0": [1]}}, "pruned_heads", "hf_unsupported"),
        ({"add_cross_attention": True}, "add_cross_attention", "hf_unsupported"),
        ({"tie_encoder_decoder": True}, "tie_encoder_decoder", "hf_unsupported"),
        ({"hidden_act": "tanh"}, "hidden_act", "hf_unsupported"),
    ],
)
def test_keys_that_could_change_the_cost_are_errors(
    cli: Any, write_config: Any, extra: dict[str, Any], key: str, code: str
) -> None:
    path = write_config(_raw(FIXTURES / "llama-2-7b.json") | extra, "config.json")
    result = cli("check", str(path), "--format", "json")
    assert result.exit_code == 3
    problems = json.loads(result.stdout)["results"][0]["problems"]
    assert [(p["path"], p["code"]) for p in problems] == [(key, code)]


@pytest.mark.parametrize("command", ["check", "analyze"])
def test_a_key_only_transformers_shared_modules_read_is_counted_by_the_general_reader(
    cli: Any, write_config: Any, command: str
) -> None:
    """``sliding_window`` on a LLaMA file: no LLaMA module reads it, transformers' caches and masks do (a window
    on every layer), so the file is counted by transformers' own class. The note (JSON ``notes``, and the line on
    stderr of the table output) names the key, why the native reader did not read it and the reader that counted
    it, and not the native refusal's advice, which is for a file nothing counts."""
    path = write_config(_raw(FIXTURES / "llama-2-7b.json") | {"sliding_window": 4096}, "config.json")
    result = cli(command, str(path), "--format", "json")
    assert result.exit_code == 0, result.stderr
    found = json.loads(result.stdout)["results"][0]
    assert found["reader"] == "transformers-meta"
    notes = [note for note in found["notes"] if note.startswith("not read natively: ")]
    table = cli(command, str(path))
    assert table.exit_code == 0, table.stderr
    said = " ".join(table.stderr.split())
    assert said.count("not read natively: ") == 1
    for text in (notes[0], said):
        assert "sliding_window = 4096 is not a parameter of transformers' LlamaConfig" in text
        assert "config.sliding_window in its shared modules" in text
        assert "which embedcalc's reader of this family does not map" in text
        assert "counted instead by the general reader: transformers" in text
        assert "LlamaForCausalLM (AutoModelForCausalLM) on the meta device" in text
        assert "refused" not in text and "YAML" not in text
    assert len(notes) == 1


def test_a_key_transformers_ignores_is_a_warning_and_listed(cli: Any, write_config: Any) -> None:
    """Issue 31: a key LlamaConfig does not declare and no transformers code reads: read as transformers reads
    it, listed in the JSON report (``ignored_keys``) and warned about in the table output (stderr)."""
    path = write_config(_raw(FIXTURES / "llama-2-7b.json") | {"foo_bar": 3}, "config.json")
    result = cli("check", str(path), "--format", "json")
    assert result.exit_code == 0
    out = json.loads(result.stdout)["results"][0]
    assert [k["key"] for k in out["hf"]["ignored_keys"]] == ["foo_bar"]
    assert ("foo_bar", "hf_ignored_key") in [(w["path"], w["code"]) for w in out["warnings"]]
    table = cli("analyze", str(path))
    assert table.exit_code == 0
    assert "ignored key foo_bar = 3" in " ".join(table.stderr.split())


@pytest.mark.parametrize(
    ("fixture", "extra", "key"),
    [
        ("bert-base-uncased", {"position_embedding_type": "relative_key"}, "position_embedding_type"),
        ("bert-base-uncased", {"is_decoder": True}, "is_decoder"),
        ("opt-125m", {"layer_norm_elementwise_affine": False}, "layer_norm_elementwise_affine"),
        ("t5-small", {"feed_forward_proj": "gated-gelu", "is_gated_act": False}, "is_gated_act"),
        ("t5-small", {"feed_forward_proj": "gated-relu"}, "feed_forward_proj"),
        ("roberta-base", {"pad_token_id": None}, "pad_token_id"),
    ],
)  # fmt: skip
def test_family_specific_refusals(fixture: str, extra: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        map_hf_config(_raw(FIXTURES / f"{fixture}.json") | extra, "test")
    assert [p.path for p in info.value.problems] == [key]


def test_invalid_values_name_the_hugging_face_key(cli: Any, write_config: Any) -> None:
    path = write_config(
        {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 30}, "config.json"
    )
    result = cli("check", str(path))
    assert result.exit_code == 3
    assert "num_attention_heads (30) must divide hidden_size (4096)" in result.stderr


@pytest.mark.parametrize(
    "extra",
    [
        {"use_sliding_window": True, "max_window_layers": 12, "sliding_window": 4096},
        {"use_sliding_window": True, "sliding_window": 1024,
         "layer_types": ["full_attention", "sliding_attention"] * 12},
        {"use_sliding_window": False, "sliding_window": 1024, "layer_types": ["sliding_attention"] * 24},
    ],
)  # fmt: skip
def test_qwen2_mixed_sliding_and_full_layers_count_as_transformers(extra: dict[str, Any]) -> None:
    """Qwen2Config: sliding_window only when use_sliding_window, on the layers layer_types (or, without it,
    i >= max_window_layers) marks sliding. The KV cache equals the per-layer sum over transformers' own config
    object (it was refused before the one decoder core of issue 22)."""
    transformers = pytest.importorskip("transformers")
    raw = _raw(FIXTURES / "qwen2-0.5b.json") | extra
    ours = mapped_config(raw)
    theirs = transformers.Qwen2Config.from_dict(raw)
    head_dim, kv_heads = theirs.hidden_size // theirs.num_attention_heads, theirs.num_key_value_heads
    for tokens in (100, 2000, 8192):
        expected = sum(
            2 * kv_heads * head_dim * 2
            * (min(tokens, theirs.sliding_window) if t == "sliding_attention" and theirs.sliding_window else tokens)
            for t in theirs.layer_types
        )  # fmt: skip
        assert kv_cache_bytes(ours, Workload(seq_len=tokens, dtype="float16")) == expected, tokens
    assert count_params(ours).total == PUBLISHED["qwen2-0.5b"]


def test_qwen2_all_sliding_layers_map_the_window() -> None:
    raw = _raw(FIXTURES / "qwen2-0.5b.json") | {"use_sliding_window": True, "max_window_layers": 0,
                                                "sliding_window": 1024}  # fmt: skip
    config = mapped_config(raw)  # the one window mapper puts a window every layer shares on the default block
    assert config.attention is not None and config.attention.sliding_window == 1024 and not config.blocks


# --- the CLI ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: p.stem)
def test_analyze_json_works_for_every_fixture(cli: Any, path: Path) -> None:
    result = cli("analyze", str(path), "--format", "json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["status"] == "ok"
    assert data["results"][0]["params"]["total"] == PUBLISHED[path.stem]


def test_check_lists_mapped_and_ignored_keys(cli: Any) -> None:
    path = str(FIXTURES / "opt-350m.json")
    table = cli("check", path)
    assert table.exit_code == 0, table.stderr
    for word in (
        "OPTForCausalLM",
        "word_embed_proj_dim",
        "token_embed_dim",
        "do_layer_norm_before",
        "layerdrop",
        "ignored",
        "Counting rule",
        "AutoModelForSeq2SeqLM",
        "transformers default",
    ):
        assert word in table.stdout, word
    data = json.loads(cli("check", path, "--format", "json").stdout)["results"][0]["hf"]
    assert (data["family"], data["counted_as"]) == (
        "opt",
        "OPTForCausalLM (AutoModelForCausalLM), LM head tied",
    )
    mapped = {m["field"]: m for m in data["mapped"]}
    assert (mapped["token_embed_dim"]["key"], mapped["token_embed_dim"]["value"]) == (
        "word_embed_proj_dim",
        512,
    )
    assert mapped["position_offset"]["origin"] == "family"
    ignored = {i["key"]: i["reason"] for i in data["ignored"]}
    assert "dropout" in ignored["attention_dropout"] and "metadata" in ignored["transformers_version"]
    assert "torch_dtype" not in ignored  # read as the model's dtype
    assert (mapped["dtype"]["key"], mapped["dtype"]["value"]) == ("torch_dtype", "fp16")


def test_check_reports_defaults_for_absent_keys(cli: Any, write_config: Any) -> None:
    path = write_config({"model_type": "mistral", "vocab_size": 1000}, "config.json")
    data = json.loads(cli("check", str(path), "--format", "json").stdout)["results"][0]
    mapped = {m["field"]: m for m in data["hf"]["mapped"]}
    assert (mapped["num_kv_heads"]["value"], mapped["num_kv_heads"]["origin"]) == (8, "default")
    assert (mapped["sliding_window"]["value"], mapped["vocab_size"]["origin"]) == (4096, "file")
    assert data["config"]["vocab_size"] == 1000


def test_overrides_apply_to_a_hugging_face_config(cli: Any) -> None:
    result = cli("analyze", str(FIXTURES / "llama-2-7b.json"), "--set", "num_kv_heads=8", "--format", "json")
    assert result.exit_code == 0, result.stderr
    gqa = json.loads(result.stdout)["results"][0]["params"]["total"]
    assert gqa == PUBLISHED["llama-2-7b"] - 32 * 2 * 4096 * (4096 - 1024)


def test_sweep_reads_a_hugging_face_config() -> None:
    result = sweep_target(load_base(str(FIXTURES / "qwen2-0.5b.json")), {"seq_len": (128, 4096)}, Workload())
    assert result.grid is not None and bool(result.valid.all())
    assert int(result.grid["params"][0]) == PUBLISHED["qwen2-0.5b"]


NO_TORCH = """
import json, sys
from embedcalc.cli.app import app
for argv in json.loads(sys.argv[1]):
    try:
        app(argv, prog_name="embedcalc")
    except SystemExit as exc:
        assert exc.code == 0, (argv, exc.code)
sys.stderr.write("RESULT " + json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in ("torch",
                                                                                           "transformers"))) + "\\n")
"""


def test_hugging_face_configs_load_without_torch_or_transformers() -> None:
    path = str(FIXTURES / "t5-v1_1-small.json")
    argvs = [["check", path], ["analyze", path, "--format", "json"], ["compare", path, "t5-small"]]
    proc = subprocess.run([sys.executable, "-c", NO_TORCH, json.dumps(argvs)], capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    line = next(x for x in proc.stderr.splitlines() if x.startswith("RESULT "))
    assert json.loads(line.removeprefix("RESULT ")) == []


# --- the grid honours the new fields -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "axes", "workload"),
    [
        ("opt-350m.json", {"num_layers": (2, 24), "seq_len": (16, 2048), "batch_size": (1, 3)},
         Workload(optimizer="adafactor")),
        ("qwen2-0.5b.json", {"embed_dim": (448, 896), "seq_len": (64, 512)}, Workload(dtype="bfloat16")),
        ("mistral-7b-v0.1.json", {"seq_len": (1024, 4096, 8192), "num_layers": (1, 4)},
         Workload(gen_tokens=100, dtype="float16", attention="eager")),
        ("t5-v1_1-small.json", {"seq_len": (32, 600), "num_heads": (3, 6)},
         Workload(tgt_len=20, optimizer="adafactor", recompute="selective")),
        ("roberta-base.json", {"seq_len": (64, 512), "embed_dim": (384, 768)}, Workload(mode="training")),
    ],
)  # fmt: skip
def test_grid_matches_analyze_on_new_fields(
    target: str, axes: dict[str, tuple[int, ...]], workload: Workload
) -> None:
    path = str(FIXTURES / target)
    result = sweep_target(load_base(path), axes, workload)
    base = load_base(path)
    assert result.grid is not None
    names = list(result.axes)
    for i in range(result.size):
        point = {a: result.axes[a][int(result.index[a][i])] for a in names}
        expected = evaluate_point(base, point, workload)
        if "problems" in expected:
            assert not result.valid[i]
            continue
        for column, value in expected.items():
            if column == "crossover_seq_len":
                continue
            assert int(result.grid[column][i]) == value, (column, point)


# --- parity with transformers ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hf() -> Any:
    pytest.importorskip("torch")
    return pytest.importorskip("transformers")


_ENCODERS = {"bert", "roberta", "distilbert"}


def _hf_model(transformers: Any, raw: dict[str, Any], config: ModelConfig) -> Any:
    """The model transformers builds from ``raw`` (meta device, eager attention), by the counting rule."""
    import torch

    model_type = raw["model_type"]
    hf_config = transformers.CONFIG_MAPPING[model_type].from_dict(raw)
    auto = (
        transformers.AutoModel
        if model_type in _ENCODERS
        else transformers.AutoModelForSeq2SeqLM
        if model_type == "t5"
        else transformers.AutoModelForCausalLM
    )
    with torch.device("meta"):
        model = auto.from_config(hf_config, attn_implementation="eager")
    if model_type == "t5" and not config.tie_embeddings and model.lm_head.weight is model.shared.weight:
        # transformers >= 5 ties a T5 built from a config; from_pretrained keeps a v1.1 checkpoint's lm_head
        model.lm_head.weight = torch.nn.Parameter(torch.empty_like(model.shared.weight))
    return model.eval()


def _hf_shapes(transformers: Any, model: Any) -> list[tuple[int, ...]]:
    """transformers' parameter shapes in nn.Linear layout: GPT-2's Conv1D weights transposed to (out, in), and its
    fused c_attn (Q, K, V) split into its three projections."""
    conv1d = transformers.pytorch_utils.Conv1D
    shapes: list[tuple[int, ...]] = []
    seen: set[int] = set()
    for module_name, module in model.named_modules():
        for name, param in module.named_parameters(recurse=False):
            if id(param) in seen:  # a tied weight, once
                continue
            seen.add(id(param))
            shape = tuple(param.shape)
            if isinstance(module, conv1d):
                shape = shape[::-1] if name == "weight" else shape
                if module_name.endswith("c_attn"):
                    shapes += [(shape[0] // 3, *shape[1:])] * 3
                    continue
            shapes.append(shape)
    return sorted(shapes)


def _numel(model: Any) -> int:
    return sum(p.numel() for p in model.parameters())  # a tied Parameter once


def _our_shapes(config: ModelConfig) -> list[tuple[int, ...]]:
    from embedcalc.modeling import build_model

    return sorted(tuple(p.shape) for p in build_model(config).parameters())


@pytest.mark.torch
@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: p.stem)
def test_published_sizes_equal_transformers(hf: Any, path: Path) -> None:
    raw = _raw(path)
    config = load_target(str(path)).config
    model = _hf_model(hf, raw, config)
    assert _numel(model) == count_params(config).total == PUBLISHED[path.stem]
    assert _our_shapes(config) == _hf_shapes(hf, model)


@pytest.mark.torch
@pytest.mark.parametrize("name", ["bert-base-uncased", "roberta-base", "distilbert-base-uncased", "gpt2",
                                  "opt-350m", "t5-v1_1-small", "qwen2-0.5b", "mistral-7b-v0.1"])  # fmt: skip
def test_published_forward_flops_equal_flop_counter(hf: Any, name: str) -> None:
    raw = _raw(FIXTURES / f"{name}.json")
    config = mapped_config(raw)
    model = _hf_model(hf, raw, config)
    analytic = forward_flops(config, Workload(batch_size=2, seq_len=64, tgt_len=24)).forward
    tgt = 24 if config.architecture == "encoder-decoder" else None
    assert hf_forward_flops(model, 2, 64, tgt, no_cache=False) == analytic


def test_bert_base_reference_flops_from_its_config_json() -> None:
    """DESIGN.md §8: 22,348,431,360 at batch 1, seq 128, from the hub file."""
    config = load_target(str(FIXTURES / "bert-base-uncased.json")).config
    assert forward_flops(config, Workload(batch_size=1, seq_len=128)).forward == 22_348_431_360


# random small configs of every family: a hub-style raw dict drawn from a seeded generator


def _heads(rng: random.Random, even: bool = False) -> tuple[int, int, int]:
    """(heads, kv_heads, head_dim) with kv_heads dividing heads."""
    heads = rng.randint(1, 4)
    kv = rng.choice([k for k in range(1, heads + 1) if heads % k == 0])
    head_dim = rng.randint(1, 4) * 2 if even else rng.randint(1, 6)
    return heads, kv, head_dim


def _bert(rng: random.Random, model_type: str) -> dict[str, Any]:
    heads, _, hd = _heads(rng)
    raw = {
        "model_type": model_type,
        "vocab_size": rng.randint(5, 60),
        "hidden_size": heads * hd,
        "num_attention_heads": heads,
        "num_hidden_layers": rng.randint(1, 2),
        "intermediate_size": rng.randint(1, 24),
        "hidden_act": rng.choice(["gelu", "relu", "gelu_new"]),
        "type_vocab_size": rng.randint(1, 3),
        "max_position_embeddings": rng.randint(12, 20),
        "hidden_dropout_prob": rng.choice([0.0, 0.1]),
        "tie_word_embeddings": rng.random() < 0.5,
    }
    if model_type == "roberta":
        raw["pad_token_id"] = rng.randint(0, 2)
    return raw


def _random_raw(model_type: str, seed: int) -> dict[str, Any]:
    rng = random.Random(f"{model_type}-{seed}")
    if model_type in ("bert", "roberta"):
        return _bert(rng, model_type)
    heads, kv, hd = _heads(rng, even=model_type in ("llama", "mistral", "qwen2"))
    d = heads * hd
    if model_type == "distilbert":
        return {
            "model_type": "distilbert",
            "vocab_size": rng.randint(5, 60),
            "dim": d,
            "n_heads": heads,
            "n_layers": rng.randint(1, 2),
            "hidden_dim": rng.randint(1, 24),
            "max_position_embeddings": 16,
            "sinusoidal_pos_embds": rng.random() < 0.5,
            "activation": rng.choice(["gelu", "relu"]),
        }
    if model_type == "gpt2":
        return {
            "model_type": "gpt2",
            "vocab_size": rng.randint(5, 60),
            "n_embd": d,
            "n_head": heads,
            "n_layer": rng.randint(1, 2),
            "n_positions": rng.randint(12, 20),
            "n_inner": rng.choice([None, rng.randint(1, 24)]),
            "tie_word_embeddings": rng.random() < 0.5,
            "activation_function": rng.choice(["gelu_new", "relu"]),
            "n_ctx": 1024,
        }
    if model_type == "opt":
        return {
            "model_type": "opt",
            "vocab_size": rng.randint(5, 60),
            "hidden_size": d,
            "num_attention_heads": heads,
            "num_hidden_layers": rng.randint(1, 2),
            "ffn_dim": rng.randint(1, 24),
            "max_position_embeddings": 16,
            "word_embed_proj_dim": rng.choice([None, d, rng.randint(1, 12)]),
            "do_layer_norm_before": rng.random() < 0.5,
            "_remove_final_layer_norm": rng.random() < 0.3,
            "enable_bias": rng.random() < 0.7,
            "tie_word_embeddings": rng.random() < 0.7,
        }
    if model_type == "t5":
        return {
            "model_type": "t5",
            "vocab_size": rng.randint(5, 60),
            "d_model": rng.randint(2, 16),
            "d_kv": hd,
            "num_heads": heads,
            "d_ff": rng.randint(1, 24),
            "num_layers": rng.randint(1, 2),
            "num_decoder_layers": rng.choice([None, 1, 2]),
            "feed_forward_proj": rng.choice(["relu", "gated-gelu", "gated-silu", "gelu"]),
            "relative_attention_num_buckets": rng.randint(2, 40),
            "relative_attention_max_distance": rng.choice([16, 128]),
            "tie_word_embeddings": rng.random() < 0.5,
        }
    raw = {
        "model_type": model_type,
        "vocab_size": rng.randint(5, 60),
        "hidden_size": d,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "num_hidden_layers": rng.randint(1, 2),
        "intermediate_size": rng.randint(1, 24),
        "max_position_embeddings": 16,
        "tie_word_embeddings": rng.random() < 0.5,
        "hidden_act": rng.choice(["silu", "gelu"]),
    }
    if rng.random() < 0.4:
        raw["head_dim"] = rng.randint(1, 4) * 2
    if model_type == "llama":
        raw |= {"attention_bias": rng.random() < 0.5, "mlp_bias": rng.random() < 0.5}
    if model_type == "mistral":
        raw["sliding_window"] = rng.choice([None, rng.randint(1, 8)])
    return raw


RANDOM_CASES = [(model_type, seed) for model_type in CORE_FAMILIES for seed in range(8)]


@pytest.mark.torch
@pytest.mark.parametrize(("model_type", "seed"), RANDOM_CASES)
def test_random_small_configs_match_transformers(hf: Any, model_type: str, seed: int) -> None:
    raw = _random_raw(model_type, seed)
    config = mapped_config(raw)
    model = _hf_model(hf, raw, config)
    assert _numel(model) == count_params(config).total
    assert _our_shapes(config) == _hf_shapes(hf, model)
    rng = random.Random(seed)
    batch, seq_len, tgt_len = rng.randint(1, 3), rng.randint(1, 12), rng.randint(1, 9)
    workload = Workload(batch_size=batch, seq_len=seq_len, tgt_len=tgt_len if model_type == "t5" else None)
    measured = hf_forward_flops(model, batch, seq_len, workload.tgt_len, no_cache=False)
    assert measured == forward_flops(config, workload).forward


# --- our torch model honours every new field (analysis == torch, per component) -------------------------------------


@st.composite
def _new_field_configs(draw: st.DrawFn) -> ModelConfig:
    arch = draw(st.sampled_from(["encoder", "decoder", "encoder-decoder"]))
    position = draw(st.sampled_from(["learned", "relative", "rope", "sinusoidal"]))
    heads = draw(st.integers(1, 3))
    head_dim = draw(st.integers(1, 3)) * 2
    data: dict[str, Any] = {
        "architecture": arch, "vocab_size": draw(st.integers(2, 30)), "max_seq_len": 10, "embed_dim": heads * head_dim,
        "num_heads": heads, "num_layers": draw(st.integers(1, 2)), "position": position,
        "activation": draw(st.sampled_from(["relu", "swiglu", "geglu", "gelu"])),
        "norm": draw(st.sampled_from(["layernorm", "rmsnorm"])), "norm_bias": draw(st.booleans()),
        "bias": draw(st.booleans()), "tie_embeddings": draw(st.booleans()), "lm_head": True,
        "relative_attention_max_distance": draw(st.integers(1, 200)),
    }  # fmt: skip
    for name in ("qkv_bias", "out_bias", "ffn_bias", "final_norm"):
        value = draw(st.sampled_from([None, True, False]))
        if value is not None:
            data[name] = value
    if draw(st.booleans()):
        data["token_embed_dim"] = draw(st.integers(1, 9))
    if position == "learned":
        data["position_offset"] = draw(st.integers(0, 3))
    if arch != "encoder" and draw(st.booleans()):
        data["sliding_window"] = draw(st.integers(1, 6))
    return ModelConfig.model_validate(data)


@pytest.mark.torch
@settings(max_examples=40, deadline=None)
@given(
    config=_new_field_configs(),
    batch=st.integers(1, 2),
    seq_len=st.integers(1, 10),
    tgt_len=st.integers(1, 6),
)
def test_torch_model_matches_analysis_on_new_fields(
    config: ModelConfig, batch: int, seq_len: int, tgt_len: int
) -> None:
    pytest.importorskip("torch")
    from embedcalc.modeling import build_model, component_flops, component_params

    tgt = tgt_len if config.architecture == "encoder-decoder" else None
    analytic = forward_flops(
        config, Workload(batch_size=batch, seq_len=seq_len, tgt_len=tgt)
    ).breakdown.as_dict()
    for impl in ("sdpa", "eager"):
        model = build_model(config, attention=impl)
        assert component_params(model) == count_params(config).as_dict()
        assert component_flops(config, model, batch_size=batch, seq_len=seq_len, tgt_len=tgt) == analytic


def _tiny(**extra: Any) -> ModelConfig:
    base = {"architecture": "decoder", "vocab_size": 17, "max_seq_len": 12, "embed_dim": 8, "num_heads": 2,
            "num_layers": 2, "position": "rope"}  # fmt: skip
    return ModelConfig.model_validate(base | extra)


@pytest.mark.torch
@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_sliding_window_hides_tokens_a_window_back(impl: str) -> None:
    torch = pytest.importorskip("torch")
    from embedcalc.modeling import build_model

    window = 3
    config = _tiny(sliding_window=window, num_layers=1)
    model = build_model(config, attention=impl, device="cpu", seed=2)
    tokens = torch.randint(0, 17, (1, 10), generator=torch.Generator().manual_seed(0))
    changed = tokens.clone()
    changed[0, 2] = (tokens[0, 2] + 1) % 17
    with torch.no_grad():
        before, after = model(tokens).hidden, model(changed).hidden
    assert not torch.allclose(before[:, 2 : 2 + window], after[:, 2 : 2 + window])  # inside the window
    # one layer
    torch.testing.assert_close(before[:, 2 + window :], after[:, 2 + window :], rtol=0, atol=1e-6)


@pytest.mark.torch
@pytest.mark.parametrize(
    "extra",
    [
        {"sliding_window": 4},
        {"position": "learned", "position_offset": 2, "token_embed_dim": 5, "norm_bias": False},
        {"position": "relative", "relative_attention_max_distance": 4, "qkv_bias": True, "bias": False,
         "final_norm": False},
        {"architecture": "encoder-decoder", "position": "relative", "sliding_window": 2, "out_bias": False},
    ],
)  # fmt: skip
def test_sdpa_and_eager_agree_with_new_fields(extra: dict[str, Any]) -> None:
    torch = pytest.importorskip("torch")
    from embedcalc.modeling import build_model

    config = _tiny(**extra)
    sdpa = build_model(config, attention="sdpa", device="cpu", seed=1)
    eager = build_model(config, attention="eager", device="cpu")
    eager.load_state_dict(sdpa.state_dict())
    ids = torch.randint(0, 17, (2, 12), generator=torch.Generator().manual_seed(3))
    args = (ids, ids[:, :7]) if config.architecture == "encoder-decoder" else (ids,)
    with torch.no_grad():
        a, b = sdpa(*args).logits, eager(*args).logits
    assert a is not None and b is not None and bool(torch.isfinite(a).all())
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.torch
def test_relative_max_distance_matches_t5() -> None:
    torch = pytest.importorskip("torch")
    t5 = pytest.importorskip("transformers.models.t5.modeling_t5")
    from embedcalc.modeling.positions import relative_position_bucket

    relative = torch.arange(200)[None, :] - torch.arange(200)[:, None]
    for bidirectional in (True, False):
        ours = relative_position_bucket(
            relative, bidirectional=bidirectional, num_buckets=32, max_distance=64
        )
        theirs = t5.T5Attention._relative_position_bucket(relative, bidirectional=bidirectional, num_buckets=32,
                                                          max_distance=64)  # fmt: skip
        assert torch.equal(ours, theirs)


# --- README: describing another family in embedcalc's YAML -------------------------------------------------------


def _docs_pythia_yaml() -> str:
    page = (DOCS / "concepts" / "huggingface.md").read_text(encoding="utf-8")
    start = page.index("```yaml\nname: pythia-160m")
    return page[start + len("```yaml\n") : page.index("```", start + 3)]


def test_docs_yaml_example_counts_what_it_says(write_config: Any) -> None:
    config = load_target(str(write_config(_docs_pythia_yaml(), "pythia-160m.yaml"))).config
    assert count_params(config).total == 162_322_944
    assert forward_flops(config, Workload(batch_size=1, seq_len=128)).forward == 32_237_420_544


@pytest.mark.torch
def test_docs_yaml_example_equals_transformers_gpt_neox(hf: Any, write_config: Any) -> None:
    import torch

    config = load_target(str(write_config(_docs_pythia_yaml(), "pythia-160m.yaml"))).config
    neox = hf.GPTNeoXConfig(vocab_size=50304, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                            intermediate_size=3072, max_position_embeddings=2048, rotary_pct=0.25,
                            use_parallel_residual=True, tie_word_embeddings=False)  # fmt: skip
    with torch.device("meta"):
        model = hf.AutoModelForCausalLM.from_config(neox, attn_implementation="eager").eval()
    assert _numel(model) == count_params(config).total
    assert hf_forward_flops(model, 1, 128, no_cache=False) == forward_flops(config, Workload(1, 128)).forward
