"""Kimi Linear (issue 31): Kimi Delta Attention (the mixer kind ``kda``) beside MLA without RoPE, and DeepSeek-V3's
MoE, against transformers' KimiLinearForCausalLM.

The files are what KimiLinearConfig writes (``to_dict()``: its alias names ``num_experts``, ``model_max_length``,
...), for its defaults and for small variants (a ``linear_attn_config`` layout as the published checkpoints write
it, a query rank, more dense layers). Exact: parameters on the meta device; forward FLOPs of the small variants on
transformers' CPU path equal ours plus its convolution's padded tail (its intra-chunk scores with per-channel decays
and its triangular loop are element-wise, counted by neither); the recurrent state and the MLA cache after a bf16
prefill and decode step; embedcalc's own KDA module computes what transformers' chunked and recurrent functions
compute, and ``verify`` agrees with the analytic terms.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hf_reference import (
    bf16_cache_and_estimate,
    forward_flops,
    hf_config,
    hf_model,
    mapped_config,
    numel,
    unaccounted_keys,
)

from embedcalc.analysis.flops import forward_flops as analytic_flops
from embedcalc.analysis.params import active_params, count_params
from embedcalc.analysis.workload import Workload

# 5 layers: KimiLinearConfig's default layout makes layer 4 full attention, the others KDA; num_key_value_heads =
# num_attention_heads, as the published files have them (KimiLinearAttention repeats keys by their ratio)
SMALL = dict(hidden_size=64, num_hidden_layers=5, num_key_value_heads=4, vocab_size=256, intermediate_size=96,
             moe_intermediate_size=16, num_attention_heads=4, kv_lora_rank=16, qk_rope_head_dim=8,
             qk_nope_head_dim=16, v_head_dim=16, linear_head_dim=16, linear_num_heads=4, num_experts=4,
             num_experts_per_token=2, pad_token_id=0, bos_token_id=1, eos_token_id=2)  # fmt: skip
VARIANTS: dict[str, dict[str, Any]] = {
    "small": SMALL,
    # the published files' layout keys (1-indexed), a query latent, two dense layers, two shared experts
    "published-layout": SMALL | dict(linear_attn_config={"kda_layers": [1, 3, 4, 5], "full_attn_layers": [2],
                                                         "head_dim": 8, "num_heads": 8, "short_conv_kernel_size": 3},
                                     q_lora_rank=24, first_k_dense_replace=2, num_shared_experts=2),
}  # fmt: skip


def _written(transformers: Any, **keys: Any) -> dict[str, Any]:
    raw: dict[str, Any] = transformers.KimiLinearConfig(**keys).to_dict()
    return raw


@pytest.mark.torch
@pytest.mark.parametrize("name", ["defaults", *VARIANTS])
def test_params_equal_transformers(transformers: Any, name: str) -> None:
    raw = _written(transformers, **VARIANTS.get(name, {}))
    config = mapped_config(raw)
    assert count_params(config).total == numel(hf_model(transformers, raw))
    assert unaccounted_keys(raw) == set()


def test_the_published_layout_is_read_one_indexed() -> None:
    raw = {"model_type": "kimi_linear", **VARIANTS["published-layout"]}
    plan = mapped_config(raw).stack_plan("decoder")
    kinds = [plan.block_at(i).mixer_kind for i in range(5)]
    assert kinds == ["kda", "attention", "kda", "kda", "kda"]
    (mixer,) = {plan.block_at(i).mixer for i in (0, 2, 3, 4)}
    assert mixer is not None and (mixer.num_heads, mixer.head_dim, mixer.conv_kernel) == (8, 8, 3)
    assert [plan.block_at(i).ffn.moe for i in range(5)] == [False, False, True, True, True]  # type: ignore[union-attr]


def test_active_params_skip_the_unused_experts() -> None:
    """Each routed expert is gate and up (2 x 16 x 64) and down (64 x 16): a token skips 4 - 2 of them in each of
    the 4 MoE layers (first_k_dense_replace 1)."""
    config = mapped_config({"model_type": "kimi_linear", **SMALL})
    assert active_params(config) == count_params(config).total - 4 * (4 - 2) * 3 * 16 * 64


@pytest.mark.torch
@pytest.mark.parametrize("name", list(VARIANTS))
@pytest.mark.parametrize("seq_len", [16, 70])
def test_forward_flops_equal_transformers_plus_the_conv_tail(
    transformers: Any, name: str, seq_len: int
) -> None:
    raw = _written(transformers, **VARIANTS[name])
    model = transformers.AutoModelForCausalLM.from_config(
        hf_config(transformers, raw), attn_implementation="eager", experts_implementation="eager"
    ).eval()
    config = mapped_config(raw)
    ours = analytic_flops(config, Workload(batch_size=2, seq_len=seq_len)).forward
    mixers = [b.mixer for b, n in config.stack_plan("decoder").counts() for _ in range(n) if b.mixer]
    tail = sum(2 * 2 * m.conv_dim * m.conv_kernel * (m.conv_kernel - 1) for m in mixers)
    assert forward_flops(model, batch=2, seq_len=seq_len) == ours + tail


@pytest.mark.torch
def test_state_and_latent_cache_are_what_transformers_cache_holds_at_bf16(transformers: Any) -> None:
    """A bf16 prefill of 6 tokens and a decode step: the 4 KDA layers' conv windows (bf16) and float32 states."""
    import torch

    _, recurrent, dtypes, memory = bf16_cache_and_estimate(transformers, _written(transformers, **SMALL))
    assert recurrent == memory.recurrent_state_bytes and dtypes == {torch.float32}
    assert recurrent == 4 * 2 * (3 * 64 * 4 * 2 + 4 * 16 * 16 * 4)


