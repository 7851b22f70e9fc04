"""Per-device memory under tensor, pipeline and data parallelism (issue 6), against hand-computed cases.

Conventions under test (``embedcalc.analysis.parallel``): Megatron-LM tensor parallelism (Shoeybi et al. 2019,
§3) splits Q/K/V and FFN-in by columns, attention-out and FFN-out by rows (their biases replicated), the token
table by vocabulary rows (padded up to a multiple of tp); norms, positions, segment table and pooler are
replicated. Pipeline stages (Narayanan et al. 2021) take contiguous blocks, the first ``L mod pp`` stages one more;
embeddings on stage 0, final norm / pooler / LM head on the last stage, a tied LM head keeps its own copy of the
token table there; 1F1B: stage i holds pp - i micro-batches. ZeRO (Rajbhandari et al. 2020) 1/2/3 divides
optimizer state / + gradients / + weights by dp.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from embedcalc.analysis.memory import estimate_memory
from embedcalc.analysis.parallel import stage_layout, stage_params
from embedcalc.analysis.workload import Parallelism, Workload
from embedcalc.sources.loading import load_target

H, F, L = 768, 3072, 12  # bert-base and gpt2 share the block shape

# One block of bert-base / gpt2, split the Megatron way:
SHARDED_PER_LAYER = (
    3 * H * H + 3 * H  # Q/K/V weight and bias (column-parallel: both split)
    + H * H  # attention output weight (row-parallel)
    + F * H + F  # FFN in weight and bias (column-parallel)
    + H * F  # FFN out weight (row-parallel)
)  # = 7,083,264  # fmt: skip
REPLICATED_PER_LAYER = (
    H  # attention output bias (row-parallel bias: replicated)
    + 2 * H  # attention LayerNorm
    + H  # FFN out bias
    + 2 * H  # FFN LayerNorm
)  # = 4,608
BLOCK = SHARDED_PER_LAYER + REPLICATED_PER_LAYER  # 7,087,872

BERT_VOCAB, GPT2_VOCAB = 30522, 50257
BERT_REPLICATED = 512 * H + 2 * H + 2 * H + (H * H + H)  # positions, segments, embedding LayerNorm, pooler
GPT2_REPLICATED = 1024 * H + 2 * H  # positions, final LayerNorm


def bert_rank_params(tp: int) -> int:
    vocab_rows = -(-BERT_VOCAB // tp)  # padded to a multiple of tp: 30522 -> 30522 (tp 2), 30524 (tp 4)
    return vocab_rows * H + L * (SHARDED_PER_LAYER // tp + REPLICATED_PER_LAYER) + BERT_REPLICATED


def gpt2_rank_params(tp: int) -> int:
    vocab_rows = -(-GPT2_VOCAB // tp)  # 50257 -> 50258 (tp 2), 50260 (tp 4)
    return vocab_rows * H + L * (SHARDED_PER_LAYER // tp + REPLICATED_PER_LAYER) + GPT2_REPLICATED


def config_of(name: str, *overrides: str) -> Any:
    return load_target(name, list(overrides)).config


def analyze(cli: Any, *args: str) -> tuple[dict[str, Any], str]:
    result = cli("analyze", *args, "--format", "json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["status"] == "ok"
    return data["results"][0], result.stderr


def test_hand_counts_match_the_reference_sizes() -> None:
    assert SHARDED_PER_LAYER == 7_083_264
    assert REPLICATED_PER_LAYER == 4_608
    assert bert_rank_params(1) == 109_482_240
    assert gpt2_rank_params(1) == 124_439_808


@pytest.mark.parametrize(
    ("name", "tp", "expected"),
    [
        # 15261 * 768 + 12 * (3,541,632 + 4,608) + 986,880
        ("bert-base", 2, 55_262_208),
        # 7631 * 768 + 12 * (1,770,816 + 4,608) + 986,880
        ("bert-base", 4, 28_152_576),
        # 25129 * 768 + 12 * (3,541,632 + 4,608) + 787,968
        ("gpt2", 2, 62_641_920),
        # 12565 * 768 + 12 * (1,770,816 + 4,608) + 787,968
        ("gpt2", 4, 31_742_976),
    ],
)
def test_tensor_parallel_params_per_device(cli: Any, name: str, tp: int, expected: int) -> None:
    hand = bert_rank_params(tp) if name == "bert-base" else gpt2_rank_params(tp)
    assert hand == expected
    assert stage_params(config_of(name), Parallelism(tp=tp)) == [expected]
    training, _ = analyze(cli, name, "--tp", str(tp), "--mode", "training")
    assert training["memory"]["weights_bytes"] == 4 * expected
    assert training["memory"]["gradients_bytes"] == 4 * expected
    assert training["memory"]["optimizer_bytes"] == 8 * expected
    assert training["params"]["total"] == (109_482_240 if name == "bert-base" else 124_439_808)  # the model
    inference, _ = analyze(cli, name, "--tp", str(tp), "--dtype", "bfloat16")
    assert inference["memory"]["weights_bytes"] == 2 * expected


@pytest.mark.parametrize(("tp", "padded"), [(2, 50258), (4, 50260)])
def test_vocab_padding_is_stated(cli: Any, tp: int, padded: int) -> None:
    _, stderr = analyze(cli, "gpt2", "--tp", str(tp))
    assert "warning" in stderr
    assert f"padded to {padded}" in stderr
    assert "--tp" in stderr


def test_vocab_divisible_by_tp_is_not_padded(cli: Any) -> None:
    _, stderr = analyze(cli, "bert-base", "--tp", "2")  # 30522 = 2 * 15261
    assert "padded" not in stderr


def test_kv_heads_replicated_when_fewer_than_tp(cli: Any) -> None:
    result, stderr = analyze(cli, "gpt2", "--set", "num_kv_heads=2", "--tp", "4")
    assert "replicated" in stderr
    assert "num_kv_heads (2)" in stderr
    assert "--tp 4" in stderr
    # Per rank: 12/4 = 3 query heads and one (replicated) KV head of 64: Q/K/V out = 192 + 2 * 64 = 320.
    per_layer = (
        320 * H + 320  # Q/K/V weight and bias
        + H * 192 + H  # attention out (row-parallel over the 192 query columns) + replicated bias
        + 2 * H  # attention LayerNorm
        + (F // 4) * H + F // 4  # FFN in
        + H * (F // 4) + H  # FFN out + replicated bias
        + 2 * H  # FFN LayerNorm
    )  # = 1,578,560  # fmt: skip
    expected = 12565 * H + L * per_layer + GPT2_REPLICATED  # = 29,380,608
    assert expected == 29_380_608
    assert result["memory"]["weights_bytes"] == 4 * expected
    # KV cache: one KV head of 64 per rank, 128 tokens, 12 layers, K and V, fp32
    assert result["memory"]["kv_cache_bytes"] == 2 * 1 * 128 * 12 * 1 * 64 * 4


def test_kv_cache_splits_over_tp(cli: Any) -> None:
    result, _ = analyze(cli, "gpt2", "--tp", "4", "--batch-size", "2", "--seq-len", "64")
    assert result["memory"]["kv_cache_bytes"] == 2 * 2 * 64 * 12 * (12 // 4) * 64 * 4


# --- pipeline parallelism ------------------------------------------------------------------------------------

BERT_EMBEDDINGS = BERT_VOCAB * H + 512 * H + 2 * H + 2 * H  # token, positions, segments, embedding LayerNorm
POOLER = H * H + H


@pytest.mark.parametrize(
    ("name", "pp", "layers", "params"),
    [
        # 6 + 6 blocks; embeddings on stage 0, pooler on stage 1
        ("bert-base", 2, [6, 6], [BERT_EMBEDDINGS + 6 * BLOCK, 6 * BLOCK + POOLER]),
        # uneven: 12 = 3 + 3 + 2 + 2 + 2 (the first 12 mod 5 = 2 stages get one more)
        ("bert-base", 5, [3, 3, 2, 2, 2],
         [BERT_EMBEDDINGS + 3 * BLOCK, 3 * BLOCK, 2 * BLOCK, 2 * BLOCK, 2 * BLOCK + POOLER]),
        # gpt2: the tied LM head keeps its own copy of the token table on the last stage, with the final norm
        ("gpt2", 5, [3, 3, 2, 2, 2],
         [GPT2_VOCAB * H + 1024 * H + 3 * BLOCK, 3 * BLOCK, 2 * BLOCK, 2 * BLOCK,
          2 * BLOCK + 2 * H + GPT2_VOCAB * H]),
    ],
)  # fmt: skip
def test_pipeline_stage_params(cli: Any, name: str, pp: int, layers: list[int], params: list[int]) -> None:
    config = config_of(name)
    assert [s.num_layers for s in stage_layout(config, pp)] == layers
    assert stage_params(config, Parallelism(pp=pp)) == params
    result, stderr = analyze(cli, name, "--pp", str(pp), "--mode", "training")
    stages = result["memory"]["stages"]
    assert [s["stage"] for s in stages] == list(range(pp))
    assert [s["num_layers"] for s in stages] == layers
    assert [s["params"] for s in stages] == params
    assert [s["weights_bytes"] for s in stages] == [4 * p for p in params]
    # the per-device numbers are those of the heaviest stage
    heaviest = max(stages, key=lambda s: s["total_bytes"])
    for key in ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes", "total_bytes"):
        assert result["memory"][key] == heaviest[key]
    for s in stages:
        assert s["total_bytes"] == sum(s[k] for k in ("weights_bytes", "gradients_bytes", "optimizer_bytes",
                                                       "activations_bytes", "kv_cache_bytes"))  # fmt: skip
    if 12 % pp:
        assert "uneven" in stderr


def test_pipeline_tied_head_copy_is_not_on_a_single_stage() -> None:
    """With pp = 1 the tied head reuses the one token table: no second copy."""
    assert stage_params(config_of("gpt2"), Parallelism(pp=1)) == [124_439_808]


def test_stages_only_with_pipeline(cli: Any) -> None:
    single, _ = analyze(cli, "gpt2", "--tp", "2", "--dp", "2")
    assert "stages" not in single["memory"]
    piped, _ = analyze(cli, "gpt2", "--pp", "2")
    assert len(piped["memory"]["stages"]) == 2


def test_pipeline_and_tensor_parallel_combine() -> None:
    config = config_of("gpt2")
    vocab_rows = -(-GPT2_VOCAB // 2)  # 25129
    block = SHARDED_PER_LAYER // 2 + REPLICATED_PER_LAYER
    assert stage_params(config, Parallelism(tp=2, pp=2)) == [
        vocab_rows * H + 1024 * H + 6 * block,
        6 * block + 2 * H + vocab_rows * H,
    ]


def test_encoder_decoder_kv_cache_only_on_decoder_stages(cli: Any) -> None:
    # transformer-base: 6 encoder + 6 decoder blocks; pp 2 puts the encoder on stage 0, the decoder on stage 1
    result, _ = analyze(cli, "transformer-base", "--pp", "2", "--seq-len", "64")
    stages = result["memory"]["stages"]
    assert stages[0]["kv_cache_bytes"] == 0
    # self (64 target tokens) + cross (64 source tokens), 6 decoder layers, 8 heads of 64, K and V, fp32
    assert stages[1]["kv_cache_bytes"] == 2 * 1 * (64 + 64) * 6 * 8 * 64 * 4


def test_decoder_kv_cache_splits_over_stages(cli: Any) -> None:
    # gpt2, pp 3: 4 blocks a stage, each caching K and V of its own 4 layers (batch 2, 64 tokens, fp32)
    result, _ = analyze(cli, "gpt2", "--pp", "3", "--batch-size", "2", "--seq-len", "64")
    stages = result["memory"]["stages"]
    assert [s["kv_cache_bytes"] for s in stages] == [2 * 2 * 64 * 4 * 12 * 64 * 4] * 3
    # inference weights: stage 0 token + positions + 4 blocks, last stage 4 blocks + final norm + tied head copy
    assert [s["weights_bytes"] for s in stages] == [
        4 * (GPT2_VOCAB * H + 1024 * H + 4 * BLOCK),
        4 * (4 * BLOCK),
        4 * (4 * BLOCK + 2 * H + GPT2_VOCAB * H),
    ]


def test_one_f_one_b_in_flight_micro_batches() -> None:
    """gpt2, bf16, eager, batch 1, seq 128, pp 4 (3 blocks a stage): stage i holds pp - i micro-batches.

    One block saves 34 s b h + 5 a s² b (Korthikanti eq. 1; gpt2 has dropout 0.1, a 4h FFN, MHA); stage 0 adds
    the embedding output and its mask (3 s b h); the last stage the final norm input (2 s b h) and the LM head's
    input (2 s b h) plus fp32 logits (4 s b vocab).
    """
    s, b, h, a = 128, 1, 768, 12
    block = 34 * s * b * h + 5 * a * s * s * b  # 4,325,376
    per_micro_batch = [
        3 * block + 3 * s * b * h,
        3 * block,
        3 * block,
        3 * block + 2 * s * b * h + 2 * s * b * h + 4 * s * b * GPT2_VOCAB,
    ]
    memory = estimate_memory(
        config_of("gpt2"),
        Workload(batch_size=b, seq_len=s, dtype="bfloat16", mode="training", attention="eager",
                 parallel=Parallelism(pp=4)),
    )  # fmt: skip
    assert [st.activations_bytes for st in memory.stages] == [
        (4 - i) * m for i, m in enumerate(per_micro_batch)
    ]
    assert memory.stages[0].activations_bytes == 53_084_160
    assert memory.activations_bytes == memory.stages[0].activations_bytes  # stage 0 is the heaviest here


def test_tensor_parallel_activations_follow_korthikanti_eq2() -> None:
    """Without sequence parallelism one block saves s b h (10 + 24 / t + 5 a s / (h t)) bytes (16-bit)."""
    s, b, h, a, t = 128, 8, 768, 12, 2
    memory = estimate_memory(
        config_of("bert-base"),
        Workload(batch_size=b, seq_len=s, dtype="bfloat16", mode="training", attention="eager",
                 parallel=Parallelism(tp=t)),
    )  # fmt: skip
    per_layer = 10 * s * b * h + 24 * s * b * h // t + 5 * a * s * s * b // t
    act = memory.activations.as_dict()
    layers = sum(act[k] for k in ("encoder/attention/linear", "encoder/attention/scores", "encoder/ffn",
                                   "encoder/norms"))  # fmt: skip
    assert layers == 12 * per_layer


# --- ZeRO ------------------------------------------------------------------------------------------------------

N = 109_482_240  # bert-base; N / 4 = 27,370,560 exactly


@pytest.mark.parametrize(
    ("zero", "weights", "gradients", "optimizer"),
    [
        (0, 4 * N, 4 * N, 8 * N),
        (1, 4 * N, 4 * N, 8 * N // 4),  # optimizer state sharded over dp = 4
        (2, 4 * N, 4 * N // 4, 8 * N // 4),  # + gradients
        (3, 4 * N // 4, 4 * N // 4, 8 * N // 4),  # + weights
    ],
)
def test_zero_stages(cli: Any, zero: int, weights: int, gradients: int, optimizer: int) -> None:
    result, _ = analyze(cli, "bert-base", "--mode", "training", "--dp", "4", "--zero", str(zero))
    memory = result["memory"]
    assert (memory["weights_bytes"], memory["gradients_bytes"], memory["optimizer_bytes"]) == (
        weights, gradients, optimizer
    )  # fmt: skip


def test_zero_mixed_precision_with_tp() -> None:
    """ZeRO-3, bf16, tp 2, dp 8: 2 + 2 + 12 bytes per rank parameter, all divided by 8."""
    p = 55_262_208  # bert-base on one of 2 TP ranks (see above); 2 p / 8 = 13,815,552
    memory = estimate_memory(config_of("bert-base"), Workload(
        mode="training", dtype="bfloat16", parallel=Parallelism(tp=2, dp=8, zero=3)))  # fmt: skip
    assert (memory.weights_bytes, memory.gradients_bytes, memory.optimizer_bytes) == (
        2 * p // 8, 2 * p // 8, 12 * p // 8
    )  # fmt: skip


def test_zero_without_dp_is_noted(cli: Any) -> None:
    result, stderr = analyze(cli, "bert-base", "--mode", "training", "--zero", "3")
    assert "--zero" in stderr and "--dp 1" in stderr
    assert result["memory"]["weights_bytes"] == 4 * N


# --- divisibility errors ---------------------------------------------------------------------------------------


def test_tp_must_divide_num_heads(cli: Any) -> None:
    result = cli("analyze", "bert-base", "--tp", "5")
    assert result.exit_code == 3
    assert "--tp" in result.stderr
    assert "num_heads" in result.stderr
    assert "(12)" in result.stderr
    assert result.stdout == ""


def test_tp_must_divide_num_heads_json(cli: Any) -> None:
    result = cli("analyze", "bert-base", "--tp", "5", "--format", "json")
    assert result.exit_code == 3
    data = json.loads(result.stdout)
    assert data["status"] == "error"
    # 5 divides neither num_heads (12) nor ffn_dim (3072 = 5 * 614 + 2): both are reported
    assert [(p["path"], p["code"]) for p in data["problems"]] == [
        ("--tp", "tp_heads"),
        ("--tp", "tp_ffn_dim"),
    ]


def test_tp_must_divide_ffn_dim(cli: Any) -> None:
    result = cli("analyze", "bert-base", "--set", "ffn_dim=3074", "--tp", "4")
    assert result.exit_code == 3
    assert "--tp 4" in result.stderr
    assert "ffn_dim (3074)" in result.stderr
    assert "3072 or 3076" in result.stderr  # the nearest ffn_dim divisible by 4


def test_tp_and_kv_heads_must_nest(cli: Any) -> None:
    # 12 heads, 4 KV heads, tp 6: 6 divides 12 but neither of 4 and 6 divides the other
    result = cli("analyze", "gpt2", "--set", "num_kv_heads=4", "--tp", "6")
    assert result.exit_code == 3
    assert "--tp" in result.stderr
    assert "num_kv_heads (4)" in result.stderr


def test_pp_larger_than_the_layer_count(cli: Any) -> None:
    result = cli("analyze", "bert-base", "--pp", "13")
    assert result.exit_code == 3
    assert "--pp 13" in result.stderr
    assert "12" in result.stderr


def test_pp_counts_both_stacks_of_an_encoder_decoder(cli: Any) -> None:
    ok, _ = analyze(cli, "transformer-base", "--pp", "12")  # 6 encoder + 6 decoder blocks
    assert [s["num_layers"] for s in ok["memory"]["stages"]] == [1] * 12
    result = cli("analyze", "transformer-base", "--pp", "13")
    assert result.exit_code == 3
    assert "--pp" in result.stderr
    assert "num_decoder_layers" in result.stderr


@pytest.mark.parametrize("flag", ["--tp", "--pp", "--dp"])
def test_parallel_degrees_must_be_positive(cli: Any, flag: str) -> None:
    result = cli("analyze", "bert-base", flag, "0")
    assert result.exit_code == 2
    assert flag in result.stderr


def test_zero_stage_out_of_range(cli: Any) -> None:
    result = cli("analyze", "bert-base", "--zero", "4")
    assert result.exit_code == 2
    assert "--zero" in result.stderr


def test_compare_takes_the_parallel_flags(cli: Any) -> None:
    result = cli("compare", "bert-base", "gpt2", "--tp", "2", "--format", "json")
    assert result.exit_code == 0, result.stderr
    weights = [r["memory"]["weights_bytes"] for r in json.loads(result.stdout)["results"]]
    assert weights == [4 * 55_262_208, 4 * 62_641_920]
