"""Zamba2 (issue 31): read natively onto the layer model's shared block (config/shared_spec.py), exact against
transformers' Zamba2ForCausalLM on the class defaults, small variants switching every option the reader maps, and
the two published shapes (tests/fixtures/hf/zamba2-*.json, their sources in tests/fixtures/published_sizes.yaml).

Parameters: the total against transformers' model on the meta device, and per component through ``verify
--checkpoint`` on what ``save_pretrained`` writes (every tensor placed, each component's count equal to the
analytic one). The KV cache of the hybrid layers and the Mamba-2 state of every layer against what transformers'
cache holds after a bf16 prefill and a decode step (the scan's state in float32). Forward FLOPs against
``FlopCounterMode`` on transformers' eager CPU path, less exactly the terms analysis/mixers.py documents for its
Mamba-2 torch path (the convolution's padded tail, the inter-chunk state passing as a matrix product).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hf_reference import (
    bf16_cache_and_estimate,
    forward_flops,
    hf_model,
    mapped_config,
    numel,
    raw_fixture,
)
from hf_reference import unaccounted_keys as unaccounted
from saved_checkpoint import verify_saved
from sources.hf.test_mixers_hf import torch_path_extra

from embedcalc.analysis.flops import forward_flops as analytic_flops
from embedcalc.analysis.params import count_params
from embedcalc.analysis.workload import Workload
from embedcalc.errors import ConfigError
from embedcalc.sources.hf import map_hf_config

SMALL = dict(hidden_size=64, num_hidden_layers=6, vocab_size=256, intermediate_size=96, num_attention_heads=4,
             n_mamba_heads=8, mamba_d_state=8, mamba_ngroups=2, chunk_size=8, max_position_embeddings=512,
             layers_block_type=["mamba", "hybrid", "mamba", "hybrid", "hybrid", "mamba"])  # fmt: skip
# the class keys that differ from its defaults: every option the reader maps
VARIANTS: dict[str, dict[str, Any]] = {
    "adapters-everywhere": SMALL | dict(num_mem_blocks=2, adapter_rank=8, use_shared_attention_adapter=True,
                                        use_mem_rope=True),
    "gqa-biased-one-set": SMALL | dict(num_key_value_heads=2, add_bias_linear=True, adapter_rank=4,
                                       intermediate_size=None),
    "more-sets-than-uses": SMALL | dict(num_mem_blocks=5, adapter_rank=4, mamba_expand=3, n_mamba_heads=6,
                                        mamba_d_conv=3, tie_word_embeddings=False),
    "no-adapters": SMALL | dict(adapter_rank=0, use_mem_rope=True, num_mem_blocks=2),
    "mamba-only": SMALL | dict(layers_block_type=["linear_attention"] * 6),
}  # fmt: skip


def _written(transformers: Any, **keys: Any) -> dict[str, Any]:
    """The config.json transformers writes for Zamba2Config with ``keys`` (every key, as ``to_dict()`` has it)."""
    raw: dict[str, Any] = transformers.CONFIG_MAPPING["zamba2"](**keys).to_dict()
    return raw


@pytest.mark.torch
def test_the_class_defaults_count_what_transformers_builds(transformers: Any) -> None:
    raw = _written(transformers)
    assert count_params(mapped_config(raw)).total == numel(hf_model(transformers, raw)) == 2_481_848_336
    assert unaccounted(raw) == set()


@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_each_variant_counts_what_transformers_builds(transformers: Any, name: str) -> None:
    raw = _written(transformers, **VARIANTS[name])
    assert count_params(mapped_config(raw)).total == numel(hf_model(transformers, raw))
    assert unaccounted(raw) == set()


@pytest.mark.parametrize("name", ["zamba2-2.7b", "zamba2-7b"])
def test_the_published_shapes_are_read_natively(cli: Any, write_config: Any, name: str) -> None:
    """analyze reads them through the native mapping (JSON reader), layer by layer: 9 / 13 hybrid layers, the
    shared block's two weight sets counted once, its KV cache in every hybrid layer."""
    raw = raw_fixture(name)
    result = cli("analyze", str(write_config(raw, "config.json")), "--format", "json", "--seq-len", "1")
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)["results"][0]
    assert out["reader"] == "native"
    hybrids = raw["layers_block_type"].count("hybrid")
    assert out["derived"]["mixer_layers"] == {
        "mamba2": raw["num_hidden_layers"] - hybrids,
        "shared+mamba2": hybrids,
    }
    # K and V of 32 heads of 2 x hidden / 32 per token in each hybrid layer
    assert out["derived"]["kv_cache_values_per_token"] == hybrids * 2 * 2 * raw["hidden_size"]
    breakdown = out["params"]["breakdown"]
    d = raw["hidden_size"]
    assert breakdown["decoder/attention/qkv"] == 2 * (2 * d) * (3 * 2 * d)  # two sets, q/k/v of 2d over 2d
    assert breakdown["decoder/shared/projection"] == hybrids * d * d


