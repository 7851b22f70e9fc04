"""Token mixers beyond attention (DESIGN.md §16, issue 23): the layer model's ``mixer`` kinds, analysis and torch.

A tiny hybrid decoder (a Mamba-2 layer with an FFN, an attention layer, an FFN-only layer, a Mamba-2-only layer):
parameters and FLOPs per breakdown key equal the torch model's numel and ``FlopCounterMode`` (meta device), at
lengths on and off the chunk size; the numbers follow analysis/mixers.py by hand; generation through the recurrent
state gives the tokens of full recomputation, and the state tensors hold exactly the analytic bytes; the sweep grid
evaluates the same formulas; bad mixer specs are refused with the field named.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from embedcalc.analysis.flops import forward_flops
from embedcalc.analysis.memory import estimate_memory
from embedcalc.analysis.params import count_params
from embedcalc.analysis.roofline import decode_step_flops
from embedcalc.analysis.workload import Workload
from embedcalc.config.schema import ModelConfig

D, V, LAYERS = 32, 64, 4
N_STATE, HEADS, P, GROUPS, K, Q = 8, 4, 16, 2, 4, 8  # inner = 64, conv_dim = 64 + 2 * 2 * 8 = 96
INNER, CONV = HEADS * P, HEADS * P + 2 * GROUPS * N_STATE
IN_WIDTH = INNER + CONV + HEADS
HYBRID: dict[str, Any] = {
    "name": "tiny-hybrid", "architecture": "decoder", "vocab_size": V, "max_seq_len": 64, "embed_dim": D,
    "num_heads": 4, "num_kv_heads": 2, "num_layers": LAYERS, "ffn_dim": 48, "activation": "swiglu",
    "norm": "rmsnorm", "position": "none", "bias": False, "tie_embeddings": True, "dropout": 0.0,
    "mixer": {"kind": "mamba2", "state_size": N_STATE, "num_heads": HEADS, "head_dim": P, "groups": GROUPS,
              "conv_kernel": K, "chunk_size": Q},
    "blocks": {"attn": {"mixer": {"kind": "attention"}}, "mlp": {"mixer": {"kind": "none"}},
               "ssm_only": {"ffn": {"kind": "none"}}},
    "layers": [{"pattern": ["default", "attn", "mlp", "ssm_only"]}],
}  # fmt: skip
MAMBA_LAYERS = 2
STATE_VALUES = CONV * K + HEADS * P * N_STATE  # per layer per sequence


def _config(**extra: Any) -> ModelConfig:
    return ModelConfig.model_validate({**HYBRID, **extra})


def test_params_follow_the_mamba2_layout_by_hand() -> None:
    p = count_params(_config()).as_dict()
    assert p["decoder/mixer/in"] == MAMBA_LAYERS * D * IN_WIDTH
    assert p["decoder/mixer/conv"] == MAMBA_LAYERS * (CONV * K + CONV)  # weight (C, 1, K) and bias
    assert p["decoder/mixer/ssm"] == MAMBA_LAYERS * 3 * HEADS  # A_log, D, dt_bias
    assert p["decoder/mixer/gate_norm"] == MAMBA_LAYERS * INNER
    assert p["decoder/mixer/out"] == MAMBA_LAYERS * INNER * D
    assert p["decoder/mixer/norm"] == MAMBA_LAYERS * D
    assert p["decoder/ffn/norm"] == 3 * D  # the mixer-only layer has no FFN
    assert p["decoder/attention/norm"] == D  # one attention layer


@pytest.mark.parametrize("n", [1, 8, 13])
def test_scan_flops_pad_to_whole_chunks(n: int) -> None:
    flops = forward_flops(_config(), Workload(batch_size=2, seq_len=n)).breakdown.as_dict()
    padded = -(-n // Q) * Q
    assert flops["decoder/mixer/ssm"] == MAMBA_LAYERS * 2 * 2 * HEADS * padded * (
        Q * N_STATE + Q * P + 2 * P * N_STATE
    )
    assert flops["decoder/mixer/conv"] == MAMBA_LAYERS * 2 * (2 * n) * CONV * K
    assert flops["decoder/mixer/in"] == MAMBA_LAYERS * 2 * (2 * n) * D * IN_WIDTH


def test_state_is_constant_in_length_and_beside_the_kv_cache() -> None:
    config = _config()
    short = estimate_memory(config, Workload(batch_size=3, seq_len=8))
    long = estimate_memory(config, Workload(batch_size=3, seq_len=64))
    assert short.recurrent_state_bytes == long.recurrent_state_bytes == 3 * MAMBA_LAYERS * STATE_VALUES * 4
    assert long.kv_cache_bytes == 8 * short.kv_cache_bytes  # one attention layer: grows with the context
    assert short.as_dict()["recurrent_state_bytes"] == short.recurrent_state_bytes
    assert short.total_bytes == sum(v for k, v in short.as_dict().items() if k != "total_bytes")
    assert config.derived()["recurrent_state_values"] == MAMBA_LAYERS * STATE_VALUES
    assert config.derived()["mixer_layers"] == {"attention": 1, "mamba2": 2, "none": 1}


def test_models_without_a_state_keep_their_memory_keys() -> None:
    dense = ModelConfig.model_validate(
        {k: v for k, v in HYBRID.items() if k not in ("mixer", "blocks", "layers")}
    )
    assert "recurrent_state_bytes" not in estimate_memory(dense, Workload()).as_dict()


def test_decode_step_runs_the_recurrence() -> None:
    """A decode step costs one token of the recurrence whatever the context: the state read out by C."""
    config = _config()
    step = decode_step_flops(config, Workload(batch_size=2, seq_len=30), 31)
    assert step["decoder/mixer/ssm"] == MAMBA_LAYERS * 2 * 2 * HEADS * P * N_STATE
    assert step["decoder/mixer/conv"] == MAMBA_LAYERS * 2 * 2 * CONV * K
    assert step == decode_step_flops(config, Workload(batch_size=2, seq_len=30), 41) | {
        k: v for k, v in step.items() if "/attention/" in k
    }


@pytest.mark.parametrize(
    ("extra", "code"),
    [
        ({"mixer": {"kind": "mamba2", "state_size": 8, "num_heads": 4}}, "mixer_incomplete"),
        (
            {"mixer": {"kind": "mamba2", "state_size": 8, "num_heads": 6, "head_dim": 8, "groups": 4}},
            "mixer_groups",
        ),
        ({"architecture": "encoder", "pooler": False, "blocks": {}, "layers": None}, "mixer_needs_decoder"),
    ],
)
def test_bad_mixers_are_refused_naming_the_field(extra: dict[str, Any], code: str) -> None:
    with pytest.raises(ValidationError) as info:
        _config(**extra)
    error = info.value.errors()[0]
    assert error["type"] == code
    assert "mixer" in str(error["loc"]) or code != "mixer_incomplete"


def test_sweep_grid_evaluates_the_same_formulas() -> None:
    from embedcalc.analysis.grid import evaluate_grid

    config = _config()
    lengths = (5, 8, 40)
    grid = evaluate_grid(config, Workload(batch_size=3), {"seq_len": lengths})
    for i, n in enumerate(lengths):
        w = Workload(batch_size=3, seq_len=n)
        assert grid.columns["flops_forward"][i] == forward_flops(config, w).forward
        assert grid.columns["recurrent_state_bytes"][i] == estimate_memory(config, w).recurrent_state_bytes
        assert grid.columns["inference_total_bytes"][i] == estimate_memory(config, w).total_bytes


# --- the torch model ---------------------------------------------------------------------------------------------


@pytest.mark.torch
@pytest.mark.parametrize("n", [8, 13])
def test_torch_model_reconciles_exactly(n: int) -> None:
    pytest.importorskip("torch")
    from embedcalc.modeling import build_model, component_flops, component_params

    config = _config()
    model = build_model(config)
    assert component_params(model) == {k: v for k, v in count_params(config).as_dict().items() if v}
    breakdown = forward_flops(config, Workload(batch_size=2, seq_len=n)).breakdown.as_dict()
    analytic = {k: v for k, v in breakdown.items() if v}
    assert component_flops(config, model, batch_size=2, seq_len=n) == analytic


@pytest.mark.torch
def test_generation_through_the_state_equals_recomputation() -> None:
    torch = pytest.importorskip("torch")
    from embedcalc.modeling import build_model
    from embedcalc.modeling.generate import allocate_cache, greedy_generate, reference_generate

    config = _config()
    model = build_model(config, attention="eager", device="cpu")
    prompt = torch.randint(0, V, (2, 11), generator=torch.Generator().manual_seed(0))  # (B, P): 11 = 8 + 3
    cache = allocate_cache(model, 2, 11 + 6)
    run = greedy_generate(model, prompt, 6, cache)
    assert run.tokens.tolist() == reference_generate(model, prompt, 6).tolist()
    assert (
        cache.state_nbytes
        == estimate_memory(config, Workload(batch_size=2, seq_len=11)).recurrent_state_bytes
    )
    assert (
        cache.nbytes
        == estimate_memory(config, Workload(batch_size=2, seq_len=11, gen_tokens=6)).kv_cache_bytes
    )


# --- gated DeltaNet with gated attention (Qwen3-Next's layers) -------------------------------------------------------

HK, DK, HV, DV, C = 2, 8, 4, 16, 8
KEY, VALUE = HK * DK, HV * DV
NEXT: dict[str, Any] = {
    **{k: v for k, v in HYBRID.items() if k not in ("mixer", "blocks", "layers")},
    "position": "rope", "head_dim": 8, "attention": {"qk_norm": "head", "output_gate": True},
    "mixer": {"kind": "gated_deltanet", "num_heads": HV, "head_dim": DV, "num_k_heads": HK, "head_k_dim": DK,
              "chunk_size": C},
    "blocks": {"full": {"mixer": {"kind": "attention"}}},
    "layers": [{"pattern": ["default", "default", "default", "full"]}],
}  # fmt: skip
DELTANET_LAYERS = 3


def test_deltanet_terms_by_hand() -> None:
    config = ModelConfig.model_validate(NEXT)
    p = count_params(config).as_dict()
    conv = 2 * KEY + VALUE
    assert p["decoder/mixer/in"] == DELTANET_LAYERS * D * (conv + VALUE + 2 * HV)
    assert p["decoder/mixer/conv"] == DELTANET_LAYERS * conv * 4  # no bias
    assert p["decoder/mixer/ssm"] == DELTANET_LAYERS * 2 * HV  # A_log, dt_bias
    assert p["decoder/mixer/gate_norm"] == DELTANET_LAYERS * DV  # one head-wide weight
    assert p["decoder/attention/gate"] == D * 4 * 8  # the output gate of the attention layer
    n = 13
    flops = forward_flops(config, Workload(batch_size=2, seq_len=n)).breakdown.as_dict()
    padded = 16
    assert flops["decoder/mixer/ssm"] == DELTANET_LAYERS * 2 * 2 * HV * padded * (
        2 * C * DK + C * DV + 3 * DK * DV
    )
    assert estimate_memory(config, Workload(batch_size=2, seq_len=n)).recurrent_state_bytes == (
        2 * DELTANET_LAYERS * (conv * 4 + HV * DK * DV) * 4
    )
    step = decode_step_flops(config, Workload(batch_size=2, seq_len=30), 31)
    assert step["decoder/mixer/ssm"] == DELTANET_LAYERS * 2 * 2 * HV * DV * 2 * DK


@pytest.mark.torch
@pytest.mark.parametrize(
    ("kind", "n"), [("deltanet", 8), ("deltanet", 13), ("short_conv", 1), ("short_conv", 6)]
)
def test_torch_model_reconciles_and_generates(kind: str, n: int) -> None:
    """Gated DeltaNet (Qwen3-Next's layers) and the short convolution (LFM2's, defined below)."""
    torch = pytest.importorskip("torch")
    from embedcalc.modeling import build_model, component_flops, component_params
    from embedcalc.modeling.generate import allocate_cache, greedy_generate, reference_generate

    config = ModelConfig.model_validate(NEXT if kind == "deltanet" else LFM2)
    assert component_params(build_model(config)) == {
        k: v for k, v in count_params(config).as_dict().items() if v
    }
    breakdown = forward_flops(config, Workload(batch_size=2, seq_len=n)).breakdown.as_dict()
    assert component_flops(config, batch_size=2, seq_len=n) == {k: v for k, v in breakdown.items() if v}
    model = build_model(config, attention="eager", device="cpu")
    prompt = torch.randint(0, V, (2, n), generator=torch.Generator().manual_seed(1))
    cache = allocate_cache(model, 2, n + 5)
    assert (
        greedy_generate(model, prompt, 5, cache).tokens.tolist()
        == reference_generate(model, prompt, 5).tolist()
    )
    assert (
        cache.state_nbytes == estimate_memory(config, Workload(batch_size=2, seq_len=n)).recurrent_state_bytes
    )


@pytest.mark.torch
@pytest.mark.parametrize("layers", [HYBRID, NEXT], ids=["mamba2-hybrid", "deltanet-hybrid"])
def test_bench_generate_measures_the_analytic_state(generate_state: Any, layers: dict[str, Any]) -> None:
    """``bench --mode generate`` decodes through real recurrent states whose bytes equal the analytic state."""
    pytest.importorskip("torch")
    assert generate_state(layers, "hybrid.json")["recurrent_state_bytes"] > 0


# --- Mamba-1 (Jamba's layers) ----------------------------------------------------------------------------------------

JAMBA: dict[str, Any] = {
    **{k: v for k, v in HYBRID.items() if k not in ("mixer", "blocks", "layers", "tie_embeddings")},
    "tie_embeddings": False,
    "mixer": {"kind": "mamba", "state_size": 8, "inner_dim": 2 * D, "dt_rank": 4, "conv_kernel": 4, "bc_norms": True},
    "blocks": {"attn": {"mixer": {"kind": "attention"}},
               "moe": {"ffn": {"kind": "moe", "num_experts": 4, "top_k": 2, "expert_dim": 48}}},
    "layers": [{"pattern": ["default", "moe", "attn", "moe"]}],
}  # fmt: skip


@pytest.mark.torch
def test_mamba1_counts_what_transformers_jamba_builds() -> None:
    """JambaForCausalLM on the meta device (attention at layer 2 of 4, experts on odd layers): the same numel."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    hf = transformers.JambaConfig(
        vocab_size=V, hidden_size=D, intermediate_size=48, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, num_experts=4, num_experts_per_tok=2, expert_layer_period=2, expert_layer_offset=1,
        attn_layer_period=4, attn_layer_offset=2, mamba_d_state=8, mamba_d_conv=4, mamba_expand=2, mamba_dt_rank=4,
        tie_word_embeddings=False, use_mamba_kernels=False, pad_token_id=0,
    )  # fmt: skip
    with torch.device("meta"):
        model = transformers.JambaForCausalLM(hf)
    assert sum(p.numel() for p in model.parameters()) == count_params(ModelConfig.model_validate(JAMBA)).total