@pytest.mark.torch
@pytest.mark.parametrize("length", [1, 9, 70])
def test_the_kda_module_computes_what_transformers_computes(transformers: Any, length: int) -> None:
    """embedcalc's KimiDeltaRule (chunked for a prompt, the recurrence for one token) against transformers'
    chunk_kimi_delta_attention / recurrent_kimi_delta_attention on the same inputs and starting state."""
    import torch

    from embedcalc.config.mixer_plan import Mixer
    from embedcalc.modeling.kda import KimiDeltaRule
    from embedcalc.modeling.ssm import MixerState

    kl = pytest.importorskip("transformers.models.kimi_linear.modeling_kimi_linear")
    torch.manual_seed(0)
    b, h, w = 2, 3, 8
    m = Mixer(kind="kda", state_size=0, num_heads=h, head_dim=w, groups=1, conv_kernel=4, chunk_size=64,
              conv_bias=False, bias=False, norm_before_gate=True)  # fmt: skip
    rule = KimiDeltaRule(m).double()
    with torch.no_grad():
        rule.A_log.normal_(0, 0.5)
        rule.dt_bias.normal_(0, 0.5)
    q, k, v = (torch.randn(b, length, h, w, dtype=torch.float64) for _ in range(3))
    bias, f = (
        torch.randn(b, length, h, dtype=torch.float64),
        torch.randn(b, length, h * w, dtype=torch.float64),
    )
    start = torch.randn(b, h, w, w, dtype=torch.float64)
    state = MixerState(torch.zeros(b, 3 * h * w, 4, dtype=torch.float64), start.clone())
    with torch.no_grad():
        ours = rule(q, k, v, bias, f, state)
        # the per-channel log decay as KimiLinearForgetGate computes it, from the same parameters
        g = -torch.exp(rule.A_log)[:, None] * torch.nn.functional.softplus(
            (f + rule.dt_bias).view(b, length, h, w)
        )
        function = kl.recurrent_kimi_delta_attention if length == 1 else kl.chunk_kimi_delta_attention
        theirs, final = function(q, k, v, g=g, beta=torch.sigmoid(bias), initial_state=start.clone(),
                                 output_final_state=True, use_qk_l2norm_in_kernel=True)  # fmt: skip
    # transformers runs the rule in float32, embedcalc's module here in float64
    torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(state.ssm, final.to(state.ssm.dtype), rtol=1e-4, atol=1e-5)


@pytest.mark.torch
def test_verify_agrees_on_a_kimi_linear_file(cli: Any, write_config: Any) -> None:
    path = write_config({"model_type": "kimi_linear", **VARIANTS["published-layout"]}, "config.json")
    result = cli("verify", str(path), "--seq-len", "70", "--format", "json")
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)["results"][0]
    assert out["agree"] is True and "decoder/mixer/gate" in json.dumps(out)


@pytest.mark.slow
@pytest.mark.torch
def test_generation_decodes_with_the_analytic_state(cli: Any, write_config: Any) -> None:
    """``bench --mode generate --dtype bf16``: embedcalc's model decodes KDA layers with their recurrence; the state
    tensors hold the analytic bytes (4 KDA layers x 2 sequences x (3 x 64 x 4 x 2 + 4 x 16 x 16 x 4)), the MLA layer's
    cache its latent."""
    path = write_config({"model_type": "kimi_linear", **SMALL, "model_max_length": 4096}, "config.json")
    flags = (
        "--mode generate --device cpu --format json --dtype bf16 --seq-len 70 --gen-tokens 3 --batch-size 2"
    )
    result = cli("bench", str(path), *flags.split(), "--repeat", "1", "--warmup", "0")
    assert result.exit_code == 0, result.stderr
    m = json.loads(result.stdout)["results"][0]["measurement"]
    assert (
        m["recurrent_state_bytes_measured"]
        == m["recurrent_state_bytes"]
        == 4 * 2 * (3 * 64 * 4 * 2 + 4 * 16 * 16 * 4)
    )
    assert m["kv_cache_matches"] is True
