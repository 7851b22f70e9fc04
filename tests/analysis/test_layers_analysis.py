"""Layers as data (DESIGN.md §9, docs/layers.md) on the analysis side: the published totals of real models, exact
against transformers built on the meta device, hand counts of every new layer kind, MoE active parameters, the
MLA and windowed KV cache, windowed / chunked score pairs, expert parallelism, and the sweep grid through the same
term functions.

The embedcalc YAML of each reference model is written here (the shipped presets are another file's business).
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from embedcalc.analysis.attention import score_pairs
from embedcalc.analysis.flops import forward_flops
from embedcalc.analysis.memory import estimate_memory, kv_cache_bytes
from embedcalc.analysis.parallel import parallel_problems, stage_layout, stage_params
from embedcalc.analysis.params import active_params, count_params
from embedcalc.analysis.report import analyze
from embedcalc.analysis.sweep import SweepBase, evaluate_point, sweep_target
from embedcalc.analysis.workload import Parallelism, Workload
from embedcalc.config.schema import ModelConfig

MIXTRAL = {
    "name": "mixtral-8x7b", "architecture": "decoder", "vocab_size": 32000, "max_seq_len": 32768,
    "embed_dim": 4096, "num_heads": 32, "num_kv_heads": 8, "num_layers": 32, "ffn_dim": 14336,
    "activation": "swiglu", "norm": "rmsnorm", "position": "rope", "bias": False, "tie_embeddings": False,
    "dropout": 0.0, "ffn": {"kind": "moe", "num_experts": 8, "top_k": 2},
}  # fmt: skip
QWEN3_MOE = {
    "name": "qwen3-30b-a3b", "architecture": "decoder", "vocab_size": 151936, "max_seq_len": 40960,
    "embed_dim": 2048, "num_heads": 32, "num_kv_heads": 4, "head_dim": 128, "num_layers": 48, "ffn_dim": 6144,
    "activation": "swiglu", "norm": "rmsnorm", "position": "rope", "bias": False, "tie_embeddings": False,
    "dropout": 0.0, "attention": {"qk_norm": "head"},
    "ffn": {"kind": "moe", "num_experts": 128, "top_k": 8, "expert_dim": 768},
}  # fmt: skip
DEEPSEEK_V3 = {
    "name": "deepseek-v3", "architecture": "decoder", "vocab_size": 129280, "max_seq_len": 163840,
    "embed_dim": 7168, "num_heads": 128, "num_layers": 61, "ffn_dim": 18432, "activation": "swiglu",
    "norm": "rmsnorm", "position": "rope", "bias": False, "tie_embeddings": False, "dropout": 0.0,
    "attention": {"kind": "mla", "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
                  "qk_rope_head_dim": 64, "v_head_dim": 128},
    "blocks": {"moe": {"ffn": {"kind": "moe", "num_experts": 256, "top_k": 8, "expert_dim": 2048,
                               "num_shared_experts": 1}}},
    "layers": [{"pattern": ["default"], "repeat": 3}, {"pattern": ["moe"], "repeat": 58}],
}  # fmt: skip
GEMMA2_9B = {
    "name": "gemma-2-9b", "architecture": "decoder", "vocab_size": 256000, "max_seq_len": 8192, "embed_dim": 3584,
    "num_heads": 16, "num_kv_heads": 8, "head_dim": 256, "num_layers": 42, "ffn_dim": 14336,
    "activation": "geglu", "norm": "rmsnorm", "norm_placement": "sandwich", "position": "rope", "bias": False,
    "tie_embeddings": True, "scale_embeddings": True, "dropout": 0.0,
    "blocks": {"local": {"attention": {"sliding_window": 4096}}},
    "layers": [{"pattern": ["local", "default"], "repeat": 21}],
}  # fmt: skip
GPT_OSS_20B = {
    "name": "gpt-oss-20b", "architecture": "decoder", "vocab_size": 201088, "max_seq_len": 131072,
    "embed_dim": 2880, "num_heads": 64, "num_kv_heads": 8, "head_dim": 64, "num_layers": 24, "ffn_dim": 2880,
    "activation": "swiglu", "norm": "rmsnorm", "position": "rope", "bias": True, "tie_embeddings": False,
    "dropout": 0.0, "attention": {"sinks": True},
    "ffn": {"kind": "moe", "num_experts": 32, "top_k": 4, "router_bias": True},
    "blocks": {"local": {"attention": {"sliding_window": 128}}},
    "layers": [{"pattern": ["local", "default"], "repeat": 12}],
}  # fmt: skip
ALBERT_BASE_V2 = {
    "name": "albert-base-v2", "architecture": "encoder", "vocab_size": 30000, "max_seq_len": 512,
    "embed_dim": 768, "token_embed_dim": 128, "factorized_embeddings": True, "embedding_projection_bias": True,
    "num_heads": 12, "num_layers": 12, "ffn_dim": 3072, "activation": "gelu_tanh", "type_vocab_size": 2,
    "shared_layers": True, "dropout": 0.0,
}  # fmt: skip

# name: (config, total, active) as transformers counts them on the meta device from the published config.json
REFERENCE: dict[str, tuple[dict[str, Any], int, int | None]] = {
    "mixtral-8x7b": (MIXTRAL, 46_702_792_704, 12_879_925_248),
    "qwen3-30b-a3b": (QWEN3_MOE, 30_532_122_624, None),
    "deepseek-v3": (DEEPSEEK_V3, 671_026_404_352, None),
    "gemma-2-9b": (GEMMA2_9B, 9_241_705_984, None),
    "gpt-oss-20b": (GPT_OSS_20B, 20_914_757_184, None),
    "albert-base-v2": (ALBERT_BASE_V2, 11_683_584, None),
}


def config(data: dict[str, Any], **changes: Any) -> ModelConfig:
    return ModelConfig.model_validate({**data, **changes})


@pytest.mark.parametrize("name", REFERENCE)
def test_reference_totals(name: str) -> None:
    data, total, active = REFERENCE[name]
    c = config(data)
    params = count_params(c)
    assert params.total == total
    if active is not None:
        assert active_params(c) == active
    result = analyze(name, c, Workload()).to_json()
    assert result["params"]["total"] == total
    assert result["params"]["active"] == (active if active is not None else active_params(c))
    assert sum(result["params"]["breakdown"].values()) == total
    json.dumps(result)


def _transformers_config(name: str) -> tuple[Any, Any]:
    import transformers as t

    causal = t.AutoModelForCausalLM
    return {
        "mixtral-8x7b": (t.MixtralConfig(vocab_size=32000, hidden_size=4096, intermediate_size=14336,
                                         num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                                         num_local_experts=8, num_experts_per_tok=2, max_position_embeddings=32768,
                                         tie_word_embeddings=False), causal),
        "qwen3-30b-a3b": (t.Qwen3MoeConfig(vocab_size=151936, hidden_size=2048, intermediate_size=6144,
                                           moe_intermediate_size=768, num_hidden_layers=48, num_attention_heads=32,
                                           num_key_value_heads=4, head_dim=128, num_experts=128,
                                           num_experts_per_tok=8, max_position_embeddings=40960,
                                           tie_word_embeddings=False, decoder_sparse_step=1, mlp_only_layers=[]),
                          causal),
        "deepseek-v3": (t.DeepseekV3Config(vocab_size=129280, hidden_size=7168, intermediate_size=18432,
                                           moe_intermediate_size=2048, num_hidden_layers=61,
                                           num_attention_heads=128, num_key_value_heads=128, n_shared_experts=1,
                                           n_routed_experts=256, num_experts_per_tok=8, first_k_dense_replace=3,
                                           q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128,
                                           qk_rope_head_dim=64, v_head_dim=128, max_position_embeddings=163840,
                                           tie_word_embeddings=False), causal),
        "gemma-2-9b": (t.Gemma2Config(vocab_size=256000, hidden_size=3584, intermediate_size=14336,
                                      num_hidden_layers=42, num_attention_heads=16, num_key_value_heads=8,
                                      head_dim=256, max_position_embeddings=8192, sliding_window=4096), causal),
        "gpt-oss-20b": (t.GptOssConfig(vocab_size=201088, hidden_size=2880, intermediate_size=2880,
                                       num_hidden_layers=24, num_attention_heads=64, num_key_value_heads=8,
                                       head_dim=64, num_local_experts=32, num_experts_per_tok=4, sliding_window=128,
                                       max_position_embeddings=131072, tie_word_embeddings=False), causal),
        "albert-base-v2": (t.AlbertConfig(vocab_size=30000, embedding_size=128, hidden_size=768,
                                          num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
                                          max_position_embeddings=512, type_vocab_size=2), t.AutoModel),
    }[name]  # fmt: skip


@pytest.mark.torch
@pytest.mark.slow
@pytest.mark.parametrize("name", REFERENCE)
def test_reference_totals_equal_transformers_on_meta(name: str) -> None:
    """The reference numbers above are what transformers builds: sum numel of the model on the meta device."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    hf_config, model_class = _transformers_config(name)
    with torch.device("meta"):
        model = model_class.from_config(hf_config)
    assert (
        sum(p.numel() for p in model.parameters())
        == REFERENCE[name][1]
        == count_params(config(REFERENCE[name][0])).total
    )