@pytest.mark.torch
def test_mamba1_torch_model_reconciles_and_generates() -> None:
    torch = pytest.importorskip("torch")
    from embedcalc.modeling import build_model, component_flops, component_params
    from embedcalc.modeling.generate import allocate_cache, greedy_generate, reference_generate

    config = ModelConfig.model_validate(JAMBA)
    assert component_params(build_model(config)) == {
        k: v for k, v in count_params(config).as_dict().items() if v
    }
    breakdown = forward_flops(config, Workload(batch_size=2, seq_len=7)).breakdown.as_dict()
    assert breakdown["decoder/mixer/ssm"] == 3 * 2 * (2 * 7) * 2 * D * 8  # 3 Mamba layers x 2 x t x I x N
    assert component_flops(config, batch_size=2, seq_len=7) == {k: v for k, v in breakdown.items() if v}
    model = build_model(config, attention="eager", device="cpu")
    prompt = torch.randint(0, V, (2, 7), generator=torch.Generator().manual_seed(2))
    cache = allocate_cache(model, 2, 7 + 4)
    assert (
        greedy_generate(model, prompt, 4, cache).tokens.tolist()
        == reference_generate(model, prompt, 4).tolist()
    )
    state = estimate_memory(config, Workload(batch_size=2, seq_len=7)).recurrent_state_bytes
    # b x layers x (I K + I N) x fp32
    assert cache.state_nbytes == state == 2 * 3 * (2 * D * 4 + 2 * D * 8) * 4


