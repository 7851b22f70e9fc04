"""Nemotron-3's latent mixture of experts (``moe_latent_size``, issue 31): the routed experts of NemotronHMoE run in a
latent width L between ``fc1_latent_proj`` (d -> L) and ``fc2_latent_proj`` (L -> d), biased by ``mlp_bias``; the
router and the shared MLP stay on d. The layer model's ``ffn.latent_dim``.

Exact against transformers' NemotronHForCausalLM (parameters on the meta device, forward FLOPs of a small eager
variant on its CPU path less the two Mamba-2 terms analysis/mixers.py documents), against embedcalc's own torch
model (``verify``: every component, parameters and FLOPs), and on the active count (the routed experts a token
skips are L x I x 2 each).
"""

from __future__ import annotations

from typing import Any

import pytest
from hf_reference import (
    forward_flops,
    hf_config,
    hf_model,
    mapped_config,
    numel,
    raw_fixture,
    unaccounted_keys,
)

from embedcalc.analysis.flops import forward_flops as analytic_flops
from embedcalc.analysis.params import active_params, count_params
from embedcalc.analysis.workload import Workload
from embedcalc.errors import ConfigError
from embedcalc.sources.hf import map_hf_config

# one block of each kind (Mamba-2, MLP, attention, MoE), 4 non-gated experts of 16 in a latent width of 24, top 2
SMALL = dict(
    hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16, attention_head_dim=16,
    intermediate_size=48, mamba_num_heads=4, mamba_head_dim=16, ssm_state_size=8, n_groups=2, chunk_size=8,
    vocab_size=256, hybrid_override_pattern="M-M*E-", num_hidden_layers=6, n_routed_experts=4,
    num_experts_per_tok=2, moe_intermediate_size=16, moe_shared_expert_intermediate_size=24, moe_latent_size=24,
)  # fmt: skip


def _raw(**changes: Any) -> dict[str, Any]:
    return raw_fixture("nemotron-h-8b-base-8k") | SMALL | changes


def test_the_latent_width_is_mapped_onto_the_moe_layers() -> None:
    config = mapped_config(_raw())
    (moe,) = {b.ffn for b in config.named_blocks.values() if b.ffn is not None and b.ffn.moe}
    assert moe.latent_dim == 24
    assert unaccounted_keys(_raw()) == set()
    # fc1_latent_proj (24 x 64) and fc2_latent_proj (64 x 24), no biases (mlp_bias false)
    assert count_params(config)["decoder/moe/latent"] == 2 * 24 * 64


@pytest.mark.parametrize("bias", [False, True])
def test_active_params_skip_the_unused_latent_experts(bias: bool) -> None:
    """Each routed expert is up (I x L) and down (L x I), no gate: a token skips (E - k) of them in the one MoE
    layer; the latent projections (2 L d, plus L + d biases) are active."""
    config = mapped_config(_raw(mlp_bias=bias))
    assert active_params(config) == count_params(config).total - (4 - 2) * 2 * 16 * 24


@pytest.mark.torch
@pytest.mark.parametrize("changes", [{}, {"mlp_bias": True}, {"moe_latent_size": 40, "n_routed_experts": 8}])
def test_transformers_builds_the_count(transformers: Any, changes: dict[str, Any]) -> None:
    raw = _raw(**changes)
    assert count_params(mapped_config(raw)).total == numel(hf_model(transformers, raw))


@pytest.mark.torch
def test_the_class_default_with_a_latent_width_counts_what_transformers_builds(transformers: Any) -> None:
    """NemotronHConfig's defaults (hidden 4096, 8 experts of 7688) with moe_latent_size 1024 and an E layer."""
    raw = transformers.NemotronHConfig(
        moe_latent_size=1024, layers_block_type=["mamba", "moe", "attention", "moe"]
    )
    written = raw.to_dict()
    assert count_params(mapped_config(written)).total == numel(hf_model(transformers, written))


@pytest.mark.torch
@pytest.mark.parametrize("seq_len", [16, 21])
def test_forward_flops_equal_transformers_torch_path(transformers: Any, seq_len: int) -> None:
    import torch

    raw = _raw(mlp_bias=True)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(
        hf_config(transformers, raw), attn_implementation="eager", experts_implementation="eager"
    ).eval()
    b, config = 2, mapped_config(raw)
    ours = analytic_flops(config, Workload(batch_size=b, seq_len=seq_len))
    assert ours.breakdown["decoder/moe/latent"] == b * seq_len * 2 * 2 * 64 * 24
    mamba = [blk.mixer for blk, n in config.stack_plan("decoder").counts() for _ in range(n) if blk.mixer]
    chunks = -(-seq_len // 8)
    state_passing = sum(2 * b * m.num_heads * (chunks + 1) ** 2 * m.head_dim * m.state_size for m in mamba)
    conv_tail = sum(2 * b * m.conv_dim * m.conv_kernel * (m.conv_kernel - 1) for m in mamba)
    assert forward_flops(model, batch=b, seq_len=seq_len) == ours.forward + state_passing + conv_tail


@pytest.mark.torch
def test_embedcalcs_torch_model_agrees_component_by_component(write_config: Any, cli: Any) -> None:
    """``verify``: embedcalc's MoE with its Latent module (moe/latent) against the analytic terms."""
    import json

    path = write_config(_raw(mlp_bias=True), "config.json")
    result = cli("verify", str(path), "--format", "json", "--seq-len", "21")
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)["results"][0]
    assert out["agree"] is True
    assert "decoder/moe/latent" in json.dumps(out)


def test_a_latent_width_that_is_not_a_positive_integer_names_the_key() -> None:
    with pytest.raises(ConfigError) as info:
        map_hf_config(_raw(moe_latent_size=0), "test")
    assert [p.path for p in info.value.problems] == ["moe_latent_size"]


def test_a_latent_width_without_moe_layers_is_ignored() -> None:
    report = map_hf_config(_raw(hybrid_override_pattern="M-M*--"), "test").report
    assert any(i.key == "moe_latent_size" and "no layer" in i.reason for i in report.ignored)
