"""Gemma 4's assistant (transformers 5.24/5.25 ``Gemma4AssistantConfig`` / ``Gemma4AssistantForCausalLM``), read
natively: every layer attends to the target's keys and values (``kv_external``), ``pre_projection`` /
``post_projection`` (``input_projection_dim`` / ``output_projection_dim``) and, with ``use_ordered_embeddings``, the
centroid-masked head (``head_centroids``, ``head_centroid_top_k``).

Compared with transformers on small variants: parameters per component (its tensor names placed as
``verify --checkpoint`` places them) and in total; the forward's FLOPs: transformers' own forward run on the CPU
(eager attention) with what the target would hand over, ``inputs_embeds`` of 2 x backbone_hidden_size and
``shared_kv_states`` of every position, counted by ``FlopCounterMode``, in total and for the projections and the
head module by module; the cache: transformers' ``DynamicCache`` for the text config holds a ``DummyLayer`` for
every layer, and embedcalc's KV cache is 0 bytes. transformers 5.24's forward fails on a multi-token input unless it
keeps every position (``_maybe_slice_kv_shared_inputs`` subscripts ``per_layer_inputs``, None here; fixed in 5.25):
``output_hidden_states=True`` keeps them in both, and changes no FLOP.

Fixtures: ``gemma-4-e2b-assistant.json`` and ``gemma-4-31b-assistant.json`` are google/gemma-4-E2B-it-assistant's
and google/gemma-4-31B-it-assistant's config.json as tabulated, field by field, in john-rocky/CoreML-LLM's
docs/GEMMA4_MTP_OFFICIAL_KB.md (commit 93d2bd9, "verified from config.json of each repo"; the hub itself is not
reachable here), with ``vocab_size_per_layer_input: 0``, which the table leaves out and transformers'
``validate_architecture`` requires. The model cards round their sizes to 78 M and ~0.5 B (same document, §1.4).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hf_reference import fixture_path, mapped_config, raw_fixture, unaccounted_keys
from saved_checkpoint import verify_saved

from embedcalc.analysis.flops import forward_flops
from embedcalc.analysis.memory import kv_cache_bytes
from embedcalc.analysis.params import count_params
from embedcalc.analysis.workload import Workload
from embedcalc.errors import ConfigError
from embedcalc.reconcile.checkpoint_names import tensor_role
from embedcalc.sources.hf import map_hf_config

FIXTURES = ("gemma-4-e2b-assistant", "gemma-4-31b-assistant")
TOTALS = {"gemma-4-e2b-assistant": 77_731_328, "gemma-4-31b-assistant": 469_518_592}
_TEXT: dict[str, Any] = dict(
    model_type="gemma4_text", hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
    num_key_value_heads=2, head_dim=16, global_head_dim=32, vocab_size=128, hidden_size_per_layer_input=0,
    vocab_size_per_layer_input=0, sliding_window=8,
)  # fmt: skip
_SMALL: dict[str, Any] = dict(
    model_type="gemma4_assistant", backbone_hidden_size=96, use_ordered_embeddings=True, num_centroids=8,
    centroid_intermediate_top_k=2, text_config=_TEXT,
)  # fmt: skip
VARIANTS: dict[str, dict[str, Any]] = {
    "masked head": _SMALL,
    "plain head": {**_SMALL, "use_ordered_embeddings": False},
    # 26B/31B's drafters: the full layers' own key/value heads and values from keys (no projection of them here)
    "k_eq_v, layer pattern": {**_SMALL, "text_config": {
        **_TEXT, "attention_k_eq_v": True, "num_global_key_value_heads": 1, "num_hidden_layers": 6,
        "layer_types": ["sliding_attention", "full_attention"] * 3}},
    "untied head": {**_SMALL, "tie_word_embeddings": False},
}  # fmt: skip
B, N = 2, 12


def _hf_config(transformers: Any, raw: dict[str, Any]) -> Any:
    config = transformers.CONFIG_MAPPING["gemma4_assistant"].from_dict(copy.deepcopy(raw))
    config._attn_implementation = "eager"
    return config


def _placed(model: Any) -> dict[str, int]:
    """transformers' parameters per embedcalc key, each name placed as verify --checkpoint places it."""
    out: dict[str, int] = {}
    for name, param in model.named_parameters():
        key = tensor_role(name, "decoder", sandwich=True).key
        assert key is not None, name
        out[key] = out.get(key, 0) + param.numel()
    return out


@pytest.mark.parametrize("name", FIXTURES)
def test_published_shapes_are_read_with_every_key_accounted_for(name: str) -> None:
    raw = raw_fixture(name)
    assert not unaccounted_keys(raw, name)
    config = mapped_config(raw)
    assert count_params(config).total == TOTALS[name]
    assert kv_cache_bytes(config, Workload(batch_size=1, seq_len=4096)) == 0


@pytest.mark.torch
@pytest.mark.parametrize("name", FIXTURES)
def test_published_shapes_equal_transformers(transformers: Any, name: str) -> None:
    import torch

    with torch.device("meta"):
        model = transformers.Gemma4AssistantForCausalLM(_hf_config(transformers, raw_fixture(name)))
    ours = count_params(mapped_config(raw_fixture(name)))
    assert _placed(model) == {k: v for k, v in ours.items() if v}
    assert sum(p.numel() for p in model.parameters()) == TOTALS[name]