# --- hand counts from docs/layers.md ----------------------------------------------------------------------------

TINY = {
    "architecture": "decoder", "vocab_size": 100, "max_seq_len": 64, "embed_dim": 16, "num_heads": 4,
    "num_layers": 2, "ffn_dim": 32, "activation": "swiglu", "norm": "rmsnorm", "position": "rope", "bias": False,
    "tie_embeddings": True, "dropout": 0.0,
}  # fmt: skip
D, H, HD, F, V, L = 16, 4, 4, 32, 100, 2


def test_mla_tensors_flops_and_cache() -> None:
    mla = {"kind": "mla", "q_lora_rank": 8, "kv_lora_rank": 6, "qk_nope_head_dim": 4, "qk_rope_head_dim": 2,
           "v_head_dim": 3}  # fmt: skip
    c = config(TINY, attention=mla)
    bd = count_params(c)
    qk = 4 + 2
    assert bd["decoder/attention/q_a"] == L * D * 8
    assert bd["decoder/attention/q_a_norm"] == L * 8
    assert bd["decoder/attention/q_b"] == L * 8 * H * qk
    assert bd["decoder/attention/kv_a"] == L * D * (6 + 2)
    assert bd["decoder/attention/kv_a_norm"] == L * 6
    assert bd["decoder/attention/kv_b"] == L * 6 * H * (4 + 3)
    assert bd["decoder/attention/out"] == L * H * 3 * D
    b, n = 2, 10
    t = b * n
    fl = forward_flops(c, Workload(batch_size=b, seq_len=n)).breakdown
    assert fl["decoder/attention/q_a"] == L * 2 * t * D * 8
    assert fl["decoder/attention/q_b"] == L * 2 * t * 8 * H * qk
    assert fl["decoder/attention/kv_a"] == L * 2 * t * D * 8
    assert fl["decoder/attention/kv_b"] == L * 2 * t * 6 * H * 7
    assert fl["decoder/attention/scores"] == L * 2 * b * H * n * n * qk
    assert fl["decoder/attention/context"] == L * 2 * b * H * n * n * 3
    assert fl["decoder/attention/out"] == L * 2 * t * H * 3 * D
    # the compressed cache: kv_lora_rank + qk_rope_head_dim values per token per layer, whatever the heads
    assert kv_cache_bytes(c, Workload(batch_size=b, seq_len=n)) == b * n * L * (6 + 2) * 4
    assert c.derived()["head_dim"] == qk
    without_q_lora = config(TINY, attention={**mla, "q_lora_rank": None})
    assert count_params(without_q_lora)["decoder/attention/q"] == L * D * H * qk


