"""The analyzer against published numbers and independent closed forms.

The reference numbers (DESIGN.md §8, issue 2 "Done when") are checked end to end, through
``embedcalc analyze NAME --format json`` in a subprocess. Everything else is checked against formulas written
out here, term by term, independently of ``embedcalc.analysis``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import pytest
from json_contract import MEMORY_KEYS

from embedcalc.analysis.crossover import crossover_fraction, crossover_seq_len
from embedcalc.analysis.flops import forward_flops
from embedcalc.analysis.memory import kv_cache_bytes, weight_bytes
from embedcalc.analysis.params import count_params, param_tensors
from embedcalc.analysis.report import analyze
from embedcalc.analysis.workload import Workload
from embedcalc.config.schema import ModelConfig
from embedcalc.sources.loading import load_target

BERT_BASE_PARAMS = 109_482_240

REFERENCE_PARAMS = {
    "bert-base": 109_482_240,
    "bert-large": 335_141_888,
    "gpt2": 124_439_808,
    "gpt2-medium": 354_823_168,
    "gpt2-large": 774_030_080,
    "gpt2-xl": 1_557_611_200,
    "transformer-base": 63_082_496,
    "transformer-big": 214_245_376,
}


# --- reference numbers through the CLI -----------------------------------------------------------------------


@pytest.mark.parametrize(("name", "expected"), REFERENCE_PARAMS.items())
def test_reference_param_counts(analyze_json: Callable[..., Any], name: str, expected: int) -> None:
    result = analyze_json(name)["results"][0]
    assert result["target"] == name
    assert result["params"]["total"] == expected
    assert sum(result["params"]["breakdown"].values()) == expected


def test_bert_base_forward_flops_batch1_seq128(analyze_json: Callable[..., Any]) -> None:
    data = analyze_json("bert-base", "--batch-size", "1", "--seq-len", "128")
    assert data["workload"]["batch_size"] == 1
    assert data["workload"]["seq_len"] == 128
    flops = data["results"][0]["flops"]
    assert flops["forward"] == 22_348_431_360
    assert flops["training_step"] == 3 * 22_348_431_360
    assert flops["forward_causal"] is None  # an encoder has no causal stack
    assert sum(flops["breakdown"].values()) == flops["forward"]


def test_bert_base_forward_flops_default_workload_is_batch1_seq128(analyze_json: Callable[..., Any]) -> None:
    assert analyze_json("bert-base")["results"][0]["flops"]["forward"] == 22_348_431_360


@pytest.mark.parametrize(("name", "expected"), [("bert-base", 4608), ("bert-large", 6144), ("gpt2", 4608)])
def test_crossover_seq_len(analyze_json: Callable[..., Any], name: str, expected: int) -> None:
    value = analyze_json(name)["results"][0]["crossover_seq_len"]
    assert value == expected
    assert isinstance(value, int)


@pytest.mark.parametrize(("dtype", "per_param"), [("float32", (4, 4, 8)), ("bfloat16", (2, 2, 12))])
def test_bert_base_training_memory(
    analyze_json: Callable[..., Any], dtype: str, per_param: tuple[int, int, int]
) -> None:
    data = analyze_json(
        "bert-base", "--mode", "training", "--batch-size", "8", "--seq-len", "128", "--dtype", dtype
    )
    assert data["workload"]["mode"] == "training"
    memory = data["results"][0]["memory"]
    n = BERT_BASE_PARAMS
    w, g, o = per_param
    assert memory["weights_bytes"] == w * n
    assert memory["gradients_bytes"] == g * n
    assert memory["optimizer_bytes"] == o * n
    assert memory["kv_cache_bytes"] == 0
    assert memory["activations_bytes"] > 0
    assert memory["total_bytes"] == 16 * n + memory["activations_bytes"]
    assert sum(memory["activations_breakdown"].values()) == memory["activations_bytes"]
    for key in MEMORY_KEYS:
        assert isinstance(memory[key], int)


def test_json_envelope_shape(analyze_json: Callable[..., Any]) -> None:
    data = analyze_json("gpt2")
    assert data["schema_version"] == 1
    assert data["command"] == "analyze"
    result = data["results"][0]
    assert set(result) >= {"target", "config", "derived", "params", "flops", "memory", "warnings"}
    assert result["derived"]["head_dim"] == 64
    assert result["derived"]["ffn_ratio"] == 4.0
    assert set(result["flops"]) >= {"forward", "forward_causal", "training_step", "breakdown"}
    assert set(result["memory"]) >= set(MEMORY_KEYS)


# --- more published sizes, from configs written here (independent of presets/) --------------------------------

LLAMA2_7B = dict(
    architecture="decoder",
    vocab_size=32000,
    max_seq_len=4096,
    embed_dim=4096,
    num_heads=32,
    num_layers=32,
    ffn_dim=11008,
    activation="swiglu",
    norm="rmsnorm",
    position="rope",
    bias=False,
    tie_embeddings=False,
)
T5_SMALL = dict(
    architecture="encoder-decoder",
    vocab_size=32128,
    max_seq_len=512,
    embed_dim=512,
    num_heads=8,
    head_dim=64,
    num_layers=6,
    ffn_dim=2048,
    activation="relu",
    norm="rmsnorm",
    norm_placement="pre",
    position="relative",
    bias=False,
    tie_embeddings=True,
)


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        pytest.param(LLAMA2_7B, 6_738_415_616, id="llama-2-7b"),  # HF LlamaForCausalLM
        pytest.param({**LLAMA2_7B, "num_kv_heads": 8, "ffn_dim": 14336}, 7_241_732_096, id="mistral-7b-gqa"),
        pytest.param(T5_SMALL, 60_506_624, id="t5-small"),  # HF T5ForConditionalGeneration
        pytest.param(
            {**T5_SMALL, "embed_dim": 768, "num_heads": 12, "num_layers": 12, "ffn_dim": 3072},
            222_903_552,
            id="t5-base",
        ),
    ],
)
def test_other_published_param_counts(config: dict[str, Any], expected: int) -> None:
    assert count_params(ModelConfig(**config)).total == expected


# --- independent closed forms ---------------------------------------------------------------------------------


def gpt_params(V: int, S: int, d: int, L: int) -> int:
    """GPT-2-style decoder: learned positions, LayerNorm, pre-norm + final norm, biases, 4d GELU FFN, tied head."""
    per_layer = (3 * d * d + 3 * d) + (d * d + d) + 2 * d + (4 * d * d + 4 * d) + (4 * d * d + d) + 2 * d
    assert per_layer == 12 * d * d + 13 * d
    return V * d + S * d + L * per_layer + 2 * d


def gpt_forward_flops(V: int, d: int, L: int, b: int, n: int) -> int:
    """2 per MAC: per layer QKV 6bnd², out 2bnd², scores+context 4bn²d, FFN 16bnd²; LM head 2bndV."""
    return L * (24 * b * n * d * d + 4 * b * n * n * d) + 2 * b * n * d * V


def gpt_config(V: int, S: int, d: int, L: int, h: int) -> ModelConfig:
    return ModelConfig(
        architecture="decoder", vocab_size=V, max_seq_len=S, embed_dim=d, num_heads=h, num_layers=L
    )


@pytest.mark.parametrize(
    ("V", "S", "d", "L", "h"),
    [
        (50257, 1024, 768, 12, 12),
        (50257, 1024, 1600, 48, 25),
        (7, 3, 10**6, 10**4, 8),
        (10**9, 10**7, 10**6, 10**4, 1000),
    ],
)
def test_decoder_params_and_flops_match_closed_form(V: int, S: int, d: int, L: int, h: int) -> None:
    config = gpt_config(V, S, d, L, h)
    assert count_params(config).total == gpt_params(V, S, d, L)
    for b, n in ((1, 1), (3, 128), (7, 10**5)):
        flops = forward_flops(config, Workload(batch_size=b, seq_len=n))
        assert flops.forward == gpt_forward_flops(V, d, L, b, n)
        assert flops.training_step == 3 * gpt_forward_flops(V, d, L, b, n)


@pytest.mark.parametrize(
    ("name", "S", "d", "L"),
    [
        ("gpt2", 1024, 768, 12),
        ("gpt2-medium", 1024, 1024, 24),
        ("gpt2-large", 1024, 1280, 36),
        ("gpt2-xl", 1024, 1600, 48),
        ("gpt3-175b", 2048, 12288, 96),
    ],
)
def test_gpt_presets_match_the_closed_form(name: str, S: int, d: int, L: int) -> None:
    assert count_params(load_target(name).config).total == gpt_params(50257, S, d, L)


def test_gpt3_175b_size() -> None:
    """Brown et al. 2020, Table 2.1: 175.0B; the exact count of that shape with GPT-2's 50257 vocabulary."""
    assert count_params(load_target("gpt3-175b").config).total == 174_604_259_328


