"""Gemma 3n text models from their hub files (transformers 5.24 ``Gemma3nTextConfig`` / ``Gemma3nForCausalLM``).

Fixtures (no network here, so written by hand in the hub files' layout, ``model_type: gemma3n`` with the text model in
``text_config`` beside ``audio_config`` / ``vision_config``, which are not counted):

- ``gemma-3n-e4b.json``: google/gemma-3n-E4B's text_config: 35 layers, hidden_size 2048, intermediate_size
  [16384] x 35, 8 heads / 2 KV heads of 256, every fifth layer full (the layer_types list), sliding_window 512,
  num_kv_shared_layers 15, per-layer embeddings 256 over a 262,144-row table, vocab 262,400, altup_num_inputs 4,
  laurel_rank 64, activation sparsity 0.95 on the first 10 layers;
- ``gemma-3n-e2b.json``: google/gemma-3n-E2B's: the same but 30 layers, intermediate_size [8192] x 30 and 10
  KV-sharing layers.

Every value not named above is Gemma3nTextConfig's default (which is E4B's shape: its docstring's checkpoint is
google/gemma-3n-E4B); the keys transformers 4.53 wrote and 5.24 no longer declares (``altup_lr_multiplier``,
``query_pre_attn_scalar``, ``rope_theta``, ``rope_local_base_freq``, ``rope_scaling``) are kept as the hub files have
them. The totals are pinned in published_sizes.yaml and checked against transformers' Gemma3nForCausalLM on the meta
device there (E4B 6,835,235,568, E2B 4,435,182,688), their KV cache per layer (``kv_sharing_modes``) in
test_kv_sharing.py; here: every key accounted for, a small variant's parameters and forward FLOPs against both
transformers and embedcalc's torch model, the default files, and what is refused.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hf_reference import fixture_path, hf_config, published, raw_fixture, unaccounted_keys
from pydantic import ValidationError

from embedcalc.analysis.params import count_params
from embedcalc.analysis.workload import Workload
from embedcalc.config.schema import ModelConfig
from embedcalc.errors import ConfigError
from embedcalc.sources.hf import map_hf_config
from embedcalc.sources.loading import load_target

PUBLISHED = published("test_hf_gemma3n")


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_report_accounts_for_every_key(name: str) -> None:
    assert not unaccounted_keys(raw_fixture(name))


def test_the_e4b_file_maps_to_altup_laurel_and_shared_layers() -> None:
    config = load_target(str(fixture_path("gemma-3n-e4b"))).config
    assert (config.altup_inputs, config.laurel_rank, config.per_layer_input_dim) == (4, 64, 256)
    assert config.ffn_dim == 16384 and config.num_layers == 35
    shared = [b.attention.kv_shared for b in config.stack_plan("decoder").blocks if b.attention]
    assert config.layers is not None and sum(r.repeat * len(r.pattern) for r in config.layers) == 35
    assert any(shared) and not all(shared)


@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_the_torch_model_of_the_file_counts_as_the_analyzer(name: str) -> None:
    """embedcalc's own torch model of the full-size file (meta device), component by component."""
    from embedcalc.modeling import build_model
    from embedcalc.modeling.counting import component_params

    config = load_target(str(fixture_path(name))).config
    assert component_params(build_model(config)) == dict(count_params(config).items())


# every part at once: AltUp of 3 copies, Laurel, per-layer MLP widths, 2 KV-sharing layers, PLE over a smaller table
_TINY = dict(vocab_size=256, hidden_size=64, intermediate_size=[96, 96, 128, 96], num_hidden_layers=4,
             num_attention_heads=4, num_key_value_heads=2, head_dim=16, sliding_window=8,
             layer_types=["sliding_attention", "full_attention"] * 2, hidden_size_per_layer_input=8,
             vocab_size_per_layer_input=200, num_kv_shared_layers=2, altup_num_inputs=3, laurel_rank=4,
             activation_sparsity_pattern=[0.95, 0.0, 0.0, 0.0], max_position_embeddings=64,
             model_type="gemma3n_text")  # fmt: skip