# --- the short convolution (LFM2's conv layers) ----------------------------------------------------------------------

LFM2: dict[str, Any] = {
    **{k: v for k, v in HYBRID.items() if k not in ("mixer", "blocks", "layers")},
    "position": "rope", "attention": {"qk_norm": "head"},
    "mixer": {"kind": "short_conv", "inner_dim": D, "conv_kernel": 3, "conv_bias": False},
    "blocks": {"attn": {"mixer": {"kind": "attention"}}},
    "layers": [{"pattern": ["default", "default", "attn"], "repeat": 1}, {"pattern": ["default"]}],
}  # fmt: skip


def test_short_conv_follows_lfm2_by_hand() -> None:
    """in_proj d -> 3 d, a 3-tap depthwise conv over d channels, out_proj d -> d, no biases; no scan; a state of
    d x 3 per layer (transformers' conv cache), the same FLOPs per token in a prompt and a decode step."""
    config = ModelConfig.model_validate(LFM2)
    p = count_params(config).as_dict()
    assert (p["decoder/mixer/in"], p["decoder/mixer/conv"], p["decoder/mixer/out"]) == (3 * 3 * D * D, 3 * D * 3,
                                                                                         3 * D * D)  # fmt: skip
    assert "decoder/mixer/ssm" not in p
    flops = forward_flops(config, Workload(batch_size=2, seq_len=5)).breakdown.as_dict()
    assert flops["decoder/mixer/conv"] == 3 * 2 * (2 * 5) * D * 3
    assert "decoder/mixer/ssm" not in flops
    memory = estimate_memory(config, Workload(batch_size=2, seq_len=5))
    assert memory.recurrent_state_bytes == 2 * 3 * D * 3 * 4  # b x layers x (d x K) x fp32
    step = decode_step_flops(config, Workload(batch_size=2, seq_len=5), 6)
    assert step["decoder/mixer/in"] == 3 * 2 * 2 * D * 3 * D


@pytest.mark.torch
def test_bench_generate_measures_the_short_conv_state(generate_state: Any) -> None:
    pytest.importorskip("torch")
    assert generate_state(LFM2, "lfm2.json")["recurrent_state_bytes"] == 2 * 3 * D * 3 * 4