def test_moe_tensors_flops_and_active() -> None:
    moe = {"kind": "moe", "num_experts": 4, "top_k": 2, "expert_dim": 8, "num_shared_experts": 2,
           "shared_expert_dim": 5, "shared_expert_gate": True, "router_bias": True}  # fmt: skip
    c = config(TINY, ffn=moe)
    bd = count_params(c)
    per_expert = D * 16 + 8 * D  # gated: gate + up, then down
    assert bd["decoder/moe/router"] == L * (D * 4 + 4)
    assert bd["decoder/moe/experts"] == L * 4 * per_expert
    assert bd["decoder/moe/shared"] == L * (D * 20 + 10 * D)
    assert bd["decoder/moe/shared_gate"] == L * D
    assert "decoder/ffn/in" not in bd and bd["decoder/ffn/norm"] == L * D
    assert active_params(c) == bd.total - L * (4 - 2) * per_expert
    b, n = 3, 7
    t = b * n
    fl = forward_flops(c, Workload(batch_size=b, seq_len=n)).breakdown
    assert fl["decoder/moe/router"] == L * 2 * t * D * 4
    assert fl["decoder/moe/experts"] == L * 2 * t * 2 * per_expert
    assert fl["decoder/moe/shared"] == L * 2 * t * (D * 20 + 10 * D)
    assert fl["decoder/moe/shared_gate"] == L * 2 * t * D
    dense = config(TINY)
    assert active_params(dense) == count_params(dense).total
    assert analyze("x", dense, Workload()).to_json()["params"]["active"] == count_params(dense).total