@pytest.mark.torch
def test_a_tiny_variant_equals_transformers_and_the_torch_model(hf_transformers: Any) -> None:
    """Parameters analytic = embedcalc's torch model (per component) = Gemma3nForCausalLM (meta); forward FLOPs
    analytic = embedcalc's torch model (eager) = transformers' eager forward on the CPU (FlopCounterMode). The
    gaussian top-k of the sparse layer adds no matmul: its MLP is counted dense, as it runs."""
    import torch
    from hf_reference import forward_flops as hf_forward_flops

    from embedcalc.analysis.flops import forward_flops
    from embedcalc.modeling import build_model
    from embedcalc.modeling.counting import component_flops, component_params

    config = ModelConfig.model_validate(map_hf_config(_TINY, "tiny").data)
    hf = hf_config(hf_transformers, _TINY)
    with torch.device("meta"):
        meta = hf_transformers.Gemma3nForCausalLM(hf)
    assert component_params(build_model(config)) == dict(count_params(config).items())
    assert count_params(config).total == sum(p.numel() for p in meta.parameters())
    for batch, length in ((1, 5), (2, 12)):
        analytic = forward_flops(config, Workload(batch_size=batch, seq_len=length))
        assert component_flops(config, batch_size=batch, seq_len=length, attention="eager") == dict(
            analytic.breakdown.items()
        )
        torch.manual_seed(0)
        model = hf_transformers.AutoModelForCausalLM.from_config(hf, attn_implementation="eager").eval()
        assert hf_forward_flops(model, batch, length) == analytic.forward


@pytest.mark.torch
def test_the_default_files_count_the_default_text_model(hf_transformers: Any, write_config: Any) -> None:
    """Gemma3nConfig().to_dict() (text_config beside the audio and vision configs) and its text_config alone count
    as Gemma3nForCausalLM of Gemma3nTextConfig() on the meta device."""
    import torch

    outer = hf_transformers.Gemma3nConfig().to_dict()
    with torch.device("meta"):
        model = hf_transformers.Gemma3nForCausalLM(hf_transformers.Gemma3nTextConfig())
    expected = sum(p.numel() for p in model.parameters())
    for raw in (outer, outer["text_config"]):
        config = load_target(str(write_config(json.dumps(raw, default=str), "config.json"))).config
        assert count_params(config).total == expected


def test_a_bare_model_type_reads_the_class_defaults(write_config: Any) -> None:
    config = load_target(str(write_config({"model_type": "gemma3n_text"}, "config.json"))).config
    assert (config.num_layers, config.altup_inputs, config.laurel_rank, config.ffn_dim) == (35, 4, 64, 16384)


def test_a_width_list_of_the_wrong_length_is_refused_naming_the_key() -> None:
    raw = copy.deepcopy(raw_fixture("gemma-3n-e2b"))
    raw["text_config"]["intermediate_size"] = [8192] * 29
    with pytest.raises(ConfigError, match="intermediate_size must be a positive integer or a list of 30"):
        map_hf_config(raw, "test")


def test_a_sparsity_list_of_the_wrong_length_is_refused_naming_the_key() -> None:
    raw = copy.deepcopy(raw_fixture("gemma-3n-e2b"))
    raw["text_config"]["activation_sparsity_pattern"] = [0.95] * 3
    with pytest.raises(
        ConfigError, match=r"activation_sparsity_pattern must give one sparsity per layer \(30"
    ):
        map_hf_config(raw, "test")


_FLAT = dict(architecture="decoder", vocab_size=64, max_seq_len=16, embed_dim=16, num_heads=2, num_layers=2,
             norm="rmsnorm")  # fmt: skip


@pytest.mark.parametrize(
    ("extra", "code"),
    [
        ({"architecture": "encoder", "altup_inputs": 4}, "altup_needs_decoder"),
        ({"altup_inputs": 1}, "greater_than_equal"),
        ({"architecture": "encoder", "laurel_rank": 4}, "laurel_needs_decoder"),
        ({"norm_placement": "post", "laurel_rank": 4}, "laurel_needs_pre_norm"),
    ],
)
def test_schema_refuses_what_the_parts_cannot_be(extra: dict[str, Any], code: str) -> None:
    with pytest.raises(ValidationError) as caught:
        ModelConfig.model_validate(_FLAT | extra)
    (error,) = caught.value.errors()
    assert error["type"] == code
    assert error["loc"][0] in extra