def test_huge_shape_counts_exactly() -> None:
    """embed_dim 10^6, 10^4 layers: Python ints all the way (a float would lose the low digits)."""
    d, L, V, S = 10**6, 10**4, 50257, 2048
    config = gpt_config(V, S, d, L, 16)
    total = count_params(config).total
    assert total == 120_000_182_307_000_000  # 10^4 (12·10^12 + 13·10^6) + (50257 + 2048 + 2)·10^6
    assert total == gpt_params(V, S, d, L)
    assert isinstance(total, int)
    assert total > 2**53  # beyond float precision: only exact integer arithmetic gets every digit
    result = analyze("huge", config, Workload(batch_size=1, seq_len=2048, mode="training"))
    assert result.memory.weights_bytes == 4 * total
    assert result.memory.optimizer_bytes == 8 * total
    assert result.flops.forward == gpt_forward_flops(V, d, L, 1, 2048)


def test_huge_shape_through_cli_json(write_config: Any, cli: Any) -> None:
    d, L, V, S = 10**6, 10**4, 50257, 2048
    path = write_config(
        {
            "architecture": "decoder",
            "vocab_size": V,
            "max_seq_len": S,
            "embed_dim": d,
            "num_heads": 16,
            "num_layers": L,
        }
    )
    result = cli("analyze", str(path), "--format", "json", "--seq-len", "2048")
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)["results"][0]
    assert out["params"]["total"] == gpt_params(V, S, d, L)
    assert out["flops"]["forward"] == gpt_forward_flops(V, d, L, 1, 2048)