@pytest.mark.torch
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_params_flops_and_cache_equal_transformers(transformers: Any, variant: str) -> None:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    raw = VARIANTS[variant]
    hf = _hf_config(transformers, raw)
    torch.manual_seed(0)
    model = transformers.Gemma4AssistantForCausalLM(hf).eval()
    config = mapped_config(raw)
    params = count_params(config)
    assert _placed(model) == {k: v for k, v in params.items() if v}
    assert sum(p.numel() for p in model.parameters()) == params.total
    text = hf.text_config
    shared = {}
    for kind in ("full_attention", "sliding_attention"):
        layer = text.per_layer_config[text.layer_types.index(kind)]
        shape = (B, layer.num_key_value_heads, N, layer.head_dim)
        shared[kind] = (torch.randn(shape), torch.randn(shape))
    inputs = torch.randn(B, N, 2 * raw["backbone_hidden_size"])
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        out = model(inputs_embeds=inputs, shared_kv_states=shared, position_ids=torch.arange(N)[None],
                    output_hidden_states=True)  # fmt: skip
    assert out.last_hidden_state.shape == (B, N, raw["backbone_hidden_size"])
    ours = forward_flops(config, Workload(batch_size=B, seq_len=N)).breakdown.as_dict()
    assert int(counter.get_total_flops()) == sum(ours.values())
    by_module = {k.rsplit(".", 1)[-1]: sum(v.values()) for k, v in counter.get_flop_counts().items()}
    assert by_module["pre_projection"] == ours["embedding/input_projection"]
    assert by_module["post_projection"] == ours["head/output_projection"]
    head = by_module["masked_embedding"] if raw["use_ordered_embeddings"] else by_module["lm_head"]
    assert head == ours["head/lm"] + ours.get("head/centroids", 0)
    layers = by_module["model"]
    assert layers == sum(v for k, v in ours.items() if k.startswith("decoder/"))
    # no cache of its own: transformers' cache for the text model is a DummyLayer per layer, embedcalc's 0 bytes
    assert all(transformers.DynamicCache(config=text).is_dummy)
    assert kv_cache_bytes(config, Workload(batch_size=B, seq_len=N)) == 0


@pytest.mark.torch
def test_verify_checkpoint_places_every_tensor_of_a_saved_model(
    transformers: Any, cli: Any, tmp_path: Path
) -> None:
    """save_pretrained writes pre_projection, post_projection, masked_embedding.centroids and the token_ordering
    buffer beside the text model's tensors (no k/v projections): every one is placed, the buffer as a buffer."""
    import torch

    torch.manual_seed(0)
    model = transformers.Gemma4AssistantForCausalLM(_hf_config(transformers, _SMALL))
    verify_saved(cli, model, tmp_path)


def _refused(raw: dict[str, Any]) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        map_hf_config(raw, "test")
    return caught.value


def test_the_default_config_is_refused_as_transformers_refuses_it() -> None:
    """Gemma4AssistantConfig's default text config has per-layer embeddings of 256 and a per-layer table, which its
    validate_architecture refuses: transformers builds no model from it, and neither file is counted."""
    error = _refused({"model_type": "gemma4_assistant"})
    message = str(error)
    assert "hidden_size_per_layer_input = 256 (Gemma4TextConfig's default)" in message
    assert "vocab_size_per_layer_input = 262144" in message
    assert error.code == "invalid_config"


@pytest.mark.parametrize(
    ("change", "words"),
    [({"num_kv_shared_layers": 2}, "All layers in a Gemma 4 Assistant models must be shared"),
     ({"enable_moe_block": True}, "enable_moe_block must be False"),
     ({"use_double_wide_mlp": True}, "use_double_wide_mlp must be False"),
     ({"model_type": "gemma3_text"}, "builds a gemma4_text model")],
)  # fmt: skip
def test_what_transformers_refuses_is_refused_naming_the_key(change: dict[str, Any], words: str) -> None:
    raw = {**_SMALL, "text_config": {**_TEXT, **change}}
    assert words in str(_refused(raw))


def test_a_falsy_kv_sharing_count_means_every_layer() -> None:
    """Gemma4AssistantConfig.__post_init__ turns num_kv_shared_layers 0 into num_hidden_layers: the same model."""
    raw = {**_SMALL, "text_config": {**_TEXT, "num_kv_shared_layers": 0}}
    assert count_params(mapped_config(raw)).total == count_params(mapped_config(_SMALL)).total
    ignored = {i.key: i.reason for i in map_hf_config(raw, "test").report.ignored}
    assert "num_hidden_layers (4)" in ignored["text_config.num_kv_shared_layers"]


def test_published_file_is_counted_from_the_cli(cli: Any) -> None:
    result = cli(
        "analyze",
        str(fixture_path("gemma-4-e2b-assistant")),
        "--batch-size",
        "2",
        "--seq-len",
        "64",
        "--format",
        "json",
    )
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)["results"][0]
    assert data["reader"] == "native" and data["params"]["total"] == TOTALS["gemma-4-e2b-assistant"]
    breakdown = data["params"]["breakdown"]
    assert breakdown["embedding/input_projection"] == 2 * 1536 * 256
    assert breakdown["head/output_projection"] == 256 * 1536
    assert breakdown["head/centroids"] == 256 * 2048
    flops = data["flops"]["breakdown"]
    assert flops["head/lm"] == 2 * (2 * 64) * 256 * 32 * 128  # 32 of 2048 clusters of 128 tokens each
