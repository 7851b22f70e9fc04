"""Lightning attention (MiniMax; DESIGN.md §16, issue 23): the ``lightning`` mixer kind by hand, the torch model
against it, its output against transformers' ``MiniMaxLightningAttention`` with copied weights, generation through
its state, and bad specs refused.

A tiny MiniMax-shaped decoder: lightning layers with an MoE FFN and a softmax-attention layer every fourth, heads
H = 4 of width h = 8 (inner I = 32), block B = 8.
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

D, V, H, HD, B = 32, 64, 4, 8, 8
INNER = H * HD
MINI: dict[str, Any] = {
    "name": "tiny-minimax", "architecture": "decoder", "vocab_size": V, "max_seq_len": 64, "embed_dim": D,
    "num_heads": H, "num_kv_heads": 2, "head_dim": HD, "num_layers": 4, "ffn_dim": 48, "activation": "swiglu",
    "norm": "rmsnorm", "position": "rope", "bias": False, "tie_embeddings": False, "dropout": 0.0,
    "ffn": {"kind": "moe", "num_experts": 4, "top_k": 2, "expert_dim": 48},
    "mixer": {"kind": "lightning", "num_heads": H, "head_dim": HD, "chunk_size": B},
    "blocks": {"full": {"mixer": {"kind": "attention"}}},
    "layers": [{"pattern": ["default", "default", "default", "full"]}],
}  # fmt: skip
LIGHTNING_LAYERS = 3


def _config() -> ModelConfig:
    return ModelConfig.model_validate(MINI)


def test_params_follow_minimax_lightning_layer_by_hand() -> None:
    """qkv_proj d -> 3 I and output_gate d -> I (one key), the RMSNorm over I, out_proj; no conv, no scan
    parameters (the decay rates are computed)."""
    p = count_params(_config()).as_dict()
    assert p["decoder/mixer/in"] == LIGHTNING_LAYERS * D * 4 * INNER
    assert p["decoder/mixer/gate_norm"] == LIGHTNING_LAYERS * INNER
    assert p["decoder/mixer/out"] == LIGHTNING_LAYERS * INNER * D
    assert "decoder/mixer/conv" not in p and "decoder/mixer/ssm" not in p


@pytest.mark.parametrize("n", [1, 8, 13, 24])
def test_block_form_flops_by_hand(n: int) -> None:
    """Per head: 4 c² h within each block of c tokens (Q Kᵀ and its product with V), 4 c h² against the state."""
    flops = forward_flops(_config(), Workload(batch_size=2, seq_len=n)).breakdown.as_dict()
    blocks = [B] * (n // B) + ([n % B] if n % B else [])
    per_head = sum(4 * c * c * HD + 4 * c * HD * HD for c in blocks)
    assert flops["decoder/mixer/ssm"] == LIGHTNING_LAYERS * 2 * H * per_head
    assert flops["decoder/mixer/in"] == LIGHTNING_LAYERS * 2 * (2 * n) * D * 4 * INNER
    assert "decoder/mixer/conv" not in flops


def test_state_is_h_by_h_per_head_and_the_decode_step_reads_it() -> None:
    config = _config()
    short = estimate_memory(config, Workload(batch_size=3, seq_len=8))
    long = estimate_memory(config, Workload(batch_size=3, seq_len=64))
    assert short.recurrent_state_bytes == long.recurrent_state_bytes == 3 * LIGHTNING_LAYERS * H * HD * HD * 4
    assert long.kv_cache_bytes == 8 * short.kv_cache_bytes  # the softmax layer's cache grows
    step = decode_step_flops(config, Workload(batch_size=2, seq_len=30), 31)
    # b x layers x 2 x H x (kᵀ v and q S: 2 h² per head)
    assert step["decoder/mixer/ssm"] == 2 * LIGHTNING_LAYERS * 2 * H * 2 * HD * HD


@pytest.mark.parametrize(
    ("mixer", "code"),
    [
        ({"kind": "lightning", "num_heads": 4}, "mixer_incomplete"),
        ({"kind": "lightning", "num_heads": 4, "head_dim": 8, "conv_kernel": 3}, "mixer_field_unused"),
        ({"kind": "lightning", "num_heads": 4, "head_dim": 8, "state_size": 16}, "mixer_field_unused"),
    ],
)
def test_bad_lightning_specs_are_refused(mixer: dict[str, Any], code: str) -> None:
    with pytest.raises(ValidationError) as info:
        ModelConfig.model_validate({**MINI, "mixer": mixer})
    assert info.value.errors()[0]["type"] == code


@pytest.mark.torch
@pytest.mark.parametrize("n", [8, 13])  # a whole block; a whole and a partial one
def test_torch_model_counts_what_the_analysis_counts(n: int) -> None:
    """Meta device: numel and ``FlopCounterMode`` per breakdown key equal the analytic terms."""
    pytest.importorskip("torch")
    from embedcalc.modeling import build_model, component_flops, component_params

    config = _config()
    analytic = forward_flops(config, Workload(batch_size=2, seq_len=n)).breakdown.as_dict()
    assert component_flops(config, batch_size=2, seq_len=n) == {k: v for k, v in analytic.items() if v}
    params = count_params(config).as_dict()
    assert component_params(build_model(config)) == {k: v for k, v in params.items() if v}


@pytest.mark.torch
def test_generation_through_the_state_equals_recomputation() -> None:
    """Prefill in the block form (13 tokens: a block and a part), then 5 recurrent steps: the tokens of full
    recomputation, and state tensors of exactly the analytic bytes (b x layers x H h² x fp32)."""
    torch = pytest.importorskip("torch")
    from embedcalc.modeling import build_model
    from embedcalc.modeling.generate import allocate_cache, greedy_generate, reference_generate

    model = build_model(_config(), attention="eager", device="cpu")
    prompt = torch.randint(0, V, (2, 13), generator=torch.Generator().manual_seed(3))
    cache = allocate_cache(model, 2, 13 + 5)
    tokens = greedy_generate(model, prompt, 5, cache).tokens
    assert tokens.tolist() == reference_generate(model, prompt, 5).tolist()
    analytic = estimate_memory(_config(), Workload(batch_size=2, seq_len=13)).recurrent_state_bytes
    assert cache.state_nbytes == analytic == 2 * LIGHTNING_LAYERS * H * HD * HD * 4


@pytest.mark.torch
@pytest.mark.parametrize("n", [5, 8, 19])
def test_lightning_matches_transformers_layer_with_copied_weights(n: int) -> None:
    """MiniMaxLightningAttention (layer 1 of 4, block 8) and ours on the same input and weights: the block form
    for a prompt, then the recurrent form for one more token from the cached state."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers.models.minimax import modeling_minimax as hf_minimax

    from embedcalc.config.mixer_spec import MixerSpec, resolve_mixer
    from embedcalc.modeling.lightning import LightningMixer
    from embedcalc.modeling.ssm import allocate_state

    hf_config = transformers.MiniMaxConfig(
        hidden_size=D, num_attention_heads=H, head_dim=HD, num_hidden_layers=4, block_size=B, num_key_value_heads=2,
        intermediate_size=48, num_local_experts=4, vocab_size=V,
    )  # fmt: skip
    torch.manual_seed(0)
    theirs = hf_minimax.MiniMaxLightningAttention(hf_config, layer_idx=1).eval()
    with torch.no_grad():
        for module in (theirs.qkv_proj, theirs.output_gate, theirs.out_proj):
            module.weight.normal_(0, 0.2)
        theirs.norm.weight.uniform_(0.5, 1.5)
    mixer = resolve_mixer(MixerSpec(kind="lightning", num_heads=H, head_dim=HD, chunk_size=B))
    assert mixer is not None
    ours = LightningMixer(_config(), mixer, layer=1, layers=4).eval()
    with torch.no_grad():
        ours.in_.weight.copy_(torch.cat((theirs.qkv_proj.weight, theirs.output_gate.weight)))
        ours.out.weight.copy_(theirs.out_proj.weight)
        ours.gate_norm.weight.copy_(theirs.norm.weight)
    x = torch.randn(2, n + 1, D)
    cache = hf_minimax.MiniMaxCache()
    state = allocate_state(mixer, 2, x)
    with torch.no_grad():
        expected, _ = theirs(x[:, :n], None, None, cache=cache)
        got = ours.transform(x[:, :n], state)
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(state.ssm, cache.get_linear_cache(1), rtol=1e-5, atol=1e-5)
        step_expected, _ = theirs(x[:, n:], None, None, cache=cache)
        torch.testing.assert_close(ours.transform(x[:, n:], state), step_expected, rtol=1e-5, atol=1e-5)
    assert state.ssm.shape == cache.get_linear_cache(1).shape == (2, H, HD, HD)
    assert state.ssm.dtype == cache.get_linear_cache(1).dtype


