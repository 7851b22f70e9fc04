"""The layer-model parts Gemma 4 brings (issue 23; transformers 5.24 ``modeling_gemma4.py``): per-block head_dim and
num_kv_heads (its full-attention layers), values from keys (``attention_k_eq_v``), layers that reuse an earlier
layer's keys and values (``num_kv_shared_layers``: no K/V projections, no key norm, no KV cache), per-layer
embeddings (``hidden_size_per_layer_input``) and a wider FFN in the sharing layers (``use_double_wide_mlp``).

One tiny config written in embedcalc's schema and the same shape as transformers' ``Gemma4TextConfig`` (every
feature on): parameters equal three ways (analytic, embedcalc's torch model, ``Gemma4ForCausalLM`` on the meta
device), FLOPs equal analytic vs torch and vs transformers' eager forward, and the KV cache equals what
transformers' ``DynamicCache`` holds after a prompt (the sharing layers hold nothing).
"""

from __future__ import annotations

from typing import Any

import pytest
from hf_reference import fixture_path, hf_config, published, raw_fixture, shared_kv_cache
from pydantic import ValidationError

from embedcalc.analysis.flops import forward_flops
from embedcalc.analysis.memory import kv_cache_bytes
from embedcalc.analysis.params import count_params
from embedcalc.analysis.workload import Workload
from embedcalc.config.schema import ModelConfig
from embedcalc.sources.loading import load_target

FULL = {"sliding_window": None, "head_dim": 32, "num_kv_heads": 1, "values_from_keys": True}
TINY: dict[str, Any] = {
    "name": "tiny-gemma4", "architecture": "decoder", "vocab_size": 1024, "max_seq_len": 256, "embed_dim": 64,
    "num_heads": 4, "num_kv_heads": 2, "head_dim": 16, "num_layers": 6, "ffn_dim": 128, "activation": "geglu",
    "norm": "rmsnorm", "norm_placement": "sandwich", "position": "rope", "bias": False, "tie_embeddings": True,
    "scale_embeddings": True, "per_layer_input_dim": 8, "per_layer_vocab_size": 500,
    "attention": {"qk_norm": "head", "sliding_window": 32},
    "blocks": {
        "full": {"attention": FULL},
        "shared_local": {"attention": {"kv_shared": True}, "ffn": {"ffn_dim": 256}},
        "shared_full": {"attention": {**FULL, "kv_shared": True}, "ffn": {"ffn_dim": 256}},
    },
    "layers": [{"pattern": ["default", "full", "default", "full", "shared_local", "shared_full"]}],
}  # fmt: skip
# the same model as transformers' Gemma4TextConfig: sliding/full alternating, the last two layers share K/V
HF = dict(vocab_size=1024, hidden_size=64, intermediate_size=128, num_hidden_layers=6, num_attention_heads=4,
          num_key_value_heads=2, head_dim=16, global_head_dim=32, num_global_key_value_heads=1,
          attention_k_eq_v=True, sliding_window=32, layer_types=["sliding_attention", "full_attention"] * 3,
          hidden_size_per_layer_input=8, vocab_size_per_layer_input=500, num_kv_shared_layers=2,
          use_double_wide_mlp=True, max_position_embeddings=256)  # fmt: skip


def _hf_model(transformers: Any, device: str) -> Any:
    import torch

    config = transformers.Gemma4TextConfig(**HF)
    with torch.device(device):
        model = transformers.Gemma4ForCausalLM._from_config(config, attn_implementation="eager")
    return model.eval()


@pytest.mark.torch
def test_params_equal_the_torch_model_and_transformers(hf_transformers: Any) -> None:
    from embedcalc.modeling import build_model
    from embedcalc.modeling.counting import component_params

    config = ModelConfig.model_validate(TINY)
    analytic = count_params(config)
    assert component_params(build_model(config)) == dict(analytic.items())
    expected = sum(p.numel() for p in _hf_model(hf_transformers, "meta").parameters())
    assert analytic.total == expected == 383_608  # measured on transformers 5.24