def test_bert_base_flops_closed_form() -> None:
    """12 layers x (24 b n d² + 4 b n² d) + pooler 2 b d² = 22,348,431,360 at b=1, n=128."""
    config = load_target("bert-base").config
    b, n, d, L = 1, 128, 768, 12
    expected = L * (24 * b * n * d * d + 4 * b * n * n * d) + 2 * b * d * d
    assert expected == 22_348_431_360
    flops = forward_flops(config, Workload(batch_size=b, seq_len=n))
    assert flops.forward == expected
    assert flops.breakdown["pooler"] == 2 * d * d
    assert flops.breakdown["encoder/attention/scores"] == L * 2 * b * n * n * d
    assert flops.breakdown["encoder/attention/context"] == L * 2 * b * n * n * d
    assert flops.attention_score_flops == L * 4 * b * n * n * d


def test_bert_base_param_breakdown_components() -> None:
    params = count_params(load_target("bert-base").config)
    d, V, L = 768, 30522, 12
    assert params["embedding/token"] == V * d
    assert params["embedding/position"] == 512 * d
    assert params["embedding/type"] == 2 * d
    assert params["embedding/norm"] == 2 * d
    assert params["encoder/attention/qkv"] == L * (3 * d * d + 3 * d)
    assert params["encoder/attention/out"] == L * (d * d + d)
    assert params["encoder/ffn/in"] == L * (d * 4 * d + 4 * d)
    assert params["encoder/ffn/out"] == L * (4 * d * d + d)
    assert params["pooler"] == d * d + d
    assert "head/lm" not in params


