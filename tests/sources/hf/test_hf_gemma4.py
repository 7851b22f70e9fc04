"""Gemma 4 text models from their hub files (transformers 5.24 ``Gemma4TextConfig`` / ``Gemma4ForCausalLM``).

Fixtures: ``gemma-4-31b.json`` has google/gemma-4-31B's text_config shape (60 layers, 5 sliding : 1 full, full
layers of head_dim 512 with 4 KV heads and values from keys, no per-layer embeddings); ``gemma-4-e2b.json``
google/gemma-4-E2B's (35 layers, 4 : 1, per-layer embeddings of 256, the last 20 layers sharing K/V, double-wide
MLPs there), as the public ports of those checkpoints quote them; both written in transformers 5's layout
(``global_head_dim``, ``num_global_key_value_heads``). Their totals are pinned in published_sizes.yaml and checked
against transformers there, their KV cache per layer in test_kv_sharing.py; here: every key accounted for, a file
re-saved by transformers (``per_layer_config`` instead of the global keys) counting the same, and what is refused.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hf_reference import fixture_path, hf_config, published, raw_fixture, unaccounted_keys

from embedcalc.analysis.params import active_params, count_params
from embedcalc.analysis.workload import Workload
from embedcalc.config.schema import ModelConfig
from embedcalc.errors import ConfigError
from embedcalc.sources.hf import map_hf_config
from embedcalc.sources.loading import load_target

PUBLISHED = published("test_hf_gemma4")


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_report_accounts_for_every_key(name: str) -> None:
    assert not unaccounted_keys(raw_fixture(name), name)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_count_and_active_are_the_published_total(name: str) -> None:
    config = load_target(str(fixture_path(name))).config
    row = PUBLISHED[name]
    assert count_params(config).total == row.total
    assert active_params(config) == (row.active if row.active is not None else row.total)


def test_active_params_of_the_moe_model_skip_the_unused_experts() -> None:
    """26B-A4B: each of the 30 layers keeps top_k 8 of its 128 experts (gate_up 2 x 704 x 2816, down 2816 x 704),
    the dense MLP, router and scales all active: the total minus 30 x 120 x 3 x 2816 x 704."""
    config = load_target(str(fixture_path("gemma-4-26b-a4b"))).config
    assert active_params(config) == PUBLISHED["gemma-4-26b-a4b"].total - 30 * 120 * 3 * 2816 * 704


@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_a_resaved_file_counts_the_same(hf_transformers: Any, name: str) -> None:
    """transformers' to_dict() writes per_layer_config ({layer: {head_dim, ...}}) and drops global_head_dim."""
    cfg = hf_config(hf_transformers, raw_fixture(name))
    resaved = cfg.to_dict()
    assert "per_layer_config" in resaved and "global_head_dim" not in resaved
    config = load_target(str(fixture_path(name))).config
    again = map_hf_config(resaved, f"{name} re-saved").data
    assert again["blocks"] == config.model_dump(exclude_unset=True)["blocks"]


def _refused(raw: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as caught:
        map_hf_config(raw, "test")
    return str(caught.value)


def test_an_moe_block_without_its_experts_is_refused_naming_the_key() -> None:
    raw = copy.deepcopy(raw_fixture("gemma-4-26b-a4b"))
    raw["text_config"]["num_experts"] = None
    assert "num_experts = None: enable_moe_block needs a positive num_experts" in _refused(raw)


_TINY_MOE = dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=16, global_head_dim=32, num_global_key_value_heads=1,
                 attention_k_eq_v=True, sliding_window=8, layer_types=["sliding_attention", "full_attention"] * 2,
                 hidden_size_per_layer_input=8, num_kv_shared_layers=2, use_double_wide_mlp=True,
                 enable_moe_block=True, num_experts=4, top_k_experts=2, moe_intermediate_size=32,
                 max_position_embeddings=64, model_type="gemma4_text")  # fmt: skip


@pytest.mark.torch
def test_a_tiny_moe_variant_equals_transformers_and_the_torch_model(hf_transformers: Any) -> None:
    """Every Gemma 4 part at once (MoE block, KV sharing with double-wide shared MLPs, k_eq_v full layers, PLE):
    parameters analytic = embedcalc's torch model = Gemma4ForCausalLM (meta); forward FLOPs analytic = embedcalc's
    torch model (eager) = transformers' eager forward on the CPU with eager experts (FlopCounterMode)."""
    import torch
    from hf_reference import forward_flops as hf_forward_flops

    from embedcalc.analysis.flops import forward_flops
    from embedcalc.modeling import build_model
    from embedcalc.modeling.counting import component_flops, component_params

    config = ModelConfig.model_validate(map_hf_config(_TINY_MOE, "tiny").data)
    hf = hf_config(hf_transformers, _TINY_MOE)
    with torch.device("meta"):
        meta = hf_transformers.Gemma4ForCausalLM(hf)
    assert component_params(build_model(config)) == dict(count_params(config).items())
    assert count_params(config).total == sum(p.numel() for p in meta.parameters())
    analytic = forward_flops(config, Workload(batch_size=2, seq_len=12))
    assert component_flops(config, batch_size=2, seq_len=12, attention="eager") == dict(
        analytic.breakdown.items()
    )
    torch.manual_seed(0)
    model = hf_transformers.AutoModelForCausalLM.from_config(
        hf, attn_implementation="eager", experts_implementation="eager"
    ).eval()
    assert hf_forward_flops(model, 2, 12) == analytic.forward


def test_sharing_more_layers_than_a_type_has_producers_is_refused() -> None:
    raw = copy.deepcopy(raw_fixture("gemma-4-e2b"))
    raw["text_config"]["num_kv_shared_layers"] = 34  # only layer 0 (sliding) before them: no full producer
    assert "num_kv_shared_layers = 34" in _refused(raw)


def test_a_bare_model_type_reads_the_class_defaults(tmp_path: Path) -> None:
    """Gemma4TextConfig's defaults: 30 layers, per-layer embeddings of 256, full layers of head_dim 512."""
    config = load_target(str(_write(tmp_path, {"model_type": "gemma4_text"}))).config
    assert config.per_layer_input_dim == 256 and config.num_layers == 30
    assert {b.attention.head_dim for b in config.named_blocks.values() if b.attention} == {256, 512}


def _write(directory: Path, raw: dict[str, Any]) -> Path:
    path = directory / "config.json"
    path.write_text(json.dumps(raw, default=str))
    return path


@pytest.mark.torch
def test_the_default_multimodal_file_counts_its_text_model(hf_transformers: Any, tmp_path: Path) -> None:
    """Gemma4Config().to_dict(), as transformers writes it (text_config with per_layer_config, vision and audio
    configs beside it): counted as Gemma4ForCausalLM of the default text config, which has per-layer embeddings and
    full layers of head_dim 512."""
    import torch

    raw = hf_transformers.Gemma4Config().to_dict()
    config = load_target(str(_write(tmp_path, raw))).config
    with torch.device("meta"):
        model = hf_transformers.Gemma4ForCausalLM(hf_transformers.Gemma4TextConfig())
    assert count_params(config).total == sum(p.numel() for p in model.parameters())