def test_qk_norms_sinks_and_norm_placements() -> None:
    head = count_params(config(TINY, attention={"qk_norm": "head", "sinks": True}))
    assert head["decoder/attention/qk_norm"] == L * 2 * HD
    assert head["decoder/attention/sinks"] == L * H
    full = count_params(config(TINY, attention={"qk_norm": "full"}, num_kv_heads=2))
    assert full["decoder/attention/qk_norm"] == L * (H * HD + 2 * HD)
    sandwich = count_params(config(TINY, norm_placement="sandwich"))
    assert sandwich["decoder/attention/norm"] == L * 2 * D and sandwich["decoder/ffn/norm"] == L * 2 * D
    one = count_params(config(TINY, norm_placement="parallel"))
    assert one["decoder/attention/norm"] == L * D and "decoder/ffn/norm" not in one
    two = count_params(config(TINY, norm_placement="parallel", parallel_norms=2))
    assert two["decoder/ffn/norm"] == L * D
    free = count_params(config(TINY, norm="layernorm", norm_affine=False))
    assert not any(k.endswith("norm") for k in free.as_dict())
    biased = count_params(config(TINY, lm_head_bias=True))
    assert biased["head/lm_bias"] == V


def test_factorized_embeddings_and_shared_layers() -> None:
    c = config(ALBERT_BASE_V2)
    bd = count_params(c)
    assert bd["embedding/token"] == 30000 * 128
    assert bd["embedding/position"] == 512 * 128
    assert bd["embedding/norm"] == 2 * 128
    assert bd["embedding/project_in"] == 128 * 768 + 768
    assert bd["encoder/attention/qkv"] == 768 * 2304 + 2304  # once: shared across the 12 layers
    w = Workload(batch_size=2, seq_len=16)
    unshared = config(ALBERT_BASE_V2, shared_layers=False)
    assert forward_flops(c, w).breakdown.as_dict() == forward_flops(unshared, w).breakdown.as_dict()
    assert forward_flops(c, w).breakdown["embedding/project_in"] == 2 * 2 * 16 * 128 * 768
    layer = sum(v for k, v in bd.items() if k.startswith("encoder/"))
    assert count_params(unshared).total - bd.total == 11 * layer


