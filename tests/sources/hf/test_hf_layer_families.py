"""Hugging Face families that need the layer model (issue 10): each published config.json is exact.

For every family a flagship file (``tests/fixtures/hf``, as the hub serves it): transformers builds the model on
the meta device and embedcalc's parameter total equals its ``numel``; embedcalc's KV cache equals the formula
read from transformers' own config object (per layer: 2 x kv_heads x head_dim x the tokens the layer keeps, a
sliding window capping them; MLA: kv_lora_rank + qk_rope_head_dim); and for a sample, embedcalc's forward FLOPs
equal ``FlopCounterMode`` on a small eager variant of the same file (real weights on the CPU, so that transformers'
MoE routing runs; every token reaches exactly top_k experts, so the count does not depend on the routing).
"""

from __future__ import annotations

from typing import Any

import pytest
from hf_reference import (
    fixture_path,
    forward_flops,
    hf_config,
    kv_cache_formula,
    mapped_config,
    published,
    raw_fixture,
    text_raw,
    unaccounted_keys,
)

from embedcalc.analysis.flops import forward_flops as analytic_flops
from embedcalc.analysis.memory import kv_cache_bytes
from embedcalc.analysis.workload import Workload
from embedcalc.sources.hf import FAMILIES
from embedcalc.sources.loading import load_target

# fixture -> its row (model_type, transformers' total): this module's group of tests/fixtures/published_sizes.yaml,
# whose sizes tests/sources/hf/test_published_sizes.py checks on both sides
PUBLISHED = published("test_hf_layer_families")
FLOP_SAMPLE = ["gemma-2-9b", "gemma-3-1b", "qwen3-30b-a3b", "qwen1.5-moe-a2.7b", "mixtral-8x7b",
               "deepseek-v2-lite", "deepseek-v3", "gpt-oss-20b", "olmo-2-1124-7b", "olmoe-1b-7b"]  # fmt: skip


def test_every_family_is_registered_with_a_fixture() -> None:
    families = {row.model_type for row in PUBLISHED.values()} - {"gemma3"}
    assert families <= set(FAMILIES)
    assert {raw_fixture(name)["model_type"] for name in PUBLISHED} == families | {"gemma3"}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_report_accounts_for_every_key(name: str) -> None:
    assert not unaccounted_keys(raw_fixture(name), name)


# --- KV cache -----------------------------------------------------------------------------------------------------


@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_kv_cache_equals_transformers_config(transformers: Any, name: str) -> None:
    cfg = hf_config(transformers, raw_fixture(name))
    config = load_target(str(fixture_path(name))).config
    for tokens in (1, 1000, 8192):
        workload = Workload(seq_len=tokens, dtype="float16")
        assert kv_cache_bytes(config, workload) == kv_cache_formula(cfg, tokens, 2), tokens


# --- FLOPs on a small eager variant --------------------------------------------------------------------------------

_SMALL = dict(
    hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
    head_dim=16, vocab_size=128, max_position_embeddings=64, sliding_window=8, num_local_experts=4, num_experts=4,
    n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=48,
    kv_lora_rank=16, q_lora_rank=24, qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8, first_k_dense_replace=1,
    n_group=1, topk_group=1,
)  # fmt: skip


def _small(raw: dict[str, Any]) -> dict[str, Any]:
    """The file with every size shrunk (only keys it has, plus num_key_value_heads); layer_types cut to 4."""
    small = dict(text_raw(raw))
    for key, value in _SMALL.items():
        if small.get(key) is not None:  # a null stays null (DeepSeek-V2-Lite's q_lora_rank)
            small[key] = value
    small["num_key_value_heads"] = _SMALL["num_key_value_heads"]
    if small.get("model_type", "").startswith("deepseek"):
        small["num_key_value_heads"] = small["num_attention_heads"]
    if isinstance(small.get("layer_types"), list):
        small["layer_types"] = small["layer_types"][: _SMALL["num_hidden_layers"]]
    for key in ("quantization_config", "rope_scaling", "pad_token_id", "bos_token_id", "eos_token_id"):
        small.pop(key, None)
    return small


@pytest.mark.torch
@pytest.mark.parametrize("name", FLOP_SAMPLE)
def test_forward_flops_equal_flop_counter(transformers: Any, name: str) -> None:
    import torch

    small = _small(raw_fixture(name))
    torch.manual_seed(0)
    cfg = hf_config(transformers, small)
    auto = transformers.AutoModelForCausalLM
    # eager experts: transformers 5 runs MoE experts through torch's grouped_mm by default, an op FlopCounterMode has
    # no formula for (its FLOPs would silently count 0, as the CPU SDPA gap of PyTorch issue 195460 does)
    model = auto.from_config(cfg, attn_implementation="eager", experts_implementation="eager").eval()
    measured = forward_flops(model, batch=2, seq_len=16)
    assert (
        analytic_flops(mapped_config(text_raw(small)), Workload(batch_size=2, seq_len=16)).forward == measured
    )
