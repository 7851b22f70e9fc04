"""Step-3.7-Flash's text model (``sources/hf/families/step3.py``: ``step3p5``, and ``step3p7`` files' ``text_config``)
against the model transformers builds: small files written by ``Step3p7TextConfig`` (sliding layers with their own
query heads, dense and MoE layers, MLP and attention biases), the same keys without the lists the class derives, an
old hub file (``moe_layers_enum``, ``attention_other_setting``, lists padded with the MTP layers) and the ``step3p7``
wrapper. transformers has no causal-LM class for ``step3p5``: the reference is ``Step3p7ForConditionalGeneration``
less its vision tower and projector (text ids only, so they do not run). The parameter total equals its numel on
the meta device, the active count the total less the routed experts a token skips, the KV cache the per-layer sum
read off the config (a sliding layer capped at its window), every key is mapped or ignored with a reason, and
forward FLOPs equal ``FlopCounterMode`` on an eager CPU build.
"""

from __future__ import annotations

from typing import Any

import pytest
from hf_reference import forward_flops, kv_cache_formula, mapped_config, quiet_transformers, unaccounted_keys

from embedcalc.analysis.flops import forward_flops as analytic_flops
from embedcalc.analysis.memory import kv_cache_bytes
from embedcalc.analysis.params import active_params, count_params
from embedcalc.analysis.workload import Workload
from embedcalc.errors import ConfigError
from embedcalc.sources.hf import map_hf_config


@pytest.fixture(scope="module")
def transformers() -> Any:
    pytest.importorskip("torch")
    return quiet_transformers()


_SMALL = dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
              num_key_value_heads=2, head_dim=16, moe_intermediate_size=32, n_routed_experts=4, num_experts_per_tok=2,
              share_expert_dim=24, sliding_window=8)  # fmt: skip
_TYPES = ["sliding_attention", "full_attention", "full_attention", "sliding_attention"]
VARIANTS: dict[str, dict[str, Any]] = {
    "sliding_heads": _SMALL | dict(layer_types=_TYPES, num_sliding_attention_heads=8,
                                   mlp_layer_types=["dense", "sparse", "sparse", "sparse"]),
    "biased_mlp": _SMALL | dict(layer_types=_TYPES, mlp_bias=True,
                                mlp_layer_types=["dense", "dense", "sparse", "sparse"]),
    "all_full_attention_bias": _SMALL | dict(attention_bias=True, mlp_layer_types=["sparse"] * 4),
    # an old hub file: MoE layers by moe_layers_enum, the sliding heads in attention_other_setting, lists padded
    # with one MTP layer's entries
    "legacy": _SMALL | dict(layer_types=[*_TYPES, "full_attention"], num_nextn_predict_layers=1,
                            moe_layers_enum="1,2", attention_other_setting={"num_attention_heads": 2,
                                                                           "num_attention_groups": 2},
                            hidden_act="swigluoai", swiglu_limits=[0, 0, 7, 7, 7]),
}  # fmt: skip


def _config(transformers: Any, name: str) -> Any:
    return transformers.Step3p7TextConfig(**VARIANTS[name])


def _files(transformers: Any, name: str) -> list[dict[str, Any]]:
    """The file the class writes, the hand-written one (its arguments, no derived lists), the wrapper's."""
    written = _config(transformers, name).to_dict()
    hand = {"model_type": "step3p5", **VARIANTS[name]}
    wrapper = transformers.Step3p7Config(text_config=dict(written)).to_dict()
    return [written, hand, wrapper]


_VISION = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=28, patch_size=14)


def _model(transformers: Any, name: str, meta: bool) -> Any:
    import torch

    wrapper = transformers.Step3p7Config(
        text_config=_config(transformers, name).to_dict(), vision_config=_VISION
    )
    if meta:
        with torch.device("meta"):
            return transformers.Step3p7ForConditionalGeneration(wrapper)
    torch.manual_seed(0)
    return transformers.Step3p7ForConditionalGeneration._from_config(
        wrapper, attn_implementation="eager", experts_implementation="eager"
    ).eval()


def _text_params(model: Any) -> int:
    return sum(p.numel() for n, p in model.named_parameters() if "language_model" in n or "lm_head" in n)


@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_counts_what_transformers_builds(transformers: Any, name: str) -> None:
    cfg = _config(transformers, name)
    total = _text_params(_model(transformers, name, meta=True))
    unused = (
        cfg.mlp_layer_types.count("sparse") * (cfg.n_routed_experts - cfg.num_experts_per_tok) * 3 * 64 * 32
    )
    for raw in _files(transformers, name):
        ours = mapped_config(raw)
        assert count_params(ours).total == total
        assert active_params(ours) == total - unused
        for tokens in (1, 5, 100):
            assert kv_cache_bytes(ours, Workload(seq_len=tokens, dtype="float16")) == kv_cache_formula(
                cfg, tokens, 2
            )
        if "text_config" not in raw:  # the wrapper's report names the text file's keys, checked here
            assert unaccounted_keys(raw) == set()


@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_forward_flops_equal_flop_counter(transformers: Any, name: str) -> None:
    measured = forward_flops(_model(transformers, name, meta=False), batch=2, seq_len=16)
    ours = mapped_config(_config(transformers, name).to_dict())
    assert analytic_flops(ours, Workload(batch_size=2, seq_len=16)).forward == measured


def test_sparse_layers_are_refused() -> None:
    """transformers builds a minimax_m3_sparse layer of Step-3.7 without its indexer and cannot run it: named."""
    raw = {"model_type": "step3p5", **_SMALL, "layer_types": ["minimax_m3_sparse"] + ["full_attention"] * 3}
    with pytest.raises(ConfigError) as info:
        map_hf_config(raw, "test")
    assert [p.path for p in info.value.problems] == ["layer_types"]
    assert "indexer" in info.value.problems[0].message


def test_per_channel_gate_is_refused() -> None:
    """transformers builds Step-3.7's per-channel g_proj but its forward multiplies it per head and fails: named."""
    raw = {"model_type": "step3p5", **_SMALL, "gating": "per-channel"}
    with pytest.raises(ConfigError) as info:
        map_hf_config(raw, "test")
    assert [p.path for p in info.value.problems] == ["gating"]
