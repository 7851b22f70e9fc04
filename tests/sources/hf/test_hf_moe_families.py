"""The MoE decoder families of issue 23 against transformers: ERNIE-4.5 MoE, HunYuan MoE V1, dots.llm1, MiniMax-M2.

For each a flagship file (``tests/fixtures/hf``: transformers' config class keys with the published model's values,
written here, not a hub copy): the parameter total equals transformers' numel on the meta device, the active count
equals the total less the routed experts a token skips (by hand from transformers' config object), the KV cache
equals the per-layer sum read off transformers' config object (2 x kv_heads x head_dim per token, a sliding layer
capped at its window), every key of the file is mapped or ignored with a reason; variants the readers must follow
(ERNIE's MoE interval and range, HunYuan's per-layer top-k, dots.llm1's sliding layers) count what transformers
builds; and forward FLOPs equal ``FlopCounterMode`` on a small eager variant (every token reaches exactly top_k
experts, so the count does not depend on the routing).
"""

from __future__ import annotations

from typing import Any

import pytest
from hf_reference import (
    forward_flops,
    hf_config,
    hf_model,
    kv_cache_formula,
    mapped_config,
    numel,
    raw_fixture,
    text_raw,
    unaccounted_keys,
)
from paths import HF_FIXTURES

from embedcalc.analysis.flops import forward_flops as analytic_flops
from embedcalc.analysis.memory import kv_cache_bytes
from embedcalc.analysis.params import active_params, count_params
from embedcalc.analysis.workload import Workload
from embedcalc.sources.loading import load_target