@pytest.mark.torch
def test_flops_equal_the_torch_model_and_transformers_eager(hf_transformers: Any) -> None:
    from hf_reference import forward_flops as hf_forward_flops

    from embedcalc.modeling.counting import component_flops

    config = ModelConfig.model_validate(TINY)
    workload = Workload(batch_size=2, seq_len=24)
    analytic = forward_flops(config, workload)
    assert component_flops(config, batch_size=2, seq_len=24, attention="eager") == dict(
        analytic.breakdown.items()
    )
    # transformers on the CPU, eager: the same matmuls (its softcapping, norms and scalars are element-wise)
    assert hf_forward_flops(_hf_model(hf_transformers, "cpu"), 2, 24) == analytic.forward


@pytest.mark.torch
def test_kv_cache_is_what_transformers_allocates(hf_transformers: Any) -> None:
    import torch

    config = ModelConfig.model_validate(TINY)
    model = _hf_model(hf_transformers, "cpu")
    tokens = 20  # within the window: every cached layer keeps the prompt
    with torch.no_grad():
        out = model(torch.zeros(1, tokens, dtype=torch.long), use_cache=True)
    held = [layer for layer in out.past_key_values.layers if getattr(layer, "keys", None) is not None]
    measured = sum(t.numel() * t.element_size() for layer in held for t in (layer.keys, layer.values))
    assert len(held) == 4  # the two sharing layers hold no cache (transformers' DummyLayer)
    assert kv_cache_bytes(config, Workload(batch_size=1, seq_len=tokens)) == measured
    # sliding layers 2 x 2 heads x 16, full layers 2 x 1 head x 32, fp32, two of each
    assert measured == tokens * 4 * (2 * (2 * 2 * 16) + 2 * (2 * 1 * 32))


def _refused(data: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as caught:
        ModelConfig.model_validate(data)
    return str(caught.value)


def test_a_sharing_layer_needs_an_earlier_producer_of_its_shape() -> None:
    data = {**TINY, "layers": [{"pattern": ["default", "shared_full", "default", "full", "full", "full"]}]}
    assert "blocks.shared_full.attention.kv_shared: layer 1" in _refused(data)


def test_block_kv_heads_must_divide_the_heads() -> None:
    data = {**TINY, "blocks": {**TINY["blocks"], "full": {"attention": {**FULL, "num_kv_heads": 3}}}}
    assert "blocks.full.attention.num_kv_heads (3) must divide num_heads (4)" in _refused(data)


def test_per_layer_embeddings_need_a_decoder() -> None:
    data = {k: v for k, v in TINY.items() if k not in ("blocks", "layers", "attention")}
    assert "per_layer_input_dim (8)" in _refused({**data, "architecture": "encoder"})
    assert "per_layer_vocab_size (500)" in _refused({**data, "per_layer_input_dim": None})


def test_standard_only_fields_are_refused_under_mla() -> None:
    mla = {"kind": "mla", "kv_lora_rank": 8, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 8}
    data = {k: v for k, v in TINY.items() if k not in ("blocks", "layers")}
    assert "attention.kv_shared (true) applies to kind standard" in _refused(
        {**data, "attention": {**mla, "kv_shared": True}}
    )


KV_SHARING_FILES = sorted([*published("test_hf_gemma4"), *published("test_hf_gemma3n")])


@pytest.mark.torch
@pytest.mark.parametrize("name", KV_SHARING_FILES)
def test_kv_cache_of_the_hub_files_equals_transformers_layout(hf_transformers: Any, name: str) -> None:
    """The Gemma 4 and Gemma 3n fixtures' KV cache at 1, 1000 and 8192 tokens (bf16) = the bytes transformers'
    DynamicCache lays out from its config (``kv_sharing_modes``, Gemma 4's ``per_layer_config``)."""
    cfg = hf_config(hf_transformers, raw_fixture(name))
    config = load_target(str(fixture_path(name))).config
    for tokens in (1, 1000, 8192):
        assert kv_cache_bytes(config, Workload(seq_len=tokens, dtype="bf16")) == shared_kv_cache(
            cfg, tokens, 2
        )