@pytest.mark.torch
@pytest.mark.parametrize("name", ["adapters-everywhere", "gqa-biased-one-set", "more-sets-than-uses"])
def test_the_kv_cache_and_state_are_what_transformers_cache_holds_at_bf16(
    transformers: Any, name: str
) -> None:
    """A bf16 prefill of 6 tokens and one decode step: the hybrid layers' K and V of 7 tokens, every layer's conv
    window (bf16) and scan state (float32). (A file without hybrid layers cannot decode in transformers 5.24: its
    cache's get_seq_length needs an attention layer.)"""
    import torch

    raw = _written(transformers, **VARIANTS[name])
    kv, recurrent, dtypes, memory = bf16_cache_and_estimate(transformers, raw)
    assert (kv, recurrent) == (memory.kv_cache_bytes, memory.recurrent_state_bytes)
    assert dtypes == {torch.float32}


@pytest.mark.torch
@pytest.mark.parametrize("name", ["adapters-everywhere", "gqa-biased-one-set"])
@pytest.mark.parametrize("seq_len", [5, 16])
def test_forward_flops_equal_transformers_torch_path(transformers: Any, name: str, seq_len: int) -> None:
    import torch

    raw = _written(transformers, **VARIANTS[name])
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(
        transformers.CONFIG_MAPPING["zamba2"].from_dict(raw), attn_implementation="eager"
    ).eval()
    b, config = 2, mapped_config(raw)
    ours = analytic_flops(config, Workload(batch_size=b, seq_len=seq_len)).forward
    assert forward_flops(model, batch=b, seq_len=seq_len) == ours + torch_path_extra(config, b, seq_len)


@pytest.mark.torch
@pytest.mark.parametrize("name", ["adapters-everywhere", "gqa-biased-one-set"])
def test_verify_checkpoint_places_every_tensor_of_a_saved_model(
    transformers: Any, cli: Any, tmp_path: Path, name: str
) -> None:
    """save_pretrained writes the shared blocks once (the tied uses are left out) with every use's adapters under
    the first layers: each tensor is placed, each component's stored count is the analytic one and analyze's."""
    import torch

    raw = _written(transformers, **VARIANTS[name])
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(
        transformers.CONFIG_MAPPING["zamba2"].from_dict(raw)
    )
    components = verify_saved(cli, model, tmp_path, buffers=False)
    # the adapters and projections are transformers' adapter lists and linear layers, use by use
    adapters = sum(p.numel() for n, p in model.named_parameters() if "_adapter_list" in n)
    assert (
        components.get("decoder/shared/attention_adapters", 0) + components["decoder/shared/ffn_adapters"]
        == adapters
    )
    assert components["decoder/shared/projection"] == sum(
        p.numel() for n, p in model.named_parameters() if n.endswith(".linear.weight")
    )


@pytest.mark.torch
def test_embedcalcs_torch_model_agrees_component_by_component(cli: Any, write_config: Any) -> None:
    """verify: embedcalc's own torch model of the mapped config (modeling/shared_block.py), analytic = torch."""
    path = write_config({"model_type": "zamba2", **VARIANTS["adapters-everywhere"]}, "config.json")
    result = cli("verify", str(path), "--seq-len", "12", "--format", "json")
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)["results"][0]
    assert out["agree"] is True and "decoder/shared/attention_adapters" in json.dumps(out)


@pytest.mark.parametrize(
    ("change", "key"),
    [
        (dict(num_key_value_heads=2, use_shared_attention_adapter=True), "use_shared_attention_adapter"),
        (dict(n_mamba_heads=7), "n_mamba_heads"),
        (
            dict(layers_block_type=["mamba", "attention", "mamba", "hybrid", "hybrid", "mamba"]),
            "layers_block_type",
        ),
        (dict(num_mem_blocks=0), "num_mem_blocks"),
        (dict(mamba_headdim=9), "mamba_headdim"),
        (dict(mamba_expand=float("nan")), "mamba_expand"),
    ],
)
def test_a_file_it_cannot_map_is_refused_naming_the_key(change: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        map_hf_config({"model_type": "zamba2", **SMALL, **change}, "test")
    assert key in str(info.value)


def test_keys_the_class_computes_are_checked_and_the_dead_ones_ignored() -> None:
    raw = {"model_type": "zamba2", **SMALL, "attention_head_dim": 32, "hybrid_layer_ids": [1, 3, 4],
           "use_conv_bias": False, "kv_channels": 16}  # fmt: skip
    report = map_hf_config(raw, "test").report
    reasons = {i.key: i.reason for i in report.ignored}
    assert "2 x hidden_size // num_attention_heads" in reasons["attention_head_dim"]
    assert "conv1d with a bias" in reasons["use_conv_bias"]
    # the published files' use_shared_mlp_adapter (no longer declared): true is what transformers builds, false warned
    quiet = map_hf_config({**raw, "use_shared_mlp_adapter": True}, "test").report
    assert "adapter_rank is positive" in {i.key: i.reason for i in quiet.ignored}["use_shared_mlp_adapter"]
    assert quiet.ignored_keys == []
    warned = map_hf_config({**raw, "use_shared_mlp_adapter": False}, "test").report.ignored_keys
    assert [i.key for i in warned] == ["use_shared_mlp_adapter"]
    with pytest.raises(ConfigError, match="hybrid_layer_ids"):
        map_hf_config({**raw, "hybrid_layer_ids": [1]}, "test")