def test_gpt2_causal_flops_count_half_the_score_matrix() -> None:
    config = load_target("gpt2").config
    n, d, L = 128, 768, 12
    flops = forward_flops(config, Workload(seq_len=n))
    full_scores = L * 4 * n * n * d
    causal_scores = L * 4 * (n * (n + 1) // 2) * d
    assert flops.forward_causal == flops.forward - full_scores + causal_scores
    assert flops.causal_breakdown is not None
    assert flops.causal_breakdown["decoder/attention/scores"] == L * 2 * (n * (n + 1) // 2) * d


def test_gqa_shrinks_kv_projection_flops_and_cache() -> None:
    mha = ModelConfig(**LLAMA2_7B)
    gqa = ModelConfig(**{**LLAMA2_7B, "num_kv_heads": 8})
    w = Workload(batch_size=2, seq_len=1000, dtype="bfloat16")
    d, t, L = 4096, 2 * 1000, 32
    assert forward_flops(gqa, w).breakdown["decoder/attention/qkv"] == L * 2 * t * d * (4096 + 2 * 1024)
    assert forward_flops(mha, w).breakdown["decoder/attention/qkv"] == L * 2 * t * d * (3 * 4096)
    # K and V, batch, tokens, layers, kv heads x head_dim, 2 bytes
    assert kv_cache_bytes(gqa, w) == 2 * 2 * 1000 * L * 1024 * 2
    assert kv_cache_bytes(mha, w) == 4 * kv_cache_bytes(gqa, w)
    # score work does not depend on the number of kv heads
    assert (
        forward_flops(gqa, w).breakdown["decoder/attention/scores"]
        == forward_flops(mha, w).breakdown["decoder/attention/scores"]
    )


def test_gated_ffn_has_three_matrices() -> None:
    config = ModelConfig(**LLAMA2_7B)
    params = count_params(config)
    assert params["decoder/ffn/in"] == 32 * 2 * 4096 * 11008
    assert params["decoder/ffn/out"] == 32 * 11008 * 4096
    assert params["decoder/attention/norm"] == 32 * 4096  # rmsnorm: weight only
    assert params["decoder/final_norm"] == 4096
    assert params["head/lm"] == 32000 * 4096  # untied


def test_encoder_decoder_cross_attention_flops() -> None:
    config = load_target("transformer-base").config
    b, n, m, d, L, V = 2, 100, 30, 512, 6, 37000
    flops = forward_flops(config, Workload(batch_size=b, seq_len=n, tgt_len=m))
    bd = flops.breakdown
    assert bd["encoder/attention/scores"] == L * 2 * b * n * n * d
    assert bd["decoder/attention/scores"] == L * 2 * b * m * m * d
    assert bd["decoder/cross_attention/scores"] == L * 2 * b * m * n * d
    assert bd["decoder/cross_attention/context"] == L * 2 * b * m * n * d
    # Q on target tokens, K and V on the encoder output
    assert bd["decoder/cross_attention/qkv"] == L * (2 * b * m * d * d + 2 * b * n * d * 2 * d)
    assert bd["head/lm"] == 2 * b * m * d * V


def test_transformer_base_shares_one_vocabulary() -> None:
    params = count_params(load_target("transformer-base").config)
    assert params["embedding/token"] == 37000 * 512
    assert "head/lm" not in params  # tied to the shared table
    assert "embedding/position" not in params  # sinusoidal: a buffer, not parameters


def test_kv_cache_gpt2_and_encoder_decoder() -> None:
    gpt2 = load_target("gpt2").config
    w = Workload(batch_size=1, seq_len=128)
    assert kv_cache_bytes(gpt2, w) == 2 * 1 * 128 * 12 * 768 * 4
    tb = load_target("transformer-base").config
    w2 = Workload(batch_size=3, seq_len=50, tgt_len=20, dtype="float16")
    self_cache = 2 * 3 * 20 * 6 * 512 * 2
    cross_cache = 2 * 3 * 50 * 6 * 512 * 2
    assert kv_cache_bytes(tb, w2) == self_cache + cross_cache
    assert kv_cache_bytes(load_target("bert-base").config, w) == 0


BERT_LINEAR = 12 * (768 * 2304 + 768 * 768 + 2 * 768 * 3072)  # the layers' weight matrices: 84,934,656
BERT_OTHER = BERT_BASE_PARAMS - BERT_LINEAR  # embeddings, biases, norms, pooler: kept in the activation dtype
BERT_GROUPS = BERT_LINEAR // 128  # every input width (768, 3072) is a multiple of 128: one scale+zero per 128


@pytest.mark.parametrize(
    ("dtype", "expected"),
    [("fp32", 4 * BERT_BASE_PARAMS), ("bf16", 2 * BERT_BASE_PARAMS), ("fp16", 2 * BERT_BASE_PARAMS),
     ("fp8", BERT_LINEAR + 2 * BERT_OTHER),
     ("int8", BERT_LINEAR + 4 * BERT_GROUPS + 2 * BERT_OTHER),
     ("int4", BERT_LINEAR // 2 + 4 * BERT_GROUPS + 2 * BERT_OTHER)],
)  # fmt: skip
def test_inference_weight_bytes(dtype: str, expected: int) -> None:
    config = load_target("bert-base").config
    workload = Workload(dtype=dtype)  # type: ignore[arg-type]
    tensors = [(t.key, t.shape, t.copies) for t in param_tensors(config)]
    assert weight_bytes(tensors, workload) == expected
    memory = analyze("bert-base", config, workload).memory
    assert memory.weights_bytes == expected
    assert memory.gradients_bytes == memory.optimizer_bytes == 0
    assert memory.total_bytes == expected + memory.activations_bytes + memory.kv_cache_bytes
    assert (BERT_LINEAR, BERT_OTHER) == (84_934_656, 24_547_584)


def test_int4_rounds_odd_param_counts_up() -> None:
    assert weight_bytes([("decoder/ffn/in", (3, 1), 1)], Workload(dtype="int4")) == 2 + 3 * 4


def test_training_rejects_weight_only_dtypes() -> None:
    config = load_target("bert-base").config
    with pytest.raises(ValueError, match="weight-only"):
        analyze("bert-base", config, Workload(mode="training", dtype="int8"))


def test_eager_attention_holds_the_score_matrix() -> None:
    config = load_target("bert-base").config
    for mode in ("inference", "training"):
        sdpa = analyze("b", config, Workload(seq_len=512, batch_size=8, mode=mode)).memory  # type: ignore[arg-type]
        eager = analyze(
            "b",
            config,
            Workload(
                seq_len=512,
                batch_size=8,
                mode=mode,  # type: ignore[arg-type]
                attention="eager",
            ),
        ).memory
        # eager materialises batch x heads x n x n scores (at least one such tensor, 4 bytes each)
        assert eager.activations_bytes - sdpa.activations_bytes >= 4 * 8 * 12 * 512 * 512 - 4 * 8 * 12 * 512


def test_elementwise_estimate_is_not_in_the_matmul_total() -> None:
    config = load_target("bert-base").config
    flops = forward_flops(config, Workload())
    assert flops.elementwise.total > 0
    assert flops.forward == 22_348_431_360
    assert not set(flops.elementwise.as_dict()) & set(flops.breakdown.as_dict())


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("bert-base", 4608),
        ("bert-large", 6144),
        ("gpt2", 4608),
        ("gpt2-xl", 9600),
        ("transformer-base", 3072),
    ],
)
def test_crossover_is_where_scores_equal_the_rest(name: str, expected: int) -> None:
    """At n = n*, one self-attention block's n² work equals its projections + FFN (2 d + f for MHA, 4d FFN)."""
    config = load_target(name).config
    assert crossover_seq_len(config) == expected
    assert crossover_fraction(config) == Fraction(2 * config.embed_dim + config.resolved_ffn_dim)
    flops = forward_flops(config, Workload(seq_len=expected))
    first = "encoder" if config.architecture != "decoder" else "decoder"
    bd = flops.breakdown
    scores = bd[f"{first}/attention/scores"] + bd[f"{first}/attention/context"]
    rest = sum(bd[f"{first}/{k}"] for k in ("attention/qkv", "attention/out", "ffn/in", "ffn/out"))
    assert scores == rest


def test_crossover_non_integer_is_a_float() -> None:
    config = ModelConfig(
        architecture="encoder",
        vocab_size=100,
        max_seq_len=64,
        embed_dim=5,
        num_heads=1,
        head_dim=3,
        num_layers=1,
        ffn_dim=1,
    )
    # q = kv = 3: (2·5·(3 + 6) + 2·3·5 + 2·5·1 + 2·1·5) / (4·3) = 140 / 12 = 35 / 3
    assert crossover_fraction(config) == Fraction(35, 3)
    value = crossover_seq_len(config)
    assert isinstance(value, float)
    assert value == 35 / 3


def test_relative_position_bias_per_stack() -> None:
    params = count_params(ModelConfig(**T5_SMALL))
    assert params["encoder/attention/relative_bias"] == 32 * 8
    assert params["decoder/attention/relative_bias"] == 32 * 8
    assert "embedding/position" not in params
