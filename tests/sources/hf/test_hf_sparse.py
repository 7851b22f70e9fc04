"""DeepSeek-V3.2 and GLM-5 (DeepSeek Sparse Attention, attention kind ``sparse``) against transformers (issue 23).

The published files and the ``deepseek-v3.2`` preset count what transformers builds on the meta device
(DeepseekV32ForCausalLM, GlmMoeDsaForCausalLM; GLM-5 also with shared-selection layers, from each of its three
schedule keys); the KV cache equals the bytes transformers' own DynamicCache holds after a forward on a small
variant (the MLA latent and rope key, and each indexer layer's keys); forward FLOPs equal ``FlopCounterMode`` on
transformers' eager path while n <= index_topk and exceed it by exactly the masked keys' pairs beyond it
(transformers' eager core attends to all n keys with the unselected ones masked; embedcalc counts each query's
min(n, k) selected keys, DeepSeek-V3.2-Exp §2.2).
"""

from __future__ import annotations

from typing import Any

import pytest
from hf_reference import forward_flops, hf_config, hf_model, mapped_config, numel, raw_fixture
from paths import HF_FIXTURES

from embedcalc.analysis.flops import forward_flops as analytic_flops
from embedcalc.analysis.memory import kv_cache_bytes
from embedcalc.analysis.params import active_params, count_params
from embedcalc.analysis.workload import Workload
from embedcalc.sources.loading import load_target

# fixture -> (model_type, transformers' numel on the meta device, active parameters)
PUBLISHED = {
    "deepseek-v3.2": ("deepseek_v32", 671_877_929_216, 38_403_807_488),
    "glm-5": ("glm_moe_dsa", 743_911_199_232, 41_784_709_632),
}
V3 = 671_026_404_352  # DeepSeek-V3 (tests/test_presets_layers.py)
# wq_b, wk, k_norm (weight, bias), weights_proj
INDEXER_V32 = 1536 * 64 * 128 + 7168 * 128 + 2 * 128 + 7168 * 64
V3 = 671_026_404_352  # DeepSeek-V3 (tests/test_presets_layers.py)
# wq_b, wk, k_norm (weight, bias), weights_proj
INDEXER_V32 = 1536 * 64 * 128 + 7168 * 128 + 2 * 128 + 7168 * 64
# wq_b, wk, k_norm (weight, bias), weights_proj
INDEXER_V32 = 1536 * 64 * 128 + 7168 * 128 + 2 * 128 + 7168 * 64

SMALL = dict(
    hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4,
    vocab_size=128, max_position_embeddings=64, n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
    kv_lora_rank=16, q_lora_rank=24, qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8, first_k_dense_replace=1,
    n_group=1, topk_group=1, index_n_heads=2, index_head_dim=16, index_topk=6,
)  # fmt: skip


def _small(name: str, **extra: Any) -> dict[str, Any]:
    raw = raw_fixture(name) | SMALL | extra
    for key in ("quantization_config", "rope_scaling", "eos_token_id", "pad_token_id", "bos_token_id"):
        raw.pop(key, None)
    return raw


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_file_counts_the_published_size(name: str) -> None:
    _, total, active = PUBLISHED[name]
    config = load_target(str(HF_FIXTURES / f"{name}.json")).config
    assert count_params(config).total == total
    assert active_params(config) == active


def test_preset_is_deepseek_v3_plus_one_indexer_per_layer() -> None:
    config = load_target("deepseek-v3.2").config
    assert count_params(config).total == PUBLISHED["deepseek-v3.2"][1] == V3 + 61 * INDEXER_V32
    assert count_params(config).as_dict()["decoder/attention/index_k_norm"] == 61 * 2 * 128  # weight and bias
    hub = load_target(str(HF_FIXTURES / "deepseek-v3.2.json")).config
    w = Workload(seq_len=4096, gen_tokens=100)
    assert count_params(hub).as_dict() == count_params(config).as_dict()
    assert analytic_flops(hub, w).breakdown.as_dict() == analytic_flops(config, w).breakdown.as_dict()
    assert kv_cache_bytes(hub, w) == kv_cache_bytes(config, w) == 61 * 4196 * (512 + 64 + 128) * 4


@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_transformers_builds_the_published_size(transformers: Any, name: str) -> None:
    assert numel(hf_model(transformers, raw_fixture(name))) == PUBLISHED[name][1]


@pytest.mark.torch
@pytest.mark.parametrize("extra", [{"index_topk_freq": 2}, {"index_topk_pattern": "FFSS" * 19 + "FS"},
                                   {"indexer_types": ["full"] * 77 + ["shared"]}])  # fmt: skip
def test_glm5_shared_layers_have_no_indexer(transformers: Any, extra: dict[str, Any]) -> None:
    raw = raw_fixture("glm-5") | extra
    hf = hf_config(transformers, raw)
    shared = hf.indexer_types.count("shared")
    assert shared > 0
    config = mapped_config(raw)
    assert count_params(config).total == numel(hf_model(transformers, raw))
    indexer = 2048 * 32 * 128 + 6144 * 128 + 2 * 128 + 6144 * 32
    assert count_params(config).total == PUBLISHED["glm-5"][1] - shared * indexer


def _hf_cache_bytes(transformers: Any, raw: dict[str, Any], batch: int, length: int) -> int:
    import torch

    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(
        hf_config(transformers, raw), attn_implementation="eager", experts_implementation="eager"
    ).eval()
    with torch.no_grad():
        cache = model(input_ids=torch.zeros(batch, length, dtype=torch.long), use_cache=True).cache
    tensors = [getattr(layer, n) for layer in cache.layers for n in ("keys", "values", "indexer_keys")]
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


@pytest.mark.torch
@pytest.mark.parametrize(("name", "extra"),
                         [("deepseek-v3.2", {}), ("glm-5", {}), ("glm-5", {"index_topk_freq": 2})])  # fmt: skip
def test_kv_cache_is_what_transformers_caches(transformers: Any, name: str, extra: dict[str, Any]) -> None:
    raw = _small(name, **extra)
    config = mapped_config(raw)
    for length in (3, 10):  # under and over index_topk: the cache holds every token either way
        want = _hf_cache_bytes(transformers, raw, 2, length)
        assert kv_cache_bytes(config, Workload(batch_size=2, seq_len=length, dtype="bf16")) == want, length
    full = 3 if extra else 4  # index_topk_freq 2 from offset 2: layers 0, 1, 3 full, layer 2 shared
    per_token = 4 * (16 + 8) + full * 16  # latent + rope key per layer, indexer keys per full layer
    assert config.derived()["kv_cache_values_per_token"] == per_token


@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_forward_flops_equal_flop_counter_up_to_the_topk(transformers: Any, name: str) -> None:
    """transformers' eager core attends to all n keys (the unselected masked): equal while n <= k = 6, and beyond
    by exactly 2 b h layers (n² - n k) (qk + v) more."""
    import torch

    raw = _small(name)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(
        hf_config(transformers, raw), attn_implementation="eager", experts_implementation="eager"
    ).eval()
    config = mapped_config(raw)
    for n in (4, 6, 10):
        measured = forward_flops(model, batch=2, seq_len=n)
        masked = 2 * 2 * 4 * 4 * max(n * n - n * 6, 0) * (16 + 8)
        assert analytic_flops(config, Workload(batch_size=2, seq_len=n)).forward == measured - masked, n
