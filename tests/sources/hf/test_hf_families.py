"""The families of issue 10, from published config.json files (``tests/fixtures/hf``): each file maps, and the
model transformers builds from it (meta device: nothing downloaded or allocated) has exactly embedcalc's
parameter count; forward FLOPs equal ``FlopCounterMode`` on small eager variants of a sample of families; the KV
cache equals the formula on transformers' own config object; refused families say what they need.

The counting rule (README): encoders as ``AutoModel``, decoders as ``AutoModelForCausalLM``, encoder-decoders as
``AutoModelForSeq2SeqLM``. Parameters are trainable ones: Marian's and Pegasus' sinusoidal tables are frozen
``nn.Embedding`` weights (``requires_grad`` false), fixed tables and not parameters (DESIGN §4).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hf_reference import forward_flops as hf_forward_flops
from hf_reference import mapped_config, published, unaccounted_keys
from paths import HF_FIXTURES, ROOT

from embedcalc.analysis.flops import forward_flops
from embedcalc.analysis.memory import kv_cache_bytes
from embedcalc.analysis.params import count_params
from embedcalc.analysis.workload import Workload
from embedcalc.config.schema import ModelConfig
from embedcalc.errors import ConfigError
from embedcalc.sources.hf import FAMILIES, map_hf_config
from embedcalc.sources.hf.registry import REFUSED
from embedcalc.sources.loading import load_target

FIXTURES = HF_FIXTURES

# fixture -> model_type: one flagship file per family (older and transformers-5 formats where they differ), this
# module's group of tests/fixtures/published_sizes.yaml; tests/sources/hf/test_published_sizes.py checks that each file
# is of its model_type and that embedcalc and transformers both count the row's total.
PUBLISHED = {name: row.model_type for name, row in published("test_hf_families").items()}


def _raw(stem: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / f"{stem}.json").read_text())
    return data


def test_every_family_has_a_fixture() -> None:
    assert set(PUBLISHED.values()) <= set(FAMILIES)


@pytest.mark.parametrize("stem", sorted(PUBLISHED))
def test_published_file_maps_and_reports_every_key(stem: str) -> None:
    raw = _raw(stem)
    loaded = load_target(str(FIXTURES / f"{stem}.json"))
    assert loaded.source == "hf"
    assert not unaccounted_keys(raw, stem)


# --- parity with transformers --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hf() -> Any:
    pytest.importorskip("torch")
    return pytest.importorskip("transformers")


def _hf_model(transformers: Any, raw: dict[str, Any], config: ModelConfig) -> Any:
    import torch

    hf_config = transformers.CONFIG_MAPPING[raw["model_type"]].from_dict(raw)
    auto = {"encoder": transformers.AutoModel, "decoder": transformers.AutoModelForCausalLM,
            "encoder-decoder": transformers.AutoModelForSeq2SeqLM}[config.architecture]  # fmt: skip
    with torch.device("meta"):
        model = auto.from_config(hf_config, attn_implementation="eager")
    if (
        raw["model_type"] == "mt5"
        and not config.tie_embeddings
        and model.lm_head.weight is model.shared.weight
    ):
        model.lm_head.weight = torch.nn.Parameter(torch.empty_like(model.shared.weight))  # as from_pretrained
    return model.eval()


def _trainable(model: Any) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)  # a tied Parameter once


# small eager variants: the published file with its sizes shrunk (the same keys, so the same mapping)
SMALL = {
    "phi-2": dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=4, vocab_size=101),
    "falcon-7b": dict(hidden_size=64, num_attention_heads=4, num_hidden_layers=2, vocab_size=101),
    "falcon-40b": dict(hidden_size=64, num_attention_heads=8, num_kv_heads=2, num_hidden_layers=2, vocab_size=101),
    "pythia-1.4b": dict(hidden_size=64, intermediate_size=96, num_attention_heads=4, num_hidden_layers=2,
                        vocab_size=101),
    "gpt-j-6b": dict(n_embd=64, n_head=4, n_layer=2, rotary_dim=8, vocab_size=101),
    "bloom-7b1": dict(hidden_size=64, n_head=4, n_layer=2, vocab_size=101),
    "starcoder2-3b": dict(hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2,
                          num_hidden_layers=2, vocab_size=101),
    "glm-4-9b-hf": dict(hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2,
                        head_dim=16, num_hidden_layers=2, vocab_size=101, pad_token_id=0),
    "granite-3.0-2b": dict(hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2,
                           num_hidden_layers=2, vocab_size=101),
    "modernbert-base": dict(hidden_size=64, intermediate_size=96, num_attention_heads=4, num_hidden_layers=3,
                            vocab_size=101, pad_token_id=0, bos_token_id=0, eos_token_id=0, cls_token_id=0,
                            sep_token_id=0),
    "xlm-roberta-base": dict(hidden_size=64, intermediate_size=96, num_attention_heads=4, num_hidden_layers=2,
                             vocab_size=101),
    "bart-large": dict(d_model=64, encoder_ffn_dim=96, decoder_ffn_dim=96, encoder_attention_heads=4,
                       decoder_attention_heads=4, encoder_layers=2, decoder_layers=2, num_hidden_layers=2,
                       vocab_size=101),
    "opus-mt-en-de": dict(d_model=64, encoder_ffn_dim=96, decoder_ffn_dim=96, encoder_attention_heads=4,
                          decoder_attention_heads=4, encoder_layers=2, decoder_layers=2, vocab_size=101,
                          decoder_vocab_size=101, pad_token_id=100, decoder_start_token_id=100, num_hidden_layers=2),
    "santacoder": dict(n_embd=64, n_head=4, n_layer=2, n_inner=96, vocab_size=101),
    "mpnet-base": dict(hidden_size=64, intermediate_size=96, num_attention_heads=4, num_hidden_layers=2,
                       vocab_size=101),
}  # fmt: skip


@pytest.mark.torch
@pytest.mark.parametrize("stem", sorted(SMALL))
def test_forward_flops_equal_flop_counter(hf: Any, stem: str) -> None:
    raw = _raw(stem) | SMALL[stem]
    config = mapped_config(raw)
    model = _hf_model(hf, raw, config)
    assert count_params(config).total == _trainable(model)
    tgt = 5 if config.architecture == "encoder-decoder" else None
    analytic = forward_flops(config, Workload(batch_size=2, seq_len=12, tgt_len=tgt)).forward
    assert hf_forward_flops(model, 2, 12, tgt, no_cache=False) == analytic


DECODERS = sorted(s for s in PUBLISHED if _raw(s)["model_type"] not in {
    "xlm-roberta", "camembert", "electra", "albert", "modernbert", "nomic_bert", "bart", "mbart", "marian",
    "pegasus", "mt5", "mpnet", "deberta-v2"})  # fmt: skip


@pytest.mark.parametrize("stem", DECODERS)
def test_kv_cache_equals_transformers_config(stem: str) -> None:
    """2 (K and V) x layers x KV heads x head_dim x tokens x bytes, from transformers' config object; a window
    caps the tokens of the layers that slide."""
    transformers = pytest.importorskip("transformers")
    raw = _raw(stem)
    c = transformers.CONFIG_MAPPING[raw["model_type"]].from_dict(raw)
    layers = c.num_hidden_layers
    heads = c.num_attention_heads
    kv = getattr(c, "num_key_value_heads", None) or heads
    if raw["model_type"] == "falcon":
        kv = c.num_kv_heads if c.new_decoder_architecture else 1 if c.multi_query else heads
    if raw["model_type"] == "gpt_bigcode":
        kv = 1 if c.multi_query else heads
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // heads
    types = getattr(c, "layer_types", None) or ["full_attention"] * layers
    window = getattr(c, "sliding_window", None) or getattr(c, "window_size", None)
    if raw["model_type"] == "gpt_neo":
        types = ["full_attention"] * layers  # GPT-Neo's cache keeps every token of its local layers too
    elif window is not None and getattr(c, "layer_types", None) is None:
        types = ["sliding_attention"] * layers
    tokens = 40000
    per_layer = [min(tokens, window) if t == "sliding_attention" and window else tokens for t in types]
    expected = sum(2 * kv * head_dim * n * 2 for n in per_layer)
    assert (
        kv_cache_bytes(mapped_config(raw), Workload(seq_len=tokens - 1, gen_tokens=1, dtype="float16"))
        == expected
    )


@pytest.mark.torch
def test_gpt_neo_kv_cache_is_what_transformers_caches() -> None:
    """GPT-Neo's local layers attend to window_size keys, but transformers' cache (DynamicCache built from a config
    with neither layer_types nor sliding_window) keeps every token: the bytes of the cache a forward fills equal
    kv_cache_bytes, and the local layers' window still limits the causal score pairs."""
    pytest.importorskip("torch")
    import torch

    transformers = pytest.importorskip("transformers")
    small = dict(vocab_size=128, hidden_size=32, num_layers=4, num_heads=4, max_position_embeddings=64,
                 attention_types=[[["global", "local"], 2]], window_size=4)  # fmt: skip
    config = transformers.GPTNeoConfig(**small)
    torch.manual_seed(0)
    model = transformers.GPTNeoForCausalLM(config).eval()
    tokens = 12
    with torch.no_grad():
        cache = model(torch.zeros(1, tokens, dtype=torch.long), use_cache=True).past_key_values
    held = sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values))
    ours = mapped_config(config.to_dict())
    assert kv_cache_bytes(ours, Workload(seq_len=tokens, dtype="float32")) == held
    assert ours.blocks is not None and ours.blocks["local"].attention.sliding_window == 4


