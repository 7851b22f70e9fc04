"""Training and inference memory (issue 6) against hand-computed numbers.

Every expected value is written out as arithmetic from the config's shape, independently of
``embedcalc.analysis.memory``: the per-parameter recipes of mixed precision (Micikevicius et al. 2018; ZeRO §3),
optimizer state (AdamW, SGD with momentum, factored Adafactor), the saved-activation formula of Korthikanti et al.
2022 (§4.1, eq. 1: ``s b h (34 + 5 a s / h)`` bytes a layer for 16-bit activations, a 4h FFN, dropout), its
selective and full recomputation variants, SDPA's O(n) statistics, the GQA-aware KV cache, weight-only int formats.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from embedcalc.analysis.memory import estimate_memory
from embedcalc.analysis.workload import Workload
from embedcalc.config.schema import ModelConfig
from embedcalc.sources.loading import load_target

N_BERT_BASE = 109_482_240  # DESIGN.md §8
N_GPT2 = 124_439_808

# A tiny decoder whose every tensor is listed below (pre-norm, learned positions, tied LM head, biases).
TINY = {
    "name": "tiny", "architecture": "decoder", "vocab_size": 100, "max_seq_len": 16, "embed_dim": 8,
    "num_heads": 2, "num_layers": 2, "ffn_dim": 32, "activation": "gelu", "norm": "layernorm",
    "norm_placement": "pre", "position": "learned", "bias": True, "tie_embeddings": True, "lm_head": True,
    "dropout": 0.0,
}  # fmt: skip
# Every parameter tensor of TINY as (shape, copies). d = 8, f = 32, qkv out = 3 d = 24, 2 layers.
TINY_TENSORS: list[tuple[tuple[int, ...], int]] = [
    ((100, 8), 1),  # token embedding (also the tied LM head)
    ((16, 8), 1),  # learned positions
    ((24, 8), 2), ((24,), 2),  # Q/K/V weight and bias, per layer
    ((8, 8), 2), ((8,), 2),  # attention output weight and bias
    ((8,), 2), ((8,), 2),  # attention norm (LayerNorm weight, bias)
    ((32, 8), 2), ((32,), 2),  # FFN in
    ((8, 32), 2), ((8,), 2),  # FFN out
    ((8,), 2), ((8,), 2),  # FFN norm
    ((8,), 1), ((8,), 1),  # final norm
]  # fmt: skip
# N = 800 + 128 + 2 * (192 + 24 + 64 + 8 + 16 + 256 + 32 + 256 + 8 + 16) + 16 = 928 + 2 * 872 + 16 = 2,688
N_TINY = 800 + 128 + 2 * (192 + 24 + 64 + 8 + 8 + 8 + 256 + 32 + 256 + 8 + 8 + 8) + 16


def config_of(name: str, *overrides: str) -> ModelConfig:
    return load_target(name, list(overrides)).config


def training(**kw: Any) -> Workload:
    return Workload(mode="training", **kw)


def layer_terms(activations: dict[str, int], stack: str = "encoder") -> int:
    """Sum of the per-layer entries of an activations breakdown (embedding, final norm, pooler, head left out)."""
    per_layer = ("attention/linear", "attention/scores", "cross_attention/linear", "cross_attention/scores",
                 "ffn", "norms", "layer_input")  # fmt: skip
    return sum(activations.get(f"{stack}/{k}", 0) for k in per_layer)


def analyze_json(cli: Any, *args: str) -> dict[str, Any]:
    result = cli("analyze", *args, "--format", "json")
    assert result.exit_code == 0, result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    assert data["status"] == "ok"
    return data


# --- weights, gradients, optimizer state ---------------------------------------------------------------------


def test_tiny_param_count_is_the_listed_tensors() -> None:
    from math import prod

    assert N_TINY == 2_688
    assert sum(prod(shape) * n for shape, n in TINY_TENSORS) == N_TINY
    assert estimate_memory(ModelConfig(**TINY), Workload()).weights_bytes == 4 * N_TINY


@pytest.mark.parametrize(
    ("dtype", "weights", "gradients", "optimizer"),
    [
        ("float32", 4, 4, 8),  # fp32 weights, fp32 gradients, two fp32 AdamW moments
        ("bfloat16", 2, 2, 12),  # bf16 weights and gradients; fp32 master copy + two fp32 moments = 4 + 8
        ("float16", 2, 2, 12),
    ],
)
def test_bert_base_training_batch8_seq128(
    cli: Any, dtype: str, weights: int, gradients: int, optimizer: int
) -> None:
    data = analyze_json(cli, "bert-base", "--mode", "training", "--batch-size", "8", "--seq-len", "128",
                        "--dtype", dtype)  # fmt: skip
    memory = data["results"][0]["memory"]
    assert memory["weights_bytes"] == weights * N_BERT_BASE
    assert memory["gradients_bytes"] == gradients * N_BERT_BASE
    assert memory["optimizer_bytes"] == optimizer * N_BERT_BASE
    assert memory["weights_bytes"] + memory["gradients_bytes"] + memory["optimizer_bytes"] == 16 * N_BERT_BASE
    assert memory["kv_cache_bytes"] == 0
    assert memory["activations_bytes"] > 0
    assert sum(memory["activations_breakdown"].values()) == memory["activations_bytes"]
    assert memory["total_bytes"] == 16 * N_BERT_BASE + memory["activations_bytes"]
    assert "stages" not in memory  # one pipeline stage: no stage list


def test_inference_has_no_gradients_or_optimizer(cli: Any) -> None:
    memory = analyze_json(cli, "bert-base", "--optimizer", "sgd")["results"][0]["memory"]
    assert memory["weights_bytes"] == 4 * N_BERT_BASE
    assert memory["gradients_bytes"] == memory["optimizer_bytes"] == 0
    assert (
        memory["total_bytes"]
        == memory["weights_bytes"] + memory["activations_bytes"] + memory["kv_cache_bytes"]
    )


@pytest.mark.parametrize(
    ("dtype", "expected"),
    [
        ("float32", 4 * N_TINY),  # one fp32 momentum buffer: 4 bytes a parameter = 10,752
        ("bfloat16", 8 * N_TINY),  # + the fp32 master copy: 8 bytes a parameter = 21,504
    ],
)
def test_sgd_optimizer_state(dtype: str, expected: int) -> None:
    memory = estimate_memory(ModelConfig(**TINY), training(dtype=dtype, optimizer="sgd"))
    assert memory.optimizer_bytes == expected
    assert memory.weights_bytes == memory.gradients_bytes == (4 if dtype == "float32" else 2) * N_TINY


# Adafactor (Shazeer & Stern 2018, beta1 = None): a matrix keeps a row vector and a column vector (rows + cols
# fp32 numbers), a 1-D tensor its full second moment. Per tensor of TINY:
#   token 100 + 8 = 108, positions 16 + 8 = 24,
#   per layer: qkv 24 + 8 = 32 and bias 24, out 8 + 8 = 16 and bias 8, attention norm 8 + 8,
#              ffn in 32 + 8 = 40 and bias 32, ffn out 8 + 32 = 40 and bias 8, ffn norm 8 + 8  -> 232 a layer,
#   final norm 8 + 8 = 16.
# = 132 + 464 + 16 = 612 numbers
ADAFACTOR_STATE = 108 + 24 + 2 * (32 + 24 + 16 + 8 + 16 + 40 + 32 + 40 + 8 + 16) + 16


@pytest.mark.parametrize(
    ("dtype", "expected"),
    [
        ("float32", 4 * ADAFACTOR_STATE),  # 2,448 bytes
        ("bfloat16", 4 * (ADAFACTOR_STATE + N_TINY)),  # + fp32 master copy: 4 * (612 + 2,688) = 13,200
    ],
)
def test_adafactor_optimizer_state(dtype: str, expected: int) -> None:
    assert ADAFACTOR_STATE == 612
    memory = estimate_memory(ModelConfig(**TINY), training(dtype=dtype, optimizer="adafactor"))
    assert memory.optimizer_bytes == expected


def test_optimizer_flag_through_the_cli(cli: Any, write_config: Callable[..., Path]) -> None:
    path = str(write_config(TINY))
    common = ("--mode", "training", "--seq-len", "16", "--dtype", "bfloat16")
    by_optimizer = {
        name: analyze_json(cli, path, *common, "--optimizer", name)["results"][0]["memory"]["optimizer_bytes"]
        for name in ("adamw", "sgd", "adafactor")
    }
    assert by_optimizer == {
        "adamw": 12 * N_TINY,
        "sgd": 8 * N_TINY,
        "adafactor": 4 * (ADAFACTOR_STATE + N_TINY),
    }


# --- saved activations (Korthikanti et al. 2022) -------------------------------------------------------------

# bert-base: dropout 0.1, 16-bit, ffn 3072 = 4 h, MHA (no GQA), 12 layers.
S, B, H, A, L = 128, 8, 768, 12, 12


def bert_activations(
    attention: str, recompute: str, dtype: str = "bfloat16", *overrides: str
) -> dict[str, int]:
    memory = estimate_memory(
        config_of("bert-base", *overrides),
        training(batch_size=B, seq_len=S, dtype=dtype, attention=attention, recompute=recompute),  # type: ignore[arg-type]
    )
    breakdown = memory.activations.as_dict()
    assert sum(breakdown.values()) == memory.activations_bytes
    return breakdown


def test_korthikanti_eq1_per_layer() -> None:
    """s b h (34 + 5 a s / h) bytes a layer, written as 34 s b h + 5 a s² b so that it stays an integer."""
    per_layer = 34 * S * B * H + 5 * A * S * S * B  # 26,738,688 + 7,864,320 = 34,603,008
    assert per_layer == 34_603_008
    activations = bert_activations("eager", "none")
    assert layer_terms(activations) == L * per_layer
    # term by term (Korthikanti §4.1): attention 11 s b h + 5 a s² b, MLP 19 s b h, two layernorms 4 s b h
    assert activations["encoder/attention/linear"] == L * 11 * S * B * H
    assert activations["encoder/attention/scores"] == L * 5 * A * S * S * B
    assert activations["encoder/ffn"] == L * 19 * S * B * H
    assert activations["encoder/norms"] == L * 4 * S * B * H


def test_korthikanti_whole_model_adds_embedding_and_pooler() -> None:
    activations = bert_activations("eager", "none")
    embedding = 2 * S * B * H + S * B * H  # 16-bit embedding output + its 1-byte dropout mask
    pooler = 2 * B * H  # the pooler's input: the first token of each sequence
    assert activations["encoder/embedding"] == embedding
    assert activations["pooler"] == pooler
    assert sum(activations.values()) == L * (34 * S * B * H + 5 * A * S * S * B) + embedding + pooler


def test_without_dropout_no_masks() -> None:
    """dropout 0: no 1-byte masks (attention scores mask, attention / FFN residual masks, embedding mask) and no
    dropout output of the scores: 32 s b h + 2 a s² b a layer."""
    activations = bert_activations("eager", "none", "bfloat16", "dropout=0.0")
    assert layer_terms(activations) == L * (32 * S * B * H + 2 * A * S * S * B)
    assert activations["encoder/embedding"] == 2 * S * B * H


def test_float32_doubles_every_term_but_the_masks() -> None:
    """4-byte activations: attention 4·5 + 1 = 21 s b h and (4 + 1 + 4) a s² b, MLP 4·9 + 1 = 37, norms 8."""
    activations = bert_activations("eager", "none", "float32")
    assert layer_terms(activations) == L * ((21 + 37 + 8) * S * B * H + 9 * A * S * S * B)


def test_selective_recompute_drops_exactly_the_5as2b_term() -> None:
    none = bert_activations("eager", "none")
    selective = bert_activations("eager", "selective")
    assert layer_terms(none) - layer_terms(selective) == L * 5 * A * S * S * B
    assert layer_terms(selective) == L * 34 * S * B * H
    assert "encoder/attention/scores" not in selective
    # the backward pass re-materialises one attention core's n² tensors at a time
    assert selective["encoder/recompute_working_set"] == 5 * A * S * S * B
    assert sum(none.values()) - sum(selective.values()) == (L - 1) * 5 * A * S * S * B


@pytest.mark.parametrize(
    ("attention", "one_block"),
    [
        ("eager", 34 * S * B * H + 5 * A * S * S * B),  # Korthikanti eq. 1 for the block being recomputed
        ("sdpa", 34 * S * B * H + 4 * B * A * S),
    ],
)
def test_full_recompute_keeps_each_layer_input(attention: str, one_block: int) -> None:
    activations = bert_activations(attention, "full")
    assert layer_terms(activations) == L * 2 * S * B * H  # one 16-bit (s, b, h) tensor a layer
    assert activations["encoder/layer_input"] == L * 2 * S * B * H
    assert set(activations) == {
        "encoder/embedding",
        "encoder/layer_input",
        "pooler",
        "encoder/recompute_working_set",
    }
    assert activations["encoder/recompute_working_set"] == one_block  # one block re-materialised at a time


def test_sdpa_keeps_fp32_logsumexp_instead_of_the_n2_terms() -> None:
    eager = bert_activations("eager", "none")
    sdpa = bert_activations("sdpa", "none")
    assert sdpa["encoder/attention/scores"] == L * 4 * B * A * S  # fp32 log-sum-exp: b x a x s x 4 bytes
    assert sdpa["encoder/attention/linear"] == eager["encoder/attention/linear"]
    assert layer_terms(sdpa) == L * (34 * S * B * H + 4 * B * A * S)


@pytest.mark.parametrize(
    ("attention", "recompute"),
    [("eager", "selective"), ("eager", "full"), ("sdpa", "full"),
     ("sdpa", "selective")],
)  # fmt: skip
def test_recomputation_never_saves_more(attention: str, recompute: str) -> None:
    none = sum(bert_activations(attention, "none").values())
    assert sum(bert_activations(attention, recompute).values()) <= none


def test_recompute_and_attention_flags_through_the_cli(cli: Any) -> None:
    common = (
        "bert-base",
        "--mode",
        "training",
        "--batch-size",
        "8",
        "--seq-len",
        "128",
        "--dtype",
        "bfloat16",
    )
    totals = {
        (attention, recompute): analyze_json(cli, *common, "--attention", attention, "--recompute", recompute)[
            "results"][0]["memory"]["activations_bytes"]
        for attention, recompute in [("eager", "none"), ("eager", "selective"), ("eager", "full"), ("sdpa", "none")]
    }  # fmt: skip
    outside = 3 * S * B * H + 2 * B * H  # embedding output + mask, pooler input
    block = 34 * S * B * H + 5 * A * S * S * B
    assert totals[("eager", "none")] == L * block + outside
    # selective: no n² tensors kept, one layer's re-materialised while its backward runs
    assert totals[("eager", "selective")] == L * 34 * S * B * H + outside + 5 * A * S * S * B
    # full: each layer's input kept, one whole block re-materialised
    assert totals[("eager", "full")] == L * 2 * S * B * H + outside + block
    assert totals[("sdpa", "none")] == L * (34 * S * B * H + 4 * B * A * S) + outside


def test_gated_ffn_and_gqa_generalisation() -> None:
    """A swiglu FFN saves its input, gate, up, act(gate) and product (t d + 4 t f); GQA shrinks K and V."""
    base = {**TINY, "embed_dim": 64, "num_heads": 8, "num_kv_heads": 2, "ffn_dim": 96, "activation": "swiglu",
            "max_seq_len": 64, "dropout": 0.0}  # fmt: skip
    s, b, d, f, kv = 32, 2, 64, 96, 2 * 8  # head_dim 8, 2 KV heads: K and V are 16 wide each
    memory = estimate_memory(ModelConfig(**base), training(batch_size=b, seq_len=s, dtype="bfloat16",
                                                           attention="eager"))  # fmt: skip
    act = memory.activations.as_dict()
    t = s * b
    assert act["decoder/ffn"] == 2 * 2 * (t * d + 4 * t * f)
    # input of QKV (t d), Q (t d), K and V (2 t kv), context (t d), 2 layers, 2 bytes
    assert act["decoder/attention/linear"] == 2 * 2 * (t * d + t * d + 2 * t * kv + t * d)
    assert act["decoder/attention/scores"] == 2 * 2 * b * 8 * s * s  # softmax output only (no dropout)


# --- inference: KV cache, weight-only formats ----------------------------------------------------------------


@pytest.mark.parametrize("kv_heads", [12, 4, 1])
def test_kv_cache_is_gqa_aware(cli: Any, kv_heads: int) -> None:
    data = analyze_json(
        cli, "gpt2", "--batch-size", "3", "--seq-len", "100", "--set", f"num_kv_heads={kv_heads}"
    )
    # 2 (K and V) x batch 3 x 100 tokens x 12 layers x kv_heads x head_dim 64 x 4 bytes
    assert data["results"][0]["memory"]["kv_cache_bytes"] == 2 * 3 * 100 * 12 * kv_heads * 64 * 4


def test_gen_tokens_extend_the_kv_cache(cli: Any) -> None:
    data = analyze_json(cli, "gpt2", "--batch-size", "2", "--seq-len", "100", "--gen-tokens", "28",
                        "--dtype", "bfloat16")  # fmt: skip
    memory = data["results"][0]["memory"]
    assert memory["kv_cache_bytes"] == 2 * 2 * (100 + 28) * 12 * 12 * 64 * 2
    assert data["workload"]["gen_tokens"] == 28
    assert (
        memory["total_bytes"]
        == memory["weights_bytes"] + memory["kv_cache_bytes"] + memory["activations_bytes"]
    )


def test_encoder_decoder_adds_the_cross_attention_cache(cli: Any) -> None:
    data = analyze_json(cli, "transformer-base", "--batch-size", "2", "--seq-len", "64", "--tgt-len", "32",
                        "--gen-tokens", "10")  # fmt: skip
    # decoder self-attention: target prompt + generated tokens
    self_cache = 2 * 2 * (32 + 10) * 6 * 8 * 64 * 4
    cross_cache = 2 * 2 * 64 * 6 * 8 * 64 * 4  # K and V of the 64 source tokens, per decoder layer
    assert data["results"][0]["memory"]["kv_cache_bytes"] == self_cache + cross_cache


def test_encoder_caches_nothing(cli: Any) -> None:
    assert analyze_json(cli, "bert-base", "--gen-tokens", "5")["results"][0]["memory"]["kv_cache_bytes"] == 0


# bert-base's and gpt2's layer matrices: 84,934,656
LINEAR_12 = 12 * (768 * 2304 + 768 * 768 + 2 * 768 * 3072)
SCALES_12 = 4 * (LINEAR_12 // 128)  # an fp16 scale and zero per 128 inputs (every input width divides)


@pytest.mark.parametrize(("dtype", "weights"), [
    ("int8", LINEAR_12 + SCALES_12 + 2 * (N_BERT_BASE - LINEAR_12)),
    ("int4", LINEAR_12 // 2 + SCALES_12 + 2 * (N_BERT_BASE - LINEAR_12)),
])  # fmt: skip
def test_weight_only_int_formats(cli: Any, dtype: str, weights: int) -> None:
    memory = analyze_json(cli, "bert-base", "--dtype", dtype)["results"][0]["memory"]
    assert memory["weights_bytes"] == weights  # 1 and 0.5 bytes a layer weight + scales; the rest fp16
    fp16 = analyze_json(cli, "bert-base", "--dtype", "float16")["results"][0]["memory"]
    assert memory["activations_bytes"] == fp16["activations_bytes"]  # activations stay 16-bit


def test_int8_kv_cache_is_float16(cli: Any) -> None:
    memory = analyze_json(cli, "gpt2", "--dtype", "int8", "--seq-len", "64")["results"][0]["memory"]
    assert memory["weights_bytes"] == LINEAR_12 + SCALES_12 + 2 * (N_GPT2 - LINEAR_12) == 166_599_168
    assert memory["kv_cache_bytes"] == 2 * 1 * 64 * 12 * 12 * 64 * 2


@pytest.mark.parametrize("dtype", ["int8", "int4"])
def test_training_with_weight_only_dtype_is_an_invalid_workload(cli: Any, dtype: str) -> None:
    result = cli("analyze", "bert-base", "--mode", "training", "--dtype", dtype)
    assert result.exit_code == 3
    assert "--dtype" in result.stderr
    assert "weight-only" in result.stderr
    assert result.stdout == ""
    with pytest.raises(ValueError, match="weight-only"):
        estimate_memory(config_of("bert-base"), training(dtype=dtype))


def test_eager_inference_peak_holds_two_score_matrices() -> None:
    """One forward with eager attention holds the scores and their softmax (2 x b a n² elements) at once."""
    config = config_of("bert-base")
    w = {"batch_size": 4, "seq_len": 512}
    eager = estimate_memory(config, Workload(attention="eager", **w)).activations_bytes  # type: ignore[arg-type]
    sdpa = estimate_memory(config, Workload(attention="sdpa", **w)).activations_bytes  # type: ignore[arg-type]
    t, d = 4 * 512, 768
    # the attention sublayer wins in both; it differs only by the n² tensors
    assert eager == 4 * (2 * t * d + 3 * t * d + t * d) + 2 * 4 * 4 * 12 * 512 * 512
    assert sdpa == 4 * (2 * t * d + 2 * t * 4 * d)  # FFN is now the largest: residual + 2 t f, f = 4 d
