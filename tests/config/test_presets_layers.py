"""The presets of the layer model (issue 9 item 5, issue 10's gemma-7b): each equals transformers, exactly.

Each preset transcribes a published hub config.json (``tests/fixtures/hf/<preset>.json``, as the hub serves it).
Its total is a row of ``tests/fixtures/published_sizes.yaml``, checked two independent ways by
tests/sources/hf/test_published_sizes.py: transformers builds it from that file on the meta device (validates the
fixture), and ``embedcalc analyze PRESET --format json`` gives it (validates the preset and the analysis). Here: for
the mixtures of experts the active parameters per token are the total less the (num_experts - top_k) routed
experts a token does not use in every MoE layer (docs/layers.md; Fedus et al. 2021), and the layer layouts (which
layers slide, which are MoE) equal transformers' config objects.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hf_reference import hf_config, hf_model, published_sizes, raw_fixture

from embedcalc.sources.loading import load_target

# Routed-expert parameters a token does not use: layers x (experts - top_k) x one expert.
_UNUSED = {
    "mixtral-8x7b": 32 * 6 * 3 * 4096 * 14336,  # gate, up, down
    "qwen3-30b-a3b": 48 * 120 * 3 * 2048 * 768,
    "deepseek-v3": 58 * 248 * 3 * 7168 * 2048,  # the 3 dense layers have no experts
    # gpt-oss: gate_up and down, with their biases
    "gpt-oss-20b": 24 * 28 * (2880 * 2 * 2880 + 2 * 2880 + 2880 * 2880 + 2880),
}
# the totals: tests/fixtures/published_sizes.yaml (tests/sources/hf/test_published_sizes.py checks each row)
ACTIVE = {name: published_sizes()[name].total - unused for name, unused in _UNUSED.items()}


@pytest.fixture(scope="module")
def transformers() -> Any:
    pytest.importorskip("torch")
    return pytest.importorskip("transformers")


def test_active_parameters_are_the_published_ones() -> None:
    """The rule reproduces the published active sizes (Mixtral 12.9B, Qwen3 3.3B, DeepSeek-V3 37B, gpt-oss
    3.61B, the latter without its 201088 x 2880 input embedding), and the data file's active counts are the rule's."""
    assert ACTIVE["mixtral-8x7b"] == 12_879_925_248  # issue 9
    assert math.floor(ACTIVE["qwen3-30b-a3b"] / 1e8) == 33
    assert math.floor(ACTIVE["deepseek-v3"] / 1e9) == 37
    assert round((ACTIVE["gpt-oss-20b"] - 201088 * 2880) / 1e7) == 361
    assert {name: published_sizes()[name].active for name in ACTIVE} == ACTIVE


# --- the layouts against transformers' config objects -------------------------------------------------------------


def _windows(name: str) -> list[int | None]:
    plan = load_target(name).config.stack_plan("decoder")
    return [plan.block_at(i).attention.window for i in range(plan.num_layers)]


def _moe_layers(name: str) -> list[bool]:
    plan = load_target(name).config.stack_plan("decoder")
    return [plan.block_at(i).ffn.moe for i in range(plan.num_layers)]


@pytest.mark.parametrize("name", ["gemma-2-9b", "gemma-3-27b", "gpt-oss-20b"])
def test_sliding_layers_are_transformers_layer_types(transformers: Any, name: str) -> None:
    config = hf_config(transformers, raw_fixture(name))
    expected = [config.sliding_window if kind == "sliding_attention" else None for kind in config.layer_types]
    assert _windows(name) == expected


def test_deepseek_v3_dense_layers_come_first(transformers: Any) -> None:
    config = hf_config(transformers, raw_fixture("deepseek-v3"))
    assert _moe_layers("deepseek-v3") == [i >= config.first_k_dense_replace for i in range(61)]


@pytest.mark.parametrize("name", ["mixtral-8x7b", "qwen3-30b-a3b", "gpt-oss-20b"])
def test_every_layer_is_moe(name: str) -> None:
    assert all(_moe_layers(name))


@pytest.mark.parametrize("name", ["qwen3-8b", "qwen3-30b-a3b", "gemma-3-27b"])
def test_qk_norms_per_head(name: str) -> None:
    plan = load_target(name).config.stack_plan("decoder")
    assert {block.attention.qk_norm for block in plan.blocks} == {"head"}


def test_albert_shares_one_layer(transformers: Any) -> None:
    config = load_target("albert-base-v2").config
    model = hf_model(transformers, raw_fixture("albert-base-v2"))
    assert config.shared_layers and len(model.encoder.albert_layer_groups) == 1
    assert model.embeddings.word_embeddings.weight.shape == (30000, config.token_embed_dim)
    assert model.encoder.embedding_hidden_mapping_in.bias is not None