@pytest.mark.torch
@pytest.mark.slow  # ~20 s; the default suite runs bench --mode generate on the minimax hub file (test_mixers_hf)
def test_bench_generate_measures_the_lightning_state(generate_state: Any) -> None:
    pytest.importorskip("torch")
    assert (
        generate_state(MINI, "minimax.json")["recurrent_state_bytes"]
        == 2 * LIGHTNING_LAYERS * H * HD * HD * 4
    )


@pytest.mark.parametrize("n", [1_000_000, 2_000_000])
def test_analyze_minimax_m1_shows_the_softmax_kv_cache_beside_the_lightning_state(cli: Any, n: int) -> None:
    """MiniMax-M1-80k at a million tokens: the 10 softmax layers' KV cache grows with n (2 x 8 KV heads x 128 per
    token and layer, bf16); the 70 lightning layers hold 64 x 128 x 128 each whatever n; both rows in the table."""
    import json

    result = cli("analyze", "minimax-m1-80k", "--seq-len", str(n), "--format", "json")
    assert result.exit_code == 0, result.stderr
    memory = json.loads(result.stdout)["results"][0]["memory"]
    assert memory["kv_cache_bytes"] == n * 10 * 2 * 8 * 128 * 2
    assert memory["recurrent_state_bytes"] == 70 * 64 * 128 * 128 * 2 == 146_800_640
    table = cli("analyze", "minimax-m1-80k", "--seq-len", str(n))
    assert "kv cache" in table.stdout and "recurrent state" in table.stdout and "140.00 MiB" in table.stdout


