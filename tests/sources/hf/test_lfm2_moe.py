"""LFM2-MoE (Lfm2MoeForCausalLM) beyond its published size (tests/sources/hf/test_mixers_hf.py checks the file's
cache, FLOPs and generation state): the dense/MoE split at ``num_dense_layers``, the router without a bias and its
``expert_bias`` buffer, and the refusals where transformers cannot build the file.
"""

from __future__ import annotations

from typing import Any

import pytest
from hf_reference import hf_model, mapped_config, raw_fixture, trainable

from embedcalc.analysis.params import active_params, count_params
from embedcalc.errors import ConfigError
from embedcalc.sources.hf import map_hf_config

SMALL = dict(hidden_size=64, num_hidden_layers=5, num_attention_heads=4, num_key_value_heads=2, intermediate_size=96,
             moe_intermediate_size=16, num_experts=6, num_experts_per_tok=2, vocab_size=256,
             layer_types=["conv", "full_attention", "conv", "conv", "full_attention"])  # fmt: skip


def _small(**changes: Any) -> dict[str, Any]:
    return raw_fixture("lfm2-8b-a1b") | SMALL | changes


@pytest.mark.torch
@pytest.mark.parametrize(
    "changes",
    [{}, {"num_dense_layers": 0}, {"num_dense_layers": 9}, {"use_expert_bias": False}, {"conv_bias": True},
     {"tie_word_embeddings": False}, {"layer_types": ["conv"] * 5}],
    ids=["as-published", "no-dense", "all-dense", "no-expert-bias", "conv-bias", "untied", "conv-only"],
)  # fmt: skip
def test_small_variants_count_what_transformers_builds(hf_transformers: Any, changes: dict[str, Any]) -> None:
    """Parameters equal transformers' numel on the meta device (the expert_bias buffer is no parameter); active is
    the total less (experts - top_k) x 3 x d x f per MoE layer."""
    raw = _small(**changes)
    config = mapped_config(raw)
    total = count_params(config).total
    assert total == trainable(hf_model(hf_transformers, raw, "AutoModelForCausalLM"))
    moe_layers = max(5 - raw["num_dense_layers"], 0)
    assert active_params(config) == total - moe_layers * (6 - 2) * 3 * 64 * 16


def test_the_router_has_no_bias_and_the_first_layers_are_dense() -> None:
    params = count_params(mapped_config(_small(num_dense_layers=2))).as_dict()
    assert params["decoder/moe/router"] == 3 * 64 * 6  # 3 MoE layers x Linear(64, 6, bias=False)
    assert params["decoder/moe/experts"] == 3 * 6 * 3 * 64 * 16
    # the dense Lfm2MoeMLP (w1, w3 in; w2 out) of layers 0 and 1 only
    assert (params["decoder/ffn/in"], params["decoder/ffn/out"]) == (2 * 2 * 64 * 96, 2 * 64 * 96)


@pytest.mark.parametrize(
    ("changes", "key", "words"),
    [({"layer_types": None}, "layer_types", "Lfm2MoeConfig has no default layer_types"),
     ({"layer_types": ["conv", "short_conv", "conv", "conv", "conv"]}, "layer_types", "'conv' or 'full_attention'"),
     ({"num_dense_layers": -1}, "num_dense_layers", "non-negative integer"),
     ({"num_experts_per_tok": 0}, "num_experts_per_tok", "positive top_k")],
)  # fmt: skip
def test_a_file_transformers_cannot_build_is_refused_naming_the_key(
    changes: dict[str, Any], key: str, words: str
) -> None:
    raw = {k: v for k, v in _small(**changes).items() if v is not None}
    with pytest.raises(ConfigError) as info:
        map_hf_config(raw, "test")
    first = info.value.problems[0]  # keys left unread after it are reported too
    assert first.path == key and words in first.message
    assert info.value.exit_code == 3