@pytest.mark.parametrize(("n", "window", "chunk"), [
    (1, None, None), (10, None, None), (10, 4, None), (3, 4, None), (10, None, 4), (12, None, 4), (10, 3, 4),
    (17, 5, 5), (100, 7, 16),
])  # fmt: skip
def test_score_pairs_count_what_each_query_sees(n: int, window: int | None, chunk: int | None) -> None:
    expected = 0
    for i in range(n):
        lo = (i // chunk) * chunk if chunk else 0
        keys = i - lo + 1
        expected += min(keys, window) if window else keys
    assert score_pairs(n, True, window, chunk) == expected
    assert score_pairs(n, False, window, chunk) == n * n


def test_windowed_layers_cap_their_cache_and_causal_scores() -> None:
    c = config(GEMMA2_9B)
    w = Workload(seq_len=8192, dtype="bfloat16")
    per_token = 2 * 8 * 256 * 2  # K and V of 8 heads of 256, bf16
    assert kv_cache_bytes(c, w) == 21 * 4096 * per_token + 21 * 8192 * per_token
    flops = forward_flops(c, w)
    assert flops.causal_breakdown is not None
    local = score_pairs(8192, True, 4096)
    full_causal = score_pairs(8192, True)
    scores = flops.causal_breakdown["decoder/attention/scores"]
    assert scores == 21 * 2 * 16 * 256 * (local + full_causal)
    assert flops.breakdown["decoder/attention/scores"] == 42 * 2 * 16 * 256 * 8192 * 8192


def test_flat_config_equals_its_explicit_layer_pattern() -> None:
    flat = config(TINY)
    patterned = config(TINY, layers=[{"pattern": ["default"], "repeat": L}])
    variant = config(TINY, blocks={"same": {"ffn": {"kind": "dense"}}},
                     layers=[{"pattern": ["same", "default"], "repeat": 1}])  # fmt: skip
    for w in (
        Workload(batch_size=2, seq_len=32),
        Workload(mode="training", seq_len=16, recompute="selective"),
    ):
        expected = analyze("x", flat, w).to_json()
        for other in (patterned, variant):
            got = analyze("x", other, w).to_json()
            for key in ("params", "flops", "memory"):
                assert got[key] == expected[key], key


def test_pipeline_stages_follow_the_layer_plan() -> None:
    c = config(DEEPSEEK_V3)
    stages = stage_layout(c, 4)
    assert [s.num_layers for s in stages] == [16, 15, 15, 15]
    first = dict((b.name, n) for b, n in stages[0].blocks["decoder"])
    assert first == {"default": 3, "moe": 13}
    assert sum(stage_params(c, Parallelism(pp=4))) == count_params(c).total + 0  # untied: no duplicate table


def test_expert_parallel_shards_the_experts() -> None:
    c = config(MIXTRAL)
    bd = count_params(c)
    experts = bd["decoder/moe/experts"]
    one = stage_params(c, Parallelism())[0]
    eight = stage_params(c, Parallelism(ep=8, dp=8))[0]
    assert one - eight == experts - experts // 8
    errors, _ = parallel_problems(c, Parallelism(ep=3, dp=3))
    assert [p.code for p in errors] == ["ep_experts"]
    errors, _ = parallel_problems(c, Parallelism(ep=2))
    assert [p.code for p in errors] == ["ep_dp"]
    errors, _ = parallel_problems(config(TINY), Parallelism(ep=2, dp=2))
    assert [p.code for p in errors] == ["ep_without_moe"]
    plain = estimate_memory(
        c, Workload(mode="training", dtype="bfloat16", parallel=Parallelism(dp=8, zero=1))
    )
    ep = estimate_memory(
        c, Workload(mode="training", dtype="bfloat16", parallel=Parallelism(dp=8, ep=8, zero=1))
    )
    assert ep.weights_bytes == plain.weights_bytes - 2 * (experts - experts // 8)
    # ZeRO-1 over dp 8: dense state / 8; the experts' state over dp / ep = 1 rank that holds the same experts
    assert ep.optimizer_bytes == -(-12 * (bd.total - experts) // 8) + 12 * (experts // 8)


def test_tensor_parallel_mla_and_moe_splits() -> None:
    c = config(DEEPSEEK_V3)
    tp = stage_params(c, Parallelism(tp=8))[0]
    assert tp < count_params(c).total // 4
    errors, _ = parallel_problems(config(MIXTRAL), Parallelism(tp=3))
    assert {p.code for p in errors} >= {"tp_ffn_dim"}


# --- the sweep grid on the new kinds ----------------------------------------------------------------------------


def _base(data: dict[str, Any]) -> SweepBase:
    return SweepBase(target=str(data.get("name", "x")), data=dict(data), user_keys={}, origin="test")


@pytest.mark.parametrize("name", ["mixtral-8x7b", "deepseek-v3", "gemma-2-9b", "gpt-oss-20b", "albert-base-v2",
                                  "qwen3-30b-a3b"])  # fmt: skip
def test_grid_equals_per_config_on_reference_models(name: str) -> None:
    data = dict(REFERENCE[name][0])
    axes: dict[str, tuple[int, ...]] = {"seq_len": (1, 100, 500), "batch_size": (1, 3)}
    if data.get("layers") is None:
        axes["num_layers"] = (1, 5)
    if data.get("head_dim") is None and "attention" not in data:
        axes["embed_dim"] = (data["embed_dim"], 2 * data["embed_dim"])
    for workload in (Workload(gen_tokens=7), Workload(mode="training", dtype="bfloat16", optimizer="adafactor",
                                                      recompute="selective", attention="eager")):  # fmt: skip
        result = sweep_target(_base(data), axes, workload)
        assert result.grid is not None
        flops = result.grid.breakdown("flops")
        params = result.grid.breakdown("params")
        for i in range(result.size):
            point = {a: result.axes[a][result.index[a][i]] for a in result.axes}
            expected = evaluate_point(_base(data), point, workload)
            assert "problems" not in expected, expected
            for key, value in expected.items():
                if key != "crossover_seq_len":
                    assert result.grid[key][i] == value, (name, point, key)
            assert result.crossover_column()[i] == expected["crossover_seq_len"]
            reference = analyze(name, _base(data).config_at(point, tuple(point)),
                                replace(workload, batch_size=point["batch_size"], seq_len=point["seq_len"],
                                        mode="inference"))  # fmt: skip
            assert {k: int(v[i]) for k, v in params.items() if v[i]} == reference.params.as_dict()
            assert {k: int(v[i]) for k, v in flops.items() if v[i]} == reference.flops.breakdown.as_dict()


def test_sweeping_layers_of_a_pattern_is_refused() -> None:
    from embedcalc.analysis.sweep import SweepError

    with pytest.raises(SweepError, match="layers pattern"):
        sweep_target(_base(GEMMA2_9B), {"num_layers": (2, 4)}, Workload())


def test_moe_sweep_cli_json(cli: Any, write_config: Any) -> None:
    path = write_config(MIXTRAL)
    result = cli("sweep", str(path), "--seq-len", "128:8192:x2", "--format", "json")
    assert result.exit_code == 0, result.stderr
    points = json.loads(result.stdout)["results"][0]["points"]
    assert len(points) == 7
    assert all(p["params"]["total"] == 46_702_792_704 for p in points)
    assert all(p["params"]["active"] == 12_879_925_248 for p in points)
    assert points[0]["flops"]["breakdown"]["decoder/moe/experts"] == 32 * 2 * 128 * 2 * 3 * 4096 * 14336