def test_a_forward_pass_holds_the_scores_of_one_block_at_a_time() -> None:
    """Inference: the block loop keeps one block's two c x c score tensors per head (c = min(n, B)), whatever n;
    training keeps every block's for the backward pass (b L B H)."""
    import numpy as np

    from embedcalc.analysis.mixers import chunk_score_values, mixer_live_bytes, mixer_saved_bytes
    from embedcalc.analysis.structure import Dims

    config = _config()
    m = config.stack_plan("decoder").block_at(0).mixer
    assert m is not None
    for n, c in ((5, 5), (8, 8), (1000, B)):
        x = Dims.of(config, 2, n)
        live = 2 * n * 4 * (4 * INNER + INNER) + 2 * c * c * H * 2 * 4
        assert mixer_live_bytes(m, x, n, 4) == live
        assert (
            mixer_saved_bytes(m, x, n, 4) - 2 * n * 4 * (D + 4 * INNER + 3 * INNER)
            == 2 * (-(-n // B) * B) * B * H * 2 * 4
        )
    lengths = np.array([5, 8, 1000])
    assert chunk_score_values(m, Dims.of(config, 2, 1), lengths, one_block=True).tolist() == [
        2 * c * c * H for c in (5, 8, 8)
    ]


def test_sweep_grid_evaluates_the_block_form_as_the_scalar_path() -> None:
    """The sweep's numpy grid runs the same formula (whole blocks plus the last part's c²) as a single workload."""
    from embedcalc.analysis.grid import evaluate_grid

    config = _config()
    lengths = (5, 8, 13, 40)
    grid = evaluate_grid(config, Workload(batch_size=3), {"seq_len": lengths})
    for i, n in enumerate(lengths):
        w = Workload(batch_size=3, seq_len=n)
        assert grid.columns["flops_forward"][i] == forward_flops(config, w).forward
        assert grid.columns["flops_recurrent_mixers"][i] == sum(
            v for k, v in forward_flops(config, w).breakdown.as_dict().items() if "/mixer/" in k
        )
        assert grid.columns["inference_total_bytes"][i] == estimate_memory(config, w).total_bytes
