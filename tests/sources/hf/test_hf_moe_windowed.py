"""EXAONE-MoE, Cohere2-MoE and MiMo-V2-Flash (``sources/hf/families/moe_windowed.py``) against the models transformers
builds.

Each variant is a file written by transformers' own config class (small dimensions, ``to_dict()``), and also the
same keys without the per-layer lists the class derives (``layer_types``, ``mlp_layer_types``), as files written by
hand or by older releases have them: the parameter total equals transformers' numel on the meta device, the active
count the total less the routed experts a token skips (from the config object), the KV cache the per-layer sum
read off the config (a sliding layer capped at its window), every key is mapped or ignored with a reason, and forward
FLOPs equal ``FlopCounterMode`` on an eager CPU build.
"""

from __future__ import annotations

from typing import Any

import pytest
from hf_reference import forward_flops, kv_cache_formula, mapped_config, quiet_transformers, unaccounted_keys

from embedcalc.analysis.flops import forward_flops as analytic_flops
from embedcalc.analysis.memory import kv_cache_bytes
from embedcalc.analysis.params import active_params, count_params
from embedcalc.analysis.workload import Workload


@pytest.fixture(scope="module")
def transformers() -> Any:
    pytest.importorskip("torch")
    return quiet_transformers()


_SMALL = dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=6, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=256, num_experts=4, num_experts_per_tok=2,
              sliding_window=8)  # fmt: skip
_MIMO = {k: v for k, v in _SMALL.items() if k != "num_experts"}
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "exaone_moe": ("ExaoneMoeConfig", _SMALL | dict(moe_intermediate_size=32, sliding_window_pattern=3)),
    "exaone_moe_two_dense": ("ExaoneMoeConfig", _SMALL | dict(moe_intermediate_size=32, first_k_dense_replace=2,
                                                             num_shared_experts=2, sliding_window_pattern=2)),
    "exaone_moe_all_global": ("ExaoneMoeConfig", _SMALL | dict(moe_intermediate_size=32, sliding_window_pattern=1)),
    "mimo_v2_flash": ("MiMoV2FlashConfig", _MIMO | dict(
        head_dim=24, v_head_dim=16, moe_intermediate_size=32, n_routed_experts=4, num_attention_heads=8,
        num_key_value_heads=2)),
    "mimo_v2_flash_biased": ("MiMoV2FlashConfig", _MIMO | dict(
        head_dim=16, v_head_dim=24, moe_intermediate_size=32, n_routed_experts=4, attention_bias=True,
        layer_types=["full_attention", "sliding_attention"] * 3, mlp_layer_types=["dense", "sparse", "dense",
                                                                                    "sparse", "sparse", "sparse"])),
    "cohere2_moe": ("Cohere2MoeConfig", _SMALL | dict(head_dim=16, sliding_window_pattern=3)),
    "cohere2_moe_prefix": ("Cohere2MoeConfig", _SMALL | dict(
        head_dim=24, first_k_dense_replace=2, prefix_dense_intermediate_size=128, num_shared_experts=1,
        prefix_dense_sliding_window_pattern=2, rms_norm_eps=1e-5, attention_bias=True)),
}  # fmt: skip


def _config(transformers: Any, name: str) -> Any:
    cls, kwargs = VARIANTS[name]
    return getattr(transformers, cls)(**kwargs)


def _files(transformers: Any, name: str) -> list[dict[str, Any]]:
    """The file the class writes, and the hand-written one (the class's arguments, no derived lists)."""
    written = _config(transformers, name).to_dict()
    hand = {"model_type": written["model_type"], **VARIANTS[name][1]}
    return [written, hand]


def _unused_experts(cfg: Any) -> int:
    d = cfg.hidden_size
    width = cfg.intermediate_size if cfg.model_type == "cohere2_moe" else cfg.moe_intermediate_size
    experts = cfg.n_routed_experts if cfg.model_type == "mimo_v2_flash" else cfg.num_experts
    sparse = cfg.mlp_layer_types.count("sparse")
    return sparse * (experts - cfg.num_experts_per_tok) * 3 * d * width


def _kv_cache(cfg: Any, tokens: int, dtype_bytes: int) -> int:
    """KV bytes per layer from the config object: MiMo-V2-Flash's sliding layers have twice the KV heads, and its
    values are v_head_dim wide beside keys of head_dim; the other families as kv_cache_formula."""
    if cfg.model_type != "mimo_v2_flash":
        return kv_cache_formula(cfg, tokens, dtype_bytes)
    width = cfg.head_dim + cfg.v_head_dim
    return sum(
        (2 * cfg.num_key_value_heads * width * min(tokens, cfg.sliding_window) if t == "sliding_attention"
         else cfg.num_key_value_heads * width * tokens) * dtype_bytes for t in cfg.layer_types
    )  # fmt: skip


@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_counts_what_transformers_builds(transformers: Any, name: str) -> None:
    import torch

    cfg = _config(transformers, name)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
    total = sum(p.numel() for p in model.parameters())
    for raw in _files(transformers, name):
        ours = mapped_config(raw)
        assert count_params(ours).total == total
        assert active_params(ours) == total - _unused_experts(cfg)
        for tokens in (1, 5, 100):
            assert kv_cache_bytes(ours, Workload(seq_len=tokens, dtype="float16")) == _kv_cache(
                cfg, tokens, 2
            )
        assert unaccounted_keys(raw) == set()


@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_forward_flops_equal_flop_counter(transformers: Any, name: str) -> None:
    import torch

    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(
        _config(transformers, name), attn_implementation="eager", experts_implementation="eager"
    ).eval()
    measured = forward_flops(model, batch=2, seq_len=16)
    ours = mapped_config(_config(transformers, name).to_dict())
    assert analytic_flops(ours, Workload(batch_size=2, seq_len=16)).forward == measured


def test_exaone_moe_string_pattern_is_refused_as_transformers_cannot_build_it() -> None:
    """ExaoneMoeConfig computes (i + 1) % sliding_window_pattern: a string pattern (EXAONE 4.0's "LLLG") fails
    there, so embedcalc names the key instead of counting a model transformers does not build."""
    from embedcalc.errors import ConfigError
    from embedcalc.sources.hf import map_hf_config

    raw = {"model_type": "exaone_moe", **VARIANTS["exaone_moe"][1], "sliding_window_pattern": "LLG"}
    with pytest.raises(ConfigError) as info:
        map_hf_config(raw, "test")
    assert [p.path for p in info.value.problems] == ["sliding_window_pattern"]
    map_hf_config(raw | {"layer_types": ["sliding_attention", "full_attention"] * 3}, "test")