# fixture -> (model_type, transformers 5.24's numel on the meta device, active parameters)
PUBLISHED = {
    "ernie-4.5-21b-a3b": ("ernie4_5_moe", 21_825_437_888, 3_352_150_208),
    "hunyuan-a13b": ("hunyuan_v1_moe", 80_393_183_232, 12_747_448_320),
    "dots.llm1.inst": ("dots1", 142_774_373_888, 14_016_581_120),
    "minimax-m2": ("minimax_m2", 228_689_748_992, 11_030_537_216),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_file_counts_the_published_size(name: str) -> None:
    loaded = load_target(str(HF_FIXTURES / f"{name}.json"))
    assert loaded.source == "hf"
    assert count_params(loaded.config).total == PUBLISHED[name][1]
    assert active_params(loaded.config) == PUBLISHED[name][2]


@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_transformers_builds_the_published_size(transformers: Any, name: str) -> None:
    assert numel(hf_model(transformers, raw_fixture(name))) == PUBLISHED[name][1]


def _unused_experts(cfg: Any) -> int:
    """Per model, the routed-expert parameters a token does not use, from transformers' config object."""
    d = cfg.hidden_size
    if cfg.model_type == "ernie4_5_moe":
        last = cfg.moe_layer_end_index
        layers = sum(1 for i in range(cfg.num_hidden_layers)
                     if (i + 1) % cfg.moe_layer_interval == 0 and cfg.moe_layer_start_index <= i <= last)  # fmt: skip
        return layers * (cfg.moe_num_experts - cfg.moe_k) * 3 * d * cfg.moe_intermediate_size
    if cfg.model_type == "hunyuan_v1_moe":
        tops = cfg.moe_topk if isinstance(cfg.moe_topk, list) else [cfg.moe_topk] * cfg.num_hidden_layers
        return sum((cfg.num_experts - k) * 3 * d * cfg.intermediate_size for k in tops)
    if cfg.model_type == "dots1":
        layers = cfg.num_hidden_layers - cfg.first_k_dense_replace
        return layers * (cfg.n_routed_experts - cfg.num_experts_per_tok) * 3 * d * cfg.moe_intermediate_size
    return (
        cfg.num_hidden_layers
        * (cfg.num_local_experts - cfg.num_experts_per_tok)
        * 3
        * d
        * cfg.intermediate_size
    )


@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_active_is_the_total_less_the_skipped_experts(transformers: Any, name: str) -> None:
    cfg = hf_config(transformers, raw_fixture(name))
    config = mapped_config(text_raw(raw_fixture(name)))
    assert active_params(config) == count_params(config).total - _unused_experts(cfg)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_report_accounts_for_every_key(name: str) -> None:
    assert unaccounted_keys(raw_fixture(name)) == set()


# --- variants: what each reader must follow ---------------------------------------------------------------------

VARIANTS = [
    ("ernie-4.5-21b-a3b", {"moe_layer_interval": 2, "moe_layer_start_index": 3, "moe_layer_end_index": 20}),
    ("ernie-4.5-21b-a3b", {"use_bias": True, "moe_num_shared_experts": 0}),
    ("hunyuan-a13b", {"moe_topk": [8] * 16 + [4] * 16}),
    ("dots.llm1.inst", {"sliding_window": 4096, "max_window_layers": 31, "first_k_dense_replace": 3}),
    ("minimax-m2", {"num_key_value_heads": 4, "num_local_experts": 128}),
]


@pytest.mark.torch
@pytest.mark.parametrize(("name", "extra"), VARIANTS)
def test_variants_count_what_transformers_builds(transformers: Any, name: str, extra: dict[str, Any]) -> None:
    raw = raw_fixture(name) | extra
    config = mapped_config(text_raw(raw))
    assert count_params(config).total == numel(hf_model(transformers, raw))
    assert active_params(config) == count_params(config).total - _unused_experts(hf_config(transformers, raw))


# --- KV cache ------------------------------------------------------------------------------------------------------


@pytest.mark.torch
@pytest.mark.parametrize(
    ("name", "extra"), [(name, {}) for name in sorted(PUBLISHED)] + [VARIANTS[3], VARIANTS[4]]
)
def test_kv_cache_follows_transformers_config(transformers: Any, name: str, extra: dict[str, Any]) -> None:
    raw = raw_fixture(name) | extra
    cfg = hf_config(transformers, raw)
    config = mapped_config(text_raw(raw))
    for tokens in (1, 1000, 8192):
        assert kv_cache_bytes(config, Workload(seq_len=tokens, dtype="float16")) == kv_cache_formula(
            cfg, tokens, 2
        )


# --- FLOPs on a small eager variant ----------------------------------------------------------------------------------

_SMALL = dict(
    hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
    head_dim=16, vocab_size=128, max_position_embeddings=64, moe_intermediate_size=32, moe_num_experts=4, moe_k=2,
    moe_layer_end_index=3, num_experts=4, moe_topk=2, n_routed_experts=4, num_experts_per_tok=2,
    num_local_experts=4, first_k_dense_replace=1, rotary_dim=8,
)  # fmt: skip


def _small(raw: dict[str, Any]) -> dict[str, Any]:
    small = {key: _SMALL[key] if key in _SMALL and value is not None else value for key, value in raw.items()}
    for key in (
        ("moe_intermediate_size", "num_shared_expert") if raw["model_type"] == "hunyuan_v1_moe" else ()
    ):
        small.pop(key)
    if raw["model_type"] == "hunyuan_v1_moe":
        small["moe_topk"] = 2
    for key in ("pad_token_id", "bos_token_id", "eos_token_id", "eod_token_id", "sep_token_id"):
        small.pop(key, None)  # token ids past the small vocabulary
    return small


@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_forward_flops_equal_flop_counter(transformers: Any, name: str) -> None:
    import torch

    small = _small(raw_fixture(name))
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(
        hf_config(transformers, small), attn_implementation="eager", experts_implementation="eager"
    ).eval()
    measured = forward_flops(model, batch=2, seq_len=16)
    assert (
        analytic_flops(mapped_config(text_raw(small)), Workload(batch_size=2, seq_len=16)).forward == measured
    )