# --- refusals and files as users have them ---------------------------------------------------------------------------


@pytest.mark.parametrize("model_type", sorted(REFUSED))
def test_refused_families_say_what_they_need(model_type: str) -> None:
    with pytest.raises(ConfigError) as info:
        map_hf_config({"model_type": model_type}, "test")
    assert info.value.problems[0].code == "hf_refused_family"
    assert REFUSED[model_type] in str(info.value)


@pytest.mark.parametrize(
    ("stem", "extra", "key"),
    [
        ("command-r-v01", {"use_qk_norm": True}, "use_qk_norm"),
        ("stablelm-2-1_6b", {"qk_layernorm": True}, "qk_layernorm"),
        ("mpt-7b", {"expansion_ratio": 8}, "expansion_ratio"),
        ("albert-base-v2", {"num_hidden_groups": 2}, "num_hidden_groups"),
        ("bart-large", {"decoder_ffn_dim": 1024}, "decoder_ffn_dim"),
        (
            "granite-3.0-2b",
            {"sliding_window": 4096},
            "sliding_window",
        ),  # read by transformers' caches and masks
    ],
)
def test_family_refusals_name_the_key(stem: str, extra: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        map_hf_config(_raw(stem) | extra, "test")
    assert [p.path for p in info.value.problems] == [key]


def test_harmless_keys_of_unsloth_nanotron_and_qwen_files_load() -> None:
    raw = _raw("granite-3.0-2b") | {"use_mrope": False, "is_llama_config": True, "rope_interleaved": False,
                                    "_num_labels": 2, "unsloth_version": "2024.9", "eos_token_ids": [0, 1],
                                    "_attn_implementation_autoset": True, "quantization_config": {"bits": 4},
                                    "output_router_logits": False, "embd_pdrop": 0.0}  # fmt: skip
    report = map_hf_config(raw, "test").report
    assert {"use_mrope", "unsloth_version", "eos_token_ids", "output_router_logits"} <= {
        i.key for i in report.ignored
    }


def test_a_file_without_model_type_says_which_to_add(cli: Any, write_config: Any) -> None:
    bert_tiny = {"hidden_size": 128, "hidden_act": "gelu", "initializer_range": 0.02, "vocab_size": 30522,
                 "hidden_dropout_prob": 0.1, "num_attention_heads": 2, "type_vocab_size": 2,
                 "max_position_embeddings": 512, "num_hidden_layers": 2, "intermediate_size": 512,
                 "attention_probs_dropout_prob": 0.1}  # fmt: skip
    result = cli("check", str(write_config(bert_tiny, "config.json")))
    assert result.exit_code == 3
    assert '"model_type": "bert"' in result.stderr


def test_a_multimodal_file_counts_its_text_model() -> None:
    text = _raw("granite-3.0-2b")
    llava = {"model_type": "llava", "architectures": ["LlavaForConditionalGeneration"], "text_config": text,
             "vision_config": {"model_type": "clip_vision_model", "hidden_size": 1024}, "image_token_index": 32000,
             "projector_hidden_act": "gelu", "vision_feature_layer": -2}  # fmt: skip
    mapping = map_hf_config(llava, "test")
    assert mapping.data == map_hf_config(text, "test").data
    assert any("text model" in n for n in mapping.report.notes)


# --- presets of these families: each equals the model transformers builds from its hub file ---------------------------

PRESET_SOURCES = {
    "phi-3-mini": "phi-3-mini-4k", "falcon-7b": "falcon-7b", "pythia-1.4b": "pythia-1.4b", "bloom-7b1": "bloom-7b1",
    "xlm-roberta-base": "xlm-roberta-base", "bart-large": "bart-large", "modernbert-base": "modernbert-base",
    "mpnet-base": "mpnet-base",
}  # fmt: skip
QWEN25_7B = {"model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
             "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064,
             "max_position_embeddings": 131072, "tie_word_embeddings": False, "hidden_act": "silu",
             "use_sliding_window": False, "sliding_window": 131072, "max_window_layers": 28}  # fmt: skip


@pytest.mark.torch
@pytest.mark.parametrize("preset", [*sorted(PRESET_SOURCES), "qwen2.5-7b"])
def test_presets_equal_transformers(hf: Any, preset: str) -> None:
    raw = QWEN25_7B if preset == "qwen2.5-7b" else _raw(PRESET_SOURCES[preset])
    config = load_target(preset).config
    assert count_params(config).total == _trainable(_hf_model(hf, raw, mapped_config(raw)))
    assert f"{count_params(config).total:,}" in (ROOT / "presets" /
                                                 f"{preset}.yaml").read_text()  # fmt: skip
