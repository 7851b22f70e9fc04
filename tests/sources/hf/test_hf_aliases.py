"""Model types that are another family's config, EmbeddingGemma, and the messages of refused files (issue 23).

Kimi K2 (``kimi_k2``: DeepSeek-V3's configuration class), InternLM3 (transformers builds ``LlamaForCausalLM``),
the text models of Qwen2.5-VL and Qwen3-VL (in ``text_config``, or at top level in Qwen2.5-VL files written before
transformers 5) and EmbeddingGemma (Gemma 3's text model with bidirectional attention, read as an encoder) each
count what transformers builds on the meta device. Refused files are told their family first, and what a class
they name in ``architectures`` / ``auto_map`` is. And a family added from the issue's list: OLMo 3 (OLMo 2's layers
with sliding windows on three layers of four), at OLMo-3-7B's dimensions (the file written here by transformers'
Olmo3Config, not copied from the hub) and on a small eager variant for FLOPs.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hf_reference import mapped_config, quiet_transformers
from paths import HF_FIXTURES

from embedcalc.analysis.flops import forward_flops
from embedcalc.analysis.memory import kv_cache_bytes
from embedcalc.analysis.params import count_params
from embedcalc.analysis.workload import Workload
from embedcalc.errors import ConfigError
from embedcalc.sources.hf import map_hf_config


@pytest.fixture(scope="module")
def transformers() -> Any:
    return quiet_transformers()


def _numel(model: Any, skip: str = "") -> int:
    return sum(p.numel() for name, p in model.named_parameters() if not (skip and name.startswith(skip)))


def _build(transformers: Any, config: Any, auto: Any = None) -> Any:
    import torch

    with torch.device("meta"):
        if auto is None or hasattr(auto, "from_config"):
            return (auto or transformers.AutoModelForCausalLM).from_config(
                config, attn_implementation="eager"
            )
        config._attn_implementation = "eager"
        return auto(config)


_KIMI_K2 = dict(
    vocab_size=163840, hidden_size=7168, intermediate_size=18432, moe_intermediate_size=2048, num_hidden_layers=61,
    num_attention_heads=64, num_key_value_heads=64, n_shared_experts=1, n_routed_experts=384, kv_lora_rank=512,
    q_lora_rank=1536, qk_rope_head_dim=64, v_head_dim=128, qk_nope_head_dim=128, num_experts_per_tok=8,
    first_k_dense_replace=1, max_position_embeddings=131072, routed_scaling_factor=2.827, topk_method="noaux_tc",
    n_group=1, topk_group=1, scoring_func="sigmoid", norm_topk_prob=True, num_nextn_predict_layers=0,
)  # fmt: skip
_KIMI_FILE = {
    "model_type": "kimi_k2",
    "architectures": ["DeepseekV3ForCausalLM"],
    "auto_map": {"AutoConfig": "configuration_deepseek.DeepseekV3Config",
                 "AutoModelForCausalLM": "modeling_deepseek.DeepseekV3ForCausalLM"},
}  # fmt: skip


def test_kimi_k2_is_deepseek_v3(transformers: Any) -> None:
    """Kimi K2's dimensions (moonshotai/Kimi-K2-Instruct): 1,026,408,209,408 parameters as transformers'
    DeepseekV3ForCausalLM builds them on the meta device (measured once: 13 s to build, so pinned here), and a small
    variant built in the test."""
    assert count_params(mapped_config(_KIMI_FILE | _KIMI_K2)).total == 1_026_408_209_408
    small = _KIMI_K2 | dict(vocab_size=512, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
                            num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4, n_routed_experts=8,
                            kv_lora_rank=16, q_lora_rank=24, qk_rope_head_dim=8, v_head_dim=16, qk_nope_head_dim=16,
                            num_experts_per_tok=2)  # fmt: skip
    model = _build(transformers, transformers.DeepseekV3Config(**small))
    mapping = map_hf_config(_KIMI_FILE | small, "test")
    assert mapping.report.family == "kimi_k2"
    assert count_params(mapped_config(_KIMI_FILE | small)).total == _numel(model)


def test_internlm3_is_llama_with_its_aliases(transformers: Any) -> None:
    """transformers builds LlamaForCausalLM for internlm3; InternLM3Config names the biases qkv_bias and bias."""
    small = dict(vocab_size=512, hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=16)  # fmt: skip
    for bias in (False, True):
        config = transformers.InternLM3Config(**small, qkv_bias=bias, bias=bias)
        model = _build(transformers, config)
        assert type(model).__name__ == "LlamaForCausalLM"
        raw = {"model_type": "internlm3", "qkv_bias": bias, "bias": bias, **small}
        assert count_params(mapped_config(raw)).total == _numel(model), bias
        assert count_params(mapped_config(config.to_dict())).total == _numel(model), bias


_QWEN_TEXT = dict(vocab_size=512, hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2)  # fmt: skip
_VISION = {"depth": 1, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "out_hidden_size": 64}


@pytest.mark.parametrize("tied", [False, True])
def test_qwen2_5_vl_counts_its_text_model_nested_or_flat(transformers: Any, tied: bool) -> None:
    """Qwen2.5-VL: transformers 5 writes a text_config; files written before keep the text keys at top level
    (Qwen2_5_VLConfig takes every key its text config declares). Both count the language model and the LM head
    of Qwen2_5_VLForConditionalGeneration, tied as the outer tie_word_embeddings says."""
    config = transformers.Qwen2_5_VLConfig(
        text_config=_QWEN_TEXT, vision_config=_VISION, tie_word_embeddings=tied
    )
    model = _build(transformers, config, transformers.Qwen2_5_VLForConditionalGeneration)
    expected = _numel(model, skip="model.visual.")
    nested = config.to_dict()
    assert count_params(mapped_config(nested)).total == expected
    flat = {k: v for k, v in nested.items() if k != "text_config"} | {
        k: v for k, v in nested["text_config"].items() if k not in ("model_type", "architectures")
    }
    flat["model_type"] = "qwen2_5_vl"
    mapping = map_hf_config(flat, "test")
    assert "the text keys at top level" in mapping.report.notes[-1]
    assert count_params(mapped_config(flat)).total == expected


def test_qwen3_vl_counts_its_text_model(transformers: Any) -> None:
    text = _QWEN_TEXT | {"head_dim": 16}
    vision = {"depth": 1, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "out_hidden_size": 64,
              "deepstack_visual_indexes": [0]}  # fmt: skip
    config = transformers.Qwen3VLConfig(text_config=text, vision_config=vision)
    model = _build(transformers, config, transformers.Qwen3VLForConditionalGeneration)
    assert count_params(mapped_config(config.to_dict())).total == _numel(model, skip="model.visual.")


_EMBEDDING_GEMMA = dict(
    vocab_size=262144, hidden_size=768, intermediate_size=1152, num_hidden_layers=24, num_attention_heads=3,
    num_key_value_heads=1, head_dim=256, max_position_embeddings=2048, sliding_window=512,
    use_bidirectional_attention=True, query_pre_attn_scalar=256, rope_theta=1e6,
)  # fmt: skip


def test_embedding_gemma_is_a_bidirectional_encoder(transformers: Any) -> None:
    """EmbeddingGemma (google/embeddinggemma-300m's dimensions, as transformers saves it): Gemma3TextModel by the
    encoder counting rule (AutoModel), no KV cache, and the window read as transformers reads it: 512 in the file,
    512 // 2 + 1 = 257 in Gemma3TextConfig, an exclusive bound on each side."""
    config = transformers.Gemma3TextConfig(**_EMBEDDING_GEMMA)
    assert config.sliding_window == 257
    raw = config.to_dict()
    assert raw["sliding_window"] == 512
    model = _build(transformers, config, transformers.AutoModel)
    ours = mapped_config(raw)
    assert ours.architecture == "encoder" and not ours.lm_head
    assert count_params(ours).total == _numel(model) == 302_863_104
    assert kv_cache_bytes(ours, Workload(seq_len=2048)) == 0
    notes = map_hf_config(raw, "test").report.notes
    assert any("256 tokens each way" in note for note in notes)


def test_embedding_gemma_flops_equal_flop_counter(transformers: Any) -> None:
    """Full score matrices, as eager attention computes them in every layer, windowed or not."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    small = _EMBEDDING_GEMMA | dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=6,
                                    num_attention_heads=2, head_dim=32, sliding_window=8)  # fmt: skip
    config = transformers.Gemma3TextConfig(**small)
    model = transformers.AutoModel.from_config(config, attn_implementation="eager").eval()
    ids = torch.zeros(1, 40, dtype=torch.long)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(input_ids=ids)
    assert (
        forward_flops(mapped_config(config.to_dict()), Workload(seq_len=40)).forward
        == counter.get_total_flops()
    )


# --- messages of refused files ------------------------------------------------------------------------------------


def _refusal(raw: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as info:
        map_hf_config(raw, "test")
    return info.value.message


def test_a_refused_file_is_told_the_supported_class_it_names() -> None:
    by_architectures = _refusal({"model_type": "my_llama", "architectures": ["LlamaForCausalLM"]})
    assert (
        "Its architectures names LlamaForCausalLM, transformers' class of model_type 'llama'"
        in by_architectures
    )
    by_auto_map = _refusal({"model_type": "moonlight", "auto_map": {
        "AutoConfig": "configuration_deepseek.DeepseekV3Config"}})  # fmt: skip
    assert "auto_map.AutoConfig names DeepseekV3Config" in by_auto_map and "'deepseek_v3'" in by_auto_map
    # the longest class prefix wins: Qwen2Moe..., not Qwen2
    assert "'qwen2_moe'" in _refusal({"model_type": "x", "architectures": ["Qwen2MoeForCausalLM"]})
    assert "names" not in _refusal({"model_type": "x", "architectures": ["WhollyNewForCausalLM"]})


def test_a_hybrid_file_with_an_infinite_limit_is_told_its_family_first(cli: Any, write_config: Any) -> None:
    """Nemotron-H-like files hold ``time_step_limit: [0.0, Infinity]``: the family is the reason, so it comes first."""
    text = json.dumps({"model_type": "zamba", "hidden_size": 64, "time_step_limit": [0.0, float("inf")]})
    path = write_config(text, "config.json")
    result = cli("check", str(path))
    assert result.exit_code == 3
    first = result.stderr.strip().splitlines()[0]
    assert "model_type 'zamba' is not a family embedcalc reads" in first
    assert "time_step_limit" in result.stderr


@pytest.mark.parametrize("name", ["nemotron-h-8b-base-8k", "granite-4.0-h-small"])
def test_a_supported_hybrid_file_reads_its_infinite_time_step_limit(
    cli: Any, write_config: Any, name: str
) -> None:
    """transformers' default ``time_step_limit`` is ``(0.0, inf)`` and every save writes it: for a family that
    reads the key as element-wise only, the file is read (the value reported as text); Infinity elsewhere is still
    refused with its key."""
    raw = json.loads((HF_FIXTURES / f"{name}.json").read_text(encoding="utf-8"))
    text = json.dumps(raw | {"time_step_limit": [0.0, float("inf")]})
    result = cli("check", str(write_config(text, "config.json")), "--format", "json")
    assert result.exit_code == 0, result.stderr
    ignored = {i["key"]: i["value"] for i in json.loads(result.stdout)["results"][0]["hf"]["ignored"]}
    assert ignored["time_step_limit"] == [0.0, "Infinity"]
    bad = json.dumps(raw | {"time_step_limit": [0.0, float("inf")], "hidden_size": float("inf")})
    refused = cli("check", str(write_config(bad, "config.json")))
    assert refused.exit_code == 3
    assert "hidden_size: Infinity is infinite" in refused.stderr and "time_step_limit" not in refused.stderr


def test_jina_position_types_are_said_to_come_from_remote_code() -> None:
    path = HF_FIXTURES / "bert-base-uncased.json"
    raw = json.loads(path.read_text(encoding="utf-8"))
    jina_v2 = raw | {
        "position_embedding_type": "alibi",
        "auto_map": {"AutoModel": "jinaai/jina-bert-implementation--modeling_bert.JinaBertModel"},
    }
    message = _refusal(jina_v2)  # fmt: skip
    assert "remote code (JinaBertModel, in auto_map)" in message
    assert "older transformers" not in message
    assert "older transformers built distance embeddings" in _refusal(
        raw | {"position_embedding_type": "relative_key"}
    )


# --- OLMo 3 ------------------------------------------------------------------------------------------------------

_OLMO3_7B = dict(
    vocab_size=100278,
    hidden_size=4096,
    intermediate_size=11008,
    num_hidden_layers=32,
    num_attention_heads=32,
    num_key_value_heads=32,
    max_position_embeddings=65536,
    sliding_window=4096,
)


def _kv_bytes(cfg: Any, tokens: int) -> int:
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    return sum(2 * cfg.num_key_value_heads * head_dim * 2
               * (min(tokens, cfg.sliding_window) if t == "sliding_attention" else tokens)
               for t in cfg.layer_types)  # fmt: skip


@pytest.mark.parametrize("layer_types", [None, ["sliding_attention", "full_attention"] * 16])
def test_olmo3_params_and_kv_cache_equal_transformers(transformers: Any, layer_types: Any) -> None:
    import torch

    cfg = transformers.Olmo3Config(**_OLMO3_7B, layer_types=layer_types)
    ours = mapped_config(cfg.to_dict())
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    assert count_params(ours).total == sum(p.numel() for p in model.parameters())
    if layer_types is None:
        assert count_params(ours).total == 7_298_011_136
    for tokens in (1, 4096, 10_000, 65_536):
        assert kv_cache_bytes(ours, Workload(seq_len=tokens, dtype="float16")) == _kv_bytes(cfg, tokens), (
            tokens
        )


def test_olmo3_forward_flops_equal_flop_counter(transformers: Any) -> None:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    cfg = transformers.Olmo3Config(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                   sliding_window=8)  # fmt: skip
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager").eval()
    ids = torch.zeros(1, 32, dtype=torch.long)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(input_ids=ids, use_cache=False)
    assert (
        forward_flops(mapped_config(cfg.to_dict()), Workload(seq_len=32)).forward == counter.get_total_flops()
    )
