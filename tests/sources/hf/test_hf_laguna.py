"""Laguna (``families/laguna.py``) against the model transformers builds: small files written by ``LagunaConfig``
(per-head and per-channel output gates, sliding layers, dense and MoE layers), and the same keys without the lists
the class derives. The parameter total equals transformers' numel on the meta device (the router's frozen
``e_score_correction_bias`` Parameter included), the active count the total less the routed experts a token skips,
the KV cache the per-layer sum read off the config, every key is mapped or ignored with a reason, and forward FLOPs
equal ``FlopCounterMode`` on an eager CPU build, layers with their own head counts included.
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
              num_key_value_heads=2, head_dim=16, max_position_embeddings=256, num_experts=4, num_experts_per_tok=2,
              moe_intermediate_size=32, shared_expert_intermediate_size=24, sliding_window=8)  # fmt: skip
VARIANTS: dict[str, dict[str, Any]] = {
    "per_head": _SMALL,
    "per_channel_sliding": _SMALL | dict(gating="per-channel", layer_types=["sliding_attention", "full_attention"] * 2,
                                         mlp_layer_types=["dense", "sparse", "dense", "sparse"]),
    "per_head_biased": _SMALL | dict(gating="per-head", attention_bias=True,
                                     layer_types=["full_attention"] + ["sliding_attention"] * 3),
    # layers with their own query heads (blocks with their own num_heads)
    "per_layer_heads": _SMALL | dict(num_attention_heads_per_layer=[4, 8, 2, 8],
                                     layer_types=["sliding_attention", "full_attention"] * 2),
}  # fmt: skip


def _files(transformers: Any, name: str) -> tuple[Any, list[dict[str, Any]]]:
    cfg = transformers.LagunaConfig(**VARIANTS[name])
    return cfg, [cfg.to_dict(), {"model_type": "laguna", **VARIANTS[name]}]


@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_counts_what_transformers_builds(transformers: Any, name: str) -> None:
    import torch

    cfg, files = _files(transformers, name)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
    total = sum(p.numel() for p in model.parameters())
    unused = cfg.mlp_layer_types.count("sparse") * (cfg.num_experts - cfg.num_experts_per_tok) * 3 * 64 * 32
    for raw in files:
        ours = mapped_config(raw)
        assert count_params(ours).total == total
        assert active_params(ours) == total - unused
        for tokens in (1, 5, 100):
            assert kv_cache_bytes(ours, Workload(seq_len=tokens, dtype="float16")) == kv_cache_formula(
                cfg, tokens, 2
            )
        assert unaccounted_keys(raw) == set()


@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_forward_flops_equal_flop_counter(transformers: Any, name: str) -> None:
    import torch

    cfg, files = _files(transformers, name)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(
        cfg, attn_implementation="eager", experts_implementation="eager"
    ).eval()
    measured = forward_flops(model, batch=2, seq_len=16)
    assert analytic_flops(mapped_config(files[0]), Workload(batch_size=2, seq_len=16)).forward == measured


def test_per_layer_head_counts_must_cover_every_layer() -> None:
    raw = {"model_type": "laguna", **_SMALL, "num_attention_heads_per_layer": [4, 8]}
    with pytest.raises(ConfigError) as info:
        map_hf_config(raw, "test")
    assert [p.path for p in info.value.problems] == ["num_attention_heads_per_layer"]
    map_hf_config(raw | {"num_attention_heads_per_layer": [4] * 4}, "test")
