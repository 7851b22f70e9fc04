"""Attention and a recurrent mixer in parallel in one block (Falcon-H1; DESIGN.md §16, issue 23): the layer model's
``mixer.parallel_attention``.

A tiny decoder whose default block runs GQA attention and Mamba-2 side by side on one normalised input (Falcon-H1's
layer: one input norm, the two outputs added into the residual, then the FFN's own pre-norm sublayer), with an
attention-only variant: parameters are the attention's plus the mixer's less the mixer's own norm, by hand; each
parallel layer caches K and V (growing with the context) and holds the Mamba-2 state (constant); the torch model
reconciles parameters and FLOPs exactly, generation through the KV cache and the state gives the tokens of full
recomputation, and the cache tensors hold the analytic bytes; a decode step's roofline reads both; bad specs are
refused naming the field.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from embedcalc.analysis.flops import forward_flops
from embedcalc.analysis.memory import estimate_memory
from embedcalc.analysis.params import count_params
from embedcalc.analysis.workload import Workload
from embedcalc.config.schema import ModelConfig

D, V, H, H_KV, HD = 32, 64, 4, 2, 8
N_STATE, HEADS, P, GROUPS, K, Q = 8, 4, 16, 2, 4, 8
INNER, CONV = HEADS * P, HEADS * P + 2 * GROUPS * N_STATE
MAMBA2 = {"kind": "mamba2", "parallel_attention": True, "state_size": N_STATE, "num_heads": HEADS, "head_dim": P,
          "groups": GROUPS, "conv_kernel": K, "chunk_size": Q}  # fmt: skip
PARALLEL: dict[str, Any] = {
    "name": "tiny-falcon-h1", "architecture": "decoder", "vocab_size": V, "max_seq_len": 64, "embed_dim": D,
    "num_heads": H, "num_kv_heads": H_KV, "head_dim": HD, "num_layers": 3, "ffn_dim": 48, "activation": "swiglu",
    "norm": "rmsnorm", "position": "rope", "bias": False, "tie_embeddings": False, "lm_head": True, "dropout": 0.0,
    "mixer": MAMBA2,
    "blocks": {"attn": {"mixer": {"kind": "attention"}}},
    "layers": [{"pattern": ["default", "attn", "default"]}],
}  # fmt: skip
PARALLEL_LAYERS = 2
STATE_VALUES = CONV * K + HEADS * P * N_STATE  # per parallel layer per sequence


def _config(**extra: Any) -> ModelConfig:
    return ModelConfig.model_validate({**PARALLEL, **extra})


def test_a_parallel_block_has_both_mixers_and_one_input_norm() -> None:
    config = _config()
    block = config.stack_plan("decoder").block_at(0)
    assert block.parallel_mixers and block.attention is not None and block.mixer is not None
    assert not config.stack_plan("decoder").block_at(1).parallel_mixers  # the variant is attention only
    p = count_params(config).as_dict()
    assert p["decoder/attention/qkv"] == 3 * D * (H + 2 * H_KV) * HD
    assert p["decoder/attention/norm"] == 3 * D  # every layer's input norm, the parallel ones' shared
    assert "decoder/mixer/norm" not in p
    assert p["decoder/mixer/in"] == PARALLEL_LAYERS * D * (INNER + CONV + HEADS)
    assert p["decoder/mixer/gate_norm"] == PARALLEL_LAYERS * INNER
    assert p["decoder/ffn/norm"] == 3 * D
    assert config.derived()["mixer_layers"] == {"attention": 1, "attention+mamba2": 2}


def test_falcon_h1_switches_the_gated_norm_off_and_biases_out_proj_apart() -> None:
    mixer = MAMBA2 | {"gate_norm": False, "bias": True, "out_bias": False}
    p = count_params(_config(mixer=mixer)).as_dict()
    assert "decoder/mixer/gate_norm" not in p
    assert p["decoder/mixer/in"] == PARALLEL_LAYERS * (D + 1) * (INNER + CONV + HEADS)
    assert p["decoder/mixer/out"] == PARALLEL_LAYERS * INNER * D  # projectors_bias false


def test_every_parallel_layer_caches_k_and_v_and_holds_the_state() -> None:
    config = _config()
    short = estimate_memory(config, Workload(batch_size=3, seq_len=8))
    long = estimate_memory(config, Workload(batch_size=3, seq_len=64))
    assert short.recurrent_state_bytes == long.recurrent_state_bytes == 3 * PARALLEL_LAYERS * STATE_VALUES * 4
    assert long.kv_cache_bytes == 3 * 64 * 3 * 2 * H_KV * HD * 4  # all three layers attend
    assert config.derived()["kv_cache_values_per_token"] == 3 * 2 * H_KV * HD


def test_forward_flops_are_the_sum_of_both_mixers() -> None:
    both = forward_flops(_config(), Workload(batch_size=2, seq_len=13)).breakdown.as_dict()
    attention_only = _config(mixer={"kind": "attention"}, blocks={}, layers=None)
    alone = forward_flops(attention_only, Workload(batch_size=2, seq_len=13)).breakdown.as_dict()
    assert {k: v for k, v in both.items() if "/mixer/" not in k} == alone
    padded = 16
    assert both["decoder/mixer/ssm"] == PARALLEL_LAYERS * 2 * 2 * HEADS * padded * (
        Q * N_STATE + Q * P + 2 * P * N_STATE
    )


@pytest.mark.parametrize(
    ("extra", "code", "field"),
    [
        ({"mixer": {"kind": "attention", "parallel_attention": True}}, "parallel_needs_recurrent",
         "parallel_attention"),
        ({"mixer": {"kind": "short_conv", "inner_dim": D, "gate_norm": False}}, "field_of_other_kind", "gate_norm"),
        ({"norm_placement": "post"}, "parallel_mixers_need_pre", "mixer"),
    ],
)  # fmt: skip
def test_bad_parallel_specs_are_refused_naming_the_field(
    extra: dict[str, Any], code: str, field: str
) -> None:
    with pytest.raises(ValidationError) as info:
        _config(**extra)
    error = info.value.errors()[0]
    assert error["type"] == code
    assert field in str(error["loc"]) + error["msg"]


# --- the torch model ---------------------------------------------------------------------------------------------


@pytest.mark.torch
@pytest.mark.parametrize(("n", "gate_norm"), [(8, True), (13, True), (13, False)])
def test_verify_reconciles_both_mixers_exactly(n: int, gate_norm: bool) -> None:
    """``embedcalc.verify``: every parameter and FLOP row of the analysis equals the torch model's, on and off the
    chunk size, with and without the gated norm."""
    pytest.importorskip("torch")
    import embedcalc

    result = embedcalc.verify(PARALLEL | {"mixer": MAMBA2 | {"gate_norm": gate_norm}}, batch_size=2, seq_len=n,
                              attention="eager")  # fmt: skip
    assert result.agree
    assert result.params.counted_total == count_params(_config(mixer=MAMBA2 | {"gate_norm": gate_norm})).total


@pytest.mark.torch
@pytest.mark.parametrize("gate_norm", [True, False])
def test_generation_through_the_cache_and_the_state_equals_recomputation(gate_norm: bool) -> None:
    torch = pytest.importorskip("torch")
    from embedcalc.modeling import build_model
    from embedcalc.modeling.generate import allocate_cache, greedy_generate, reference_generate

    config = _config(mixer=MAMBA2 | {"gate_norm": gate_norm})
    model = build_model(config, attention="eager", device="cpu")
    prompt = torch.randint(0, V, (2, 11), generator=torch.Generator().manual_seed(0))  # (B, P): 11 = 8 + 3
    cache = allocate_cache(model, 2, 11 + 6)
    run = greedy_generate(model, prompt, 6, cache)
    assert run.tokens.tolist() == reference_generate(model, prompt, 6).tolist()
    memory = estimate_memory(config, Workload(batch_size=2, seq_len=11, gen_tokens=6))
    assert cache.state_nbytes == memory.recurrent_state_bytes
    assert cache.nbytes == memory.kv_cache_bytes


@pytest.mark.torch
def test_bench_generate_measures_the_kv_cache_and_the_state(generate_state: Any) -> None:
    pytest.importorskip("torch")
    m = generate_state(PARALLEL, "tiny-falcon-h1.yaml")
    assert m["recurrent_state_bytes"] == 2 * PARALLEL_LAYERS * STATE_VALUES * 4
    assert m["kv_cache_bytes"] == 2 * (9 + 3) * 3 * 2 * H_KV * HD * 4


def test_a_decode_step_reads_the_kv_cache_and_the_state() -> None:
    """The roofline of one decode step: the attention cores read every layer's K and V at the length reached, the
    scan and the convolution read and write the parallel layers' state (analysis/roofline/traffic.py)."""
    from embedcalc.analysis.roofline.lengths import decode_lengths
    from embedcalc.analysis.roofline.traffic import decode_step_flops, phase_traffic, weights_of

    config, w, kv_len = _config(), Workload(batch_size=2, seq_len=16), 17
    flops = decode_step_flops(config, w, kv_len)
    t = phase_traffic(config, w, flops, decode_lengths(config, w, kv_len), True, 4, weights_of(config, w))
    ssm, conv = t["decoder/mixer/ssm"], t["decoder/mixer/conv"]
    assert ssm.kv_read_bytes == ssm.kv_write_bytes == 2 * PARALLEL_LAYERS * HEADS * P * N_STATE * 4
    assert conv.kv_read_bytes == conv.kv_write_bytes == 2 * PARALLEL_LAYERS * CONV * K * 4
    read = t["decoder/attention/scores"].kv_read_bytes + t["decoder/attention/context"].kv_read_bytes
    assert read == 2 * kv_len * 3 * 2 * H_KV * HD * 4
