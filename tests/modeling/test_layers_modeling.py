"""The torch model's new layer kinds (DESIGN.md §9, docs/layers.md): each option in a tiny config builds on meta
and on the CPU, runs forward, and has the parameters and FLOPs per breakdown key that docs/layers.md gives by hand.

Also: MoE routing (real and deterministic give the same FLOPs; grouped and per-expert experts the same values),
attention semantics (sinks, chunks, ALiBi, MLA under both cores), shared layers counted once, random configs
mixing every new kind against embedcalc.analysis, and parameters (total and tensor shapes) against transformers'
own models of the real families (Mixtral, Qwen3, Qwen3-MoE, DeepSeek-V3, Gemma 2, gpt-oss, ALBERT, phi-2, GPT-J,
OLMo) on meta.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from embedcalc.analysis.flops import forward_flops  # noqa: E402
from embedcalc.analysis.params import count_params  # noqa: E402
from embedcalc.analysis.workload import Workload  # noqa: E402
from embedcalc.config.schema import ModelConfig  # noqa: E402
from embedcalc.modeling import build_model, component_flops, component_params, flop_counter_mode  # noqa: E402
from embedcalc.modeling.moe import MoE, deterministic_experts  # noqa: E402

pytestmark = pytest.mark.torch

IMPLS = ("sdpa", "eager")
# the tiny decoder every case starts from: d 16, h 4, g 2, hd 4, 2 layers, gated FFN 32, RMSNorm, no biases
V, D, H, G, HD, L, F = 31, 16, 4, 2, 4, 2, 32
B, N = 2, 8
T = B * N
BASE: dict[str, Any] = {
    "architecture": "decoder", "vocab_size": V, "max_seq_len": 16, "embed_dim": D, "num_heads": H,
    "num_kv_heads": G, "num_layers": L, "ffn_dim": F, "position": "rope", "activation": "swiglu",
    "norm": "rmsnorm", "bias": False, "tie_embeddings": True,
}  # fmt: skip
SCORES = L * 2 * B * H * N * N * HD  # per stack, full n² (docs/layers.md: 2 b h pairs hd per layer)
MLA = {"kind": "mla", "q_lora_rank": 8, "kv_lora_rank": 6, "qk_nope_head_dim": 4, "qk_rope_head_dim": 2,
       "v_head_dim": 3}  # fmt: skip
MOE = {"kind": "moe", "num_experts": 4, "top_k": 2, "expert_dim": 8}


def _config(**extra: Any) -> ModelConfig:
    return ModelConfig.model_validate({**BASE, **extra})


# case -> (extra config fields, expected params per key, expected FLOPs per key), by hand from docs/layers.md
CASES: dict[str, tuple[dict[str, Any], dict[str, int], dict[str, int]]] = {
    "qk_norm_head": ({"attention": {"qk_norm": "head"}}, {"decoder/attention/qk_norm": L * 2 * HD},
                     {"decoder/attention/scores": SCORES}),
    "qk_norm_full": ({"attention": {"qk_norm": "full"}}, {"decoder/attention/qk_norm": L * (H + G) * HD}, {}),
    # value heads of their own width (MiMo-V2-Flash): v_proj G x 6, out_proj from H x 6, the context at width 6
    "standard_v_head_dim": ({"attention": {"v_head_dim": 6}},
                            {"decoder/attention/qkv": L * D * (H * HD + G * HD + G * 6),
                             "decoder/attention/out": L * H * 6 * D},
                            {"decoder/attention/scores": SCORES, "decoder/attention/context": SCORES // HD * 6,
                             "decoder/attention/out": L * 2 * T * H * 6 * D}),
    # Laguna's per-head gate: g Linear(D, H) without bias, softplus(g(x)) scales each head's context
    "head_gate": ({"attention": {"head_gate": True, "qk_norm": "head"}}, {"decoder/attention/head_gate": L * D * H},
                  {"decoder/attention/head_gate": L * 2 * T * D * H}),
    # a block with its own query heads (Laguna's num_attention_heads_per_layer): 8 heads beside the flat 4
    "block_heads": ({"blocks": {"wide": {"attention": {"num_heads": 8, "head_gate": True}}},
                     "layers": [{"pattern": ["default", "wide"]}]},
                    {"decoder/attention/qkv": D * (H * HD + 2 * G * HD) + D * (8 * HD + 2 * G * HD),
                     "decoder/attention/out": (H + 8) * HD * D, "decoder/attention/head_gate": D * 8},
                    {"decoder/attention/scores": SCORES // (2 * H) * (H + 8)}),
    "sinks_windows": (
        {"attention": {"sinks": True}, "blocks": {"local": {"attention": {"sliding_window": 3}}},
         "layers": [{"pattern": ["local", "default"]}]},
        {"decoder/attention/sinks": L * H},
        {"decoder/attention/scores": SCORES, "decoder/attention/context": SCORES},
    ),
    "chunked": ({"attention": {"chunk_size": 3}}, {}, {"decoder/attention/scores": SCORES}),
    # MiniMax-M3's block-sparse attention: an indexer of 2 heads of 6 (q, k from D, RMSNorms over 6) keeps the
    # best 2 blocks of 3 keys per query; the core runs over all n keys, the unselected blocks masked
    "block_sparse": ({"attention": {"index_heads": 2, "index_head_dim": 6, "index_topk": 2, "index_block_size": 3,
                                    "qk_norm": "head"}},
                     {"decoder/attention/index_q": L * D * 2 * 6, "decoder/attention/index_k": L * D * 6,
                      "decoder/attention/index_q_norm": L * 6, "decoder/attention/index_k_norm": L * 6},
                     {"decoder/attention/scores": SCORES, "decoder/attention/index_q": L * 2 * T * D * 2 * 6,
                      "decoder/attention/index_k": L * 2 * T * D * 6,
                      "decoder/attention/index_scores": L * 2 * B * N * N * 2 * 6}),
    "xielu": ({"activation": "xielu"}, {"decoder/ffn/act": L * 2, "decoder/ffn/in": L * D * F},
              {"decoder/ffn/in": L * 2 * T * D * F, "decoder/ffn/out": L * 2 * T * F * D}),
    "alibi": ({"position": "alibi"}, {"decoder/attention/qkv": L * D * (H + 2 * G) * HD}, {}),
    "partial_rotary": ({"rotary_dim": 2}, {"decoder/attention/qkv": L * D * (H + 2 * G) * HD}, {}),
    "mla": (
        {"attention": MLA},
        {"decoder/attention/q_a": L * D * 8, "decoder/attention/q_a_norm": L * 8,
         "decoder/attention/q_b": L * 8 * H * 6, "decoder/attention/kv_a": L * D * (6 + 2),
         "decoder/attention/kv_a_norm": L * 6,
         "decoder/attention/kv_b": L * 6 * H * (4 + 3), "decoder/attention/out": L * H * 3 * D},
        {"decoder/attention/q_a": L * 2 * T * D * 8, "decoder/attention/q_b": L * 2 * T * 8 * H * 6,
         "decoder/attention/kv_a": L * 2 * T * D * 8, "decoder/attention/kv_b": L * 2 * T * 6 * H * 7,
         "decoder/attention/scores": L * 2 * B * H * N * N * 6, "decoder/attention/context": L * 2 * B * H * N * N * 3,
         "decoder/attention/out": L * 2 * T * H * 3 * D},
    ),
    # Mistral Large 4's parts: a learned per-head query scale (2 H), a NoPE layer (no rotary dims: its 6 query/key
    # channels all nope, kv_a D -> 6), the decoder's LeRoPE log-scales (rope / 2 = 1)
    "mla_query_scale_nope": (
        {"attention": {**MLA, "query_scale": True}, "rope_scale": True,
         "blocks": {"nope": {"attention": {"kind": "mla", "qk_nope_head_dim": 6, "qk_rope_head_dim": 0}}},
         "layers": [{"pattern": ["default", "nope"]}]},
        {"decoder/attention/query_scale": L * 2 * H, "decoder/attention/kv_a": D * (6 + 2) + D * 6,
         "decoder/attention/kv_b": 6 * H * (4 + 3) + 6 * H * (6 + 3), "decoder/rope_scale": 1},
        {"decoder/attention/kv_a": 2 * T * D * (6 + 2) + 2 * T * D * 6,
         "decoder/attention/scores": L * 2 * B * H * N * N * 6},
    ),
    # sparse attention without a query rank (Mistral Large 4): the indexer reads the input through a LayerNorm
    "sparse_hidden_indexer": (
        {"attention": {**{k: v for k, v in MLA.items() if k != "q_lora_rank"}, "kind": "sparse", "index_heads": 2,
                       "index_head_dim": 4, "index_topk": 4, "query_scale": True}},
        {"decoder/attention/index_q": L * D * 2 * 4, "decoder/attention/index_input_norm": L * 2 * D,
         "decoder/attention/index_query_scale": L * 2 * 2, "decoder/attention/query_scale": L * 2 * H},
        {"decoder/attention/index_q": L * 2 * T * D * 2 * 4},
    ),
    "mla_full_rank_q": (
        {"attention": {k: v for k, v in MLA.items() if k != "q_lora_rank"}},
        {"decoder/attention/q": L * D * H * 6},
        {"decoder/attention/q": L * 2 * T * D * H * 6},
    ),
    "moe": (
        {"ffn": {**MOE, "num_shared_experts": 2, "shared_expert_dim": 4, "shared_expert_gate": True,
                 "router_bias": True, "expert_bias": True}},
        {"decoder/moe/router": L * (D * 4 + 4), "decoder/moe/experts": L * 4 * (D * 16 + 16 + 8 * D + D),
         "decoder/moe/shared": L * (D * 16 + 8 * D), "decoder/moe/shared_gate": L * D, "decoder/ffn/norm": L * D},
        {"decoder/moe/router": L * 2 * T * D * 4, "decoder/moe/experts": L * 2 * T * 2 * (D * 16 + 8 * D),
         "decoder/moe/shared": L * 2 * T * (D * 16 + 8 * D), "decoder/moe/shared_gate": L * 2 * T * D},
    ),
    # LongCat-Flash's zero experts: the router scores 4 + 3, the 3 identity experts have no parameters or FLOPs
    "moe_zero_experts": (
        {"ffn": {**MOE, "zero_experts": 3}},
        {"decoder/moe/router": L * D * 7, "decoder/moe/experts": L * 4 * (D * 16 + 8 * D)},
        {"decoder/moe/router": L * 2 * T * D * 7, "decoder/moe/experts": L * 2 * T * 2 * (D * 16 + 8 * D)},
    ),
    "moe_first_dense": (
        {"blocks": {"moe": {"ffn": MOE}}, "layers": [{"pattern": ["default", "moe"]}]},
        {"decoder/ffn/in": D * 2 * F, "decoder/moe/experts": 4 * (D * 16 + 8 * D), "decoder/ffn/norm": L * D},
        {"decoder/ffn/in": 2 * T * D * 2 * F, "decoder/moe/experts": 2 * T * 2 * (D * 16 + 8 * D)},
    ),
    "sandwich": ({"norm_placement": "sandwich", "scale_embeddings": True},
                 {"decoder/attention/norm": L * 2 * D, "decoder/ffn/norm": L * 2 * D, "decoder/final_norm": D}, {}),
    "parallel_one_norm": ({"norm_placement": "parallel", "norm": "layernorm"},
                          {"decoder/attention/norm": L * 2 * D, "decoder/final_norm": 2 * D}, {}),
    "parallel_two_norms": ({"norm_placement": "parallel", "parallel_norms": 2},
                           {"decoder/attention/norm": L * D, "decoder/ffn/norm": L * D}, {}),
    "parameter_free_norms": ({"norm": "layernorm", "norm_affine": False, "attention": {"qk_norm": "head"}},
                             {}, {}),
    "bias_free_layernorm": ({"norm": "layernorm", "norm_bias": False}, {"decoder/attention/norm": L * D}, {}),
    "lm_head_bias_tied": ({"lm_head_bias": True}, {"head/lm_bias": V, "embedding/token": V * D},
                          {"head/lm": 2 * T * D * V}),
    "lm_head_bias_untied": ({"lm_head_bias": True, "tie_embeddings": False}, {"head/lm_bias": V, "head/lm": V * D}, {}),
    "shared_layers": ({"shared_layers": True},
                      {"decoder/attention/qkv": D * (H + 2 * G) * HD, "decoder/ffn/in": D * 2 * F},
                      {"decoder/attention/qkv": L * 2 * T * D * (H + 2 * G) * HD, "decoder/attention/scores": SCORES}),
    # DeepSeek-V4's grouped low-rank output: 2 groups of 2 heads, 8 -> 3 each (a 6 x 8 weight), then 6 -> D
    "grouped_output": ({"attention": {"out_groups": 2, "out_rank": 3}}, {"decoder/attention/out": L * (6 * 8 + D * 6)},
                       {"decoder/attention/out": L * 2 * T * 3 * (H * HD + 2 * D)}),
    # DeepSeek-V4's hyper-connections, n = 3 streams: (2 + n) n = 15 weights from n d = 48 inputs, a bias, 3 scales
    "hyper_connections": ({"hyper_connections": 3},
                          {"decoder/hyper/attention": L * (15 * 48 + 15 + 3), "decoder/hyper/ffn": L * (15 * 48 + 18),
                           "decoder/hyper_head": 3 * 48 + 3 + 1},
                          {"decoder/hyper/attention": L * (2 * T * 48 * 15 + 2 * T * 9 * D),
                           "decoder/hyper/ffn": L * (2 * T * 48 * 15 + 2 * T * 9 * D),
                           "decoder/hyper_head": 2 * T * 48 * 3, "decoder/attention/scores": SCORES}),
    "factorized_albert": (
        {"architecture": "encoder", "position": "learned", "type_vocab_size": 2, "norm": "layernorm", "bias": True,
         "activation": "gelu", "token_embed_dim": 8, "factorized_embeddings": True, "embedding_projection_bias": True,
         "shared_layers": True, "pooler": True},
        {"embedding/token": V * 8, "embedding/position": 16 * 8, "embedding/type": 2 * 8, "embedding/norm": 2 * 8,
         "embedding/project_in": 8 * D + D, "encoder/attention/norm": 2 * D},
        {"embedding/project_in": 2 * T * 8 * D, "encoder/attention/scores": SCORES},
    ),
}  # fmt: skip
NO_NORM_KEYS = (
    "decoder/attention/norm",
    "decoder/ffn/norm",
    "decoder/final_norm",
    "decoder/attention/qk_norm",
)


def _tokens(config: ModelConfig, length: int = N, seed: int = 0) -> Any:
    return torch.randint(0, config.vocab_size, (B, length), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("case", list(CASES))
def test_option_counts_by_hand_and_runs(case: str) -> None:
    extra, params, flops = CASES[case]
    config = _config(**extra)
    outputs = []
    for impl in IMPLS:
        model = build_model(config, attention=impl)
        assert all(p.device.type == "meta" for p in model.parameters())
        counted = component_params(model)
        assert sum(counted.values()) == sum(p.numel() for p in model.parameters())
        assert {k: counted.get(k, 0) for k in params} == params, impl
        measured = component_flops(config, model, batch_size=B, seq_len=N)
        assert {k: measured.get(k, 0) for k in flops} == flops, impl
        if case == "parameter_free_norms":
            assert not set(counted) & set(NO_NORM_KEYS)
        cpu = build_model(config, attention=impl, device="cpu", seed=3)
        if outputs:
            cpu.load_state_dict(outputs[0][0].state_dict())
        with torch.no_grad():
            out = cpu(_tokens(config)).main
        assert bool(torch.isfinite(out).all())
        outputs.append((cpu, out))
    torch.testing.assert_close(outputs[0][1], outputs[1][1], rtol=1e-4, atol=1e-5)  # sdpa == eager


def test_shared_layers_hold_one_block_called_per_layer() -> None:
    shared, separate = _config(shared_layers=True, num_layers=3), _config(num_layers=3)
    one, three = build_model(shared), build_model(separate)
    assert len(one.decoder.layers) == 1 and len(three.decoder.layers) == 3
    layer = sum(p.numel() for p in three.decoder.layers[0].parameters())
    assert sum(p.numel() for p in one.parameters()) == sum(p.numel() for p in three.parameters()) - 2 * layer
    assert component_flops(shared, one, B, N) == component_flops(separate, three, B, N)


# --- mixture of experts -----------------------------------------------------------------------------------------


def test_deterministic_routing_formula() -> None:
    experts = deterministic_experts(5, 2, 4)
    assert experts.tolist() == [[0, 1], [2, 3], [0, 1], [2, 3], [0, 1]]  # token i -> (i k + j) mod E
    counts = torch.bincount(deterministic_experts(13, 3, 5).flatten(), minlength=5).tolist()
    assert sorted(set(counts)) == [7, 8] and sum(counts) == 39  # floor or ceil of t k / E each


@pytest.mark.parametrize("activation", ["swiglu", "gelu"])
def test_real_and_deterministic_routing_count_the_same_flops(activation: str) -> None:
    config = _config(activation=activation, ffn={**MOE, "num_shared_experts": 1, "expert_bias": True})
    totals = {}
    for routing in ("real", "deterministic"):
        model = build_model(config, attention="eager", device="cpu", seed=1, routing=routing)
        with torch.no_grad(), flop_counter_mode() as counter:
            model(_tokens(config, seed=4))
        totals[routing] = counter.get_total_flops()
    assert (
        totals["real"]
        == totals["deterministic"]
        == sum(component_flops(config, batch_size=B, seq_len=N).values())
    )


def test_real_routing_picks_the_top_k_experts() -> None:
    config = _config(ffn={**MOE, "num_experts": 3})
    moe = build_model(config, device="cpu", seed=2).decoder.layers[0].ffn.moe
    logits = torch.tensor([[0.0, 5.0, 1.0], [9.0, -1.0, 3.0]])
    experts, weights = moe._route(logits)
    assert experts.tolist() == [[1, 2], [0, 2]]
    probs = torch.softmax(logits, dim=-1).gather(1, experts)
    torch.testing.assert_close(weights, probs / probs.sum(-1, keepdim=True))


@pytest.mark.parametrize("gated", [True, False])
def test_grouped_experts_equal_per_expert_experts(gated: bool) -> None:
    config = _config(activation="swiglu" if gated else "relu", ffn={**MOE, "expert_bias": True})
    moe = build_model(config, device="cpu", seed=5).decoder.layers[0].ffn.moe
    assert isinstance(moe, MoE)
    x = torch.randn(11, D, generator=torch.Generator().manual_seed(0))
    experts, weights = moe._route(moe.router(x))
    looped = moe.experts(x, experts, weights, grouped=False)
    grouped = moe.experts(x, experts, weights, grouped=True)
    torch.testing.assert_close(looped, grouped, rtol=1e-5, atol=1e-6)
    # by hand for token 0: sum_j w_j expert_{e_j}(x_0)
    expected = sum(weights[0, j] * moe.experts._expert(int(experts[0, j]), x[:1])[0] for j in range(2))
    torch.testing.assert_close(looped[0], expected, rtol=1e-5, atol=1e-6)


# --- attention semantics ----------------------------------------------------------------------------------------


def test_sinks_very_negative_equal_no_sinks() -> None:
    with_sinks, without = _config(attention={"sinks": True}), _config()
    model = build_model(with_sinks, attention="eager", device="cpu", seed=7)
    plain = build_model(without, attention="eager", device="cpu")
    state = {k: v for k, v in model.state_dict().items() if "sinks" not in k}
    plain.load_state_dict(state)
    ids = _tokens(without)
    with torch.no_grad():
        for layer in model.decoder.layers:
            layer.attention.sinks.logits.fill_(-1e9)
        torch.testing.assert_close(model(ids).main, plain(ids).main)
        for layer in model.decoder.layers:
            layer.attention.sinks.logits.fill_(30.0)  # the sink takes nearly all the weight: attention ~ 0
        assert not torch.allclose(model(ids).main, plain(ids).main)


@pytest.mark.parametrize("impl", IMPLS)
def test_chunked_attention_sees_only_its_chunk(impl: str) -> None:
    config = _config(attention={"chunk_size": 4}, num_layers=1)
    model = build_model(config, attention=impl, device="cpu", seed=2)
    ids = _tokens(config, length=12)
    changed = ids.clone()
    changed[:, 1] = (ids[:, 1] + 1) % V
    with torch.no_grad():
        before, after = model(ids).hidden, model(changed).hidden
    assert not torch.allclose(before[:, 1:4], after[:, 1:4])  # same chunk
    torch.testing.assert_close(before[:, 4:], after[:, 4:], rtol=0, atol=1e-6)  # later chunks never see it


@pytest.mark.parametrize("arch", ["encoder", "decoder"])
def test_alibi_changes_attention_and_needs_no_parameters(arch: str) -> None:
    alibi, none = _config(architecture=arch, position="alibi"), _config(architecture=arch, position="none")
    model = build_model(alibi, attention="sdpa", device="cpu", seed=1)
    eager = build_model(alibi, attention="eager", device="cpu")
    plain = build_model(none, attention="sdpa", device="cpu")
    eager.load_state_dict(model.state_dict())
    plain.load_state_dict(model.state_dict())
    ids = _tokens(alibi)
    with torch.no_grad():
        torch.testing.assert_close(model(ids).main, eager(ids).main, rtol=1e-4, atol=1e-5)
        assert not torch.allclose(model(ids).main, plain(ids).main)


def test_partial_rotary_leaves_the_other_channels_alone() -> None:
    from embedcalc.modeling.positions import apply_rotary, rotary_tables

    x = torch.randn(1, 2, 5, 8)
    cos, sin = rotary_tables(5, 4)
    out = apply_rotary(x, cos, sin)
    torch.testing.assert_close(out[..., 4:], x[..., 4:])
    torch.testing.assert_close(out[..., :4], apply_rotary(x[..., :4], cos, sin))


# --- random configs mixing the new kinds, against embedcalc.analysis ------------------------------------------


@st.composite
def mixed_configs(draw: st.DrawFn) -> ModelConfig:
    """A tiny decoder or encoder whose layers mix standard/MLA attention, q/k norms, sinks, windows, chunks,
    dense/MoE FFNs, with any norm placement, sharing, factorised embeddings and head bias."""
    arch = draw(st.sampled_from(["decoder", "encoder"]))
    heads = draw(st.sampled_from([1, 2, 4]))
    kv = draw(st.sampled_from([h for h in (1, 2, 4) if heads % h == 0]))
    head_dim = 2 * draw(st.integers(1, 3))
    gated = draw(st.booleans())
    placement = draw(st.sampled_from(["pre", "post", "sandwich", "parallel"]))
    data: dict[str, Any] = {
        "architecture": arch, "vocab_size": draw(st.integers(5, 20)), "max_seq_len": 8,
        "embed_dim": heads * head_dim, "num_heads": heads, "num_kv_heads": kv,
        "ffn_dim": draw(st.integers(1, 12)), "position": draw(st.sampled_from(["rope", "alibi", "learned", "none"])),
        "activation": "swiglu" if gated else draw(st.sampled_from(["gelu", "relu"])),
        "norm": draw(st.sampled_from(["layernorm", "rmsnorm"])), "norm_bias": draw(st.booleans()),
        "norm_affine": draw(st.booleans()), "norm_placement": placement, "bias": draw(st.booleans()),
        "tie_embeddings": draw(st.booleans()), "scale_embeddings": draw(st.booleans()),
        "lm_head": True,
    }  # fmt: skip
    if placement == "parallel":
        data["parallel_norms"] = draw(st.sampled_from([1, 2]))
    if data["position"] == "rope" and draw(st.booleans()):
        data["rotary_dim"] = 2
    data["lm_head_bias"] = draw(st.booleans())
    if draw(st.booleans()):
        data.update(token_embed_dim=draw(st.integers(2, 6)), factorized_embeddings=draw(st.booleans()),
                    embedding_projection_bias=draw(st.booleans()))  # fmt: skip
    causal = arch == "decoder"
    attention: dict[str, Any] = {}
    if draw(st.booleans()):
        attention = {"kind": "mla", "kv_lora_rank": draw(st.integers(1, 4)),
                     "qk_nope_head_dim": draw(st.integers(1, 3)), "qk_rope_head_dim": 2,
                     "v_head_dim": draw(st.integers(1, 3))}  # fmt: skip
        if draw(st.booleans()):
            attention["q_lora_rank"] = draw(st.integers(1, 4))
    else:
        attention["qk_norm"] = draw(st.sampled_from(["none", "head", "full"]))
    attention["sinks"] = draw(st.booleans())
    data["attention"] = attention
    local: dict[str, Any] = {}
    if causal:
        local = {draw(st.sampled_from(["sliding_window", "chunk_size"])): draw(st.integers(1, 4))}
    moe = {"kind": "moe", "num_experts": draw(st.integers(1, 4)), "expert_dim": draw(st.integers(1, 6)),
           "num_shared_experts": draw(st.integers(0, 2)), "router_bias": draw(st.booleans()),
           "expert_bias": draw(st.booleans())}  # fmt: skip
    # a gate on no shared experts would gate nothing: the torch model builds none (the schema should refuse it)
    moe["shared_expert_gate"] = bool(moe["num_shared_experts"]) and draw(st.booleans())
    moe["top_k"] = draw(st.integers(1, moe["num_experts"]))
    data["blocks"] = {"local": {"attention": local}, "moe": {"ffn": moe}}
    if draw(st.booleans()):  # one block's weights shared across depth
        repeat = draw(st.integers(1, 3))
        block = draw(st.sampled_from(["default", "local", "moe"]))
        data.update(shared_layers=True, num_layers=repeat, layers=[{"pattern": [block], "repeat": repeat}])
    else:
        pattern = draw(st.lists(st.sampled_from(["default", "local", "moe"]), min_size=1, max_size=3))
        repeat = draw(st.integers(1, 2))
        data.update(num_layers=len(pattern) * repeat, layers=[{"pattern": pattern, "repeat": repeat}])
    return ModelConfig.model_validate(data)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=mixed_configs(), batch=st.integers(1, 2), seq_len=st.integers(1, 8))
def test_mixed_configs_match_analysis(config: ModelConfig, batch: int, seq_len: int) -> None:
    analytic_params = count_params(config).as_dict()
    analytic_flops = forward_flops(config, Workload(batch_size=batch, seq_len=seq_len)).breakdown.as_dict()
    for impl in IMPLS:
        model = build_model(config, attention=impl)
        assert component_params(model) == analytic_params, impl
        assert component_flops(config, model, batch_size=batch, seq_len=seq_len) == analytic_flops, impl


# --- parity with transformers' models of the real families ----------------------------------------------------

_HF_COMMON = {"vocab_size": 64, "max_position_embeddings": 64, "bos_token_id": 0, "eos_token_id": 1,
              "pad_token_id": None}  # fmt: skip
_OURS_COMMON: dict[str, Any] = {
    "architecture": "decoder", "vocab_size": 64, "max_seq_len": 64, "embed_dim": 32, "num_heads": 4,
    "num_layers": 2, "position": "rope", "activation": "swiglu", "norm": "rmsnorm", "bias": False,
    "tie_embeddings": False,
}  # fmt: skip
_PARITY: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {
    "mixtral": ("MixtralConfig",
                {"hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
                 "num_key_value_heads": 2, "num_local_experts": 4, "num_experts_per_tok": 2,
                 "tie_word_embeddings": False},
                {"num_kv_heads": 2, "ffn_dim": 48, "ffn": {"kind": "moe", "num_experts": 4, "top_k": 2}}),
    "qwen3": ("Qwen3Config",
              {"hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
               "num_key_value_heads": 2, "head_dim": 16, "tie_word_embeddings": False},
              {"num_kv_heads": 2, "head_dim": 16, "ffn_dim": 48, "attention": {"qk_norm": "head"}}),
    "qwen3_moe": ("Qwen3MoeConfig",
                  {"hidden_size": 32, "intermediate_size": 48, "moe_intermediate_size": 24, "num_hidden_layers": 2,
                   "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "num_experts": 4,
                   "num_experts_per_tok": 2, "decoder_sparse_step": 1, "mlp_only_layers": [0],
                   "tie_word_embeddings": False},
                  {"num_kv_heads": 2, "ffn_dim": 48, "attention": {"qk_norm": "head"},
                   "blocks": {"moe": {"ffn": {"kind": "moe", "num_experts": 4, "top_k": 2, "expert_dim": 24}}},
                   "layers": [{"pattern": ["default", "moe"]}]}),
    "deepseek_v3": ("DeepseekV3Config",
                    {"hidden_size": 32, "intermediate_size": 48, "moe_intermediate_size": 16, "num_hidden_layers": 3,
                     "first_k_dense_replace": 1, "n_routed_experts": 4, "num_experts_per_tok": 2,
                     "n_shared_experts": 1, "num_attention_heads": 4, "num_key_value_heads": 4, "q_lora_rank": 16,
                     "kv_lora_rank": 8, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 8, "n_group": 1,
                     "topk_group": 1, "tie_word_embeddings": False},
                    {"num_layers": 3, "ffn_dim": 48,
                     "attention": {"kind": "mla", "q_lora_rank": 16, "kv_lora_rank": 8, "qk_nope_head_dim": 8,
                                   "qk_rope_head_dim": 4, "v_head_dim": 8},
                     "blocks": {"moe": {"ffn": {"kind": "moe", "num_experts": 4, "top_k": 2, "expert_dim": 16,
                                                "num_shared_experts": 1}}},
                     "layers": [{"pattern": ["default"]}, {"pattern": ["moe"], "repeat": 2}]}),
    "gemma2": ("Gemma2Config",
               {"hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
                "num_key_value_heads": 2, "head_dim": 8, "sliding_window": 4},
               {"num_kv_heads": 2, "ffn_dim": 48, "activation": "geglu", "tie_embeddings": True,
                "norm_placement": "sandwich", "scale_embeddings": True,
                "blocks": {"local": {"attention": {"sliding_window": 4}}},
                "layers": [{"pattern": ["local", "default"]}]}),
    "gpt_oss": ("GptOssConfig",
                {"hidden_size": 32, "intermediate_size": 16, "num_hidden_layers": 2, "num_attention_heads": 4,
                 "num_key_value_heads": 2, "head_dim": 8, "num_local_experts": 4, "num_experts_per_tok": 2,
                 "sliding_window": 4, "layer_types": ["sliding_attention", "full_attention"],
                 "tie_word_embeddings": False},
                {"num_kv_heads": 2, "qkv_bias": True, "out_bias": True, "attention": {"sinks": True},
                 "ffn": {"kind": "moe", "num_experts": 4, "top_k": 2, "expert_dim": 16, "router_bias": True,
                         "expert_bias": True},
                 "blocks": {"local": {"attention": {"sliding_window": 4}}},
                 "layers": [{"pattern": ["local", "default"]}]}),
    "albert": ("AlbertConfig",
               {"embedding_size": 8, "hidden_size": 32, "num_hidden_layers": 3, "num_attention_heads": 4,
                "intermediate_size": 48, "type_vocab_size": 2},
               {"architecture": "encoder", "num_layers": 3, "position": "learned", "activation": "gelu_tanh",
                "norm": "layernorm", "bias": True, "ffn_dim": 48, "type_vocab_size": 2, "token_embed_dim": 8,
                "factorized_embeddings": True, "embedding_projection_bias": True, "shared_layers": True,
                "tie_embeddings": True}),
    "phi": ("PhiConfig",
            {"hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
             "partial_rotary_factor": 0.5, "tie_word_embeddings": False},
            {"activation": "gelu_tanh", "norm": "layernorm", "bias": True, "ffn_dim": 48,
             "norm_placement": "parallel", "rotary_dim": 4, "lm_head_bias": True}),
    "gptj": ("GPTJConfig",
             {"n_embd": 32, "n_layer": 2, "n_head": 4, "rotary_dim": 4, "n_positions": 64,
              "tie_word_embeddings": False},
             {"activation": "gelu_tanh", "norm": "layernorm", "qkv_bias": False, "out_bias": False, "ffn_bias": True,
              "norm_placement": "parallel", "rotary_dim": 4, "lm_head_bias": True}),
    "olmo": ("OlmoConfig",
             {"hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
              "tie_word_embeddings": False},
             {"ffn_dim": 48, "norm": "layernorm", "norm_affine": False}),
}  # fmt: skip


@pytest.mark.parametrize("family", list(_PARITY))
def test_params_equal_transformers(family: str) -> None:
    transformers = pytest.importorskip("transformers")
    class_name, hf_fields, ours = _PARITY[family]
    hf_config = getattr(transformers, class_name)(**{**_HF_COMMON, **hf_fields})
    auto = transformers.AutoModel if family == "albert" else transformers.AutoModelForCausalLM
    with torch.device("meta"):
        theirs = auto.from_config(hf_config)
    config = ModelConfig.model_validate({**_OURS_COMMON, **ours})
    model = build_model(config)
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in theirs.parameters())

    # tensor by tensor too; gpt-oss alone stores its experts transposed, (E, d, 2f) and (E, f, d)
    def shapes(m: Any) -> list[tuple[int, ...]]:
        return sorted(
            tuple(sorted(p.shape)) if family == "gpt_oss" else tuple(p.shape) for p in m.parameters()
        )

    assert shapes(model) == shapes(theirs)


def test_bench_miniature_of_every_preset_runs() -> None:
    """bench pages kernels in with a toy twin of the model: it must stay valid for every layer kind."""
    from embedcalc.modeling.benchmark import miniature
    from embedcalc.sources.loading import load_target
    from embedcalc.sources.presets import preset_names

    for name in preset_names():
        config = load_target(name).config
        tiny = miniature(config)
        assert tiny.embed_dim == 64 and tiny.has_moe == config.has_moe, name
        model = build_model(tiny, device="cpu")
        ids = torch.zeros(1, 8, dtype=torch.long)
        with torch.no_grad():
            out = model(ids, ids[:, :4]) if tiny.architecture == "encoder-decoder" else model(ids)
        assert bool(torch.isfinite(out.main).all()), name


def test_xielu_computes_what_transformers_computes() -> None:
    """embedcalc's xIELU equals transformers' XIELUActivation (its Python path) at the same parameters, on both
    branches and at the eps clamp."""
    transformers = pytest.importorskip("transformers")
    from transformers.activations import XIELUActivation

    from embedcalc.modeling.ffn import XIELU

    theirs, ours = XIELUActivation(dtype=torch.float32), XIELU()
    with torch.no_grad():
        for mine, ref, value in ((ours.alpha_p, theirs.alpha_p, 0.3), (ours.alpha_n, theirs.alpha_n, -0.7)):
            mine.fill_(value)
            ref.fill_(value)
    x = torch.cat([torch.linspace(-6, 6, 101), torch.tensor([0.0, -1e-7, 1e-7])])
    torch.testing.assert_close(ours(x), theirs._xielu_python(x))
    assert transformers is not None


def test_block_heads_must_be_a_multiple_of_the_kv_heads() -> None:
    """A block's own num_heads meets the flat num_kv_heads: the message names the block's field and both values."""
    from pydantic import ValidationError

    with pytest.raises(
        ValidationError, match=r"num_kv_heads \(2\) must divide blocks.wide.attention.num_heads \(5\)"
    ):
        _config(blocks={"wide": {"attention": {"num_heads": 5}}}, layers=[{"pattern": ["default", "wide"]}])
