"""Mistral Large 4's text model (``families/mistral_large4.py``: ``mistral_large4_text``, and ``mistral_large4``
files' ``text_config``) against the model transformers builds: small files written by ``MistralLarge4TextConfig``
(NoPE layers, the indexer's shared selections, dense and MoE layers), the same keys as written by hand and the
multimodal wrapper's. transformers has no causal-LM class for the text config: the reference is
``MistralLarge4ForConditionalGeneration`` less its vision tower and projector (text ids only, so they do not run).
The parameter total equals its numel on the meta device (the default 1T shape too), the active count the total less
the routed experts a token skips, the KV cache the bytes transformers' own cache holds after a forward (each
layer's latent and rope key, and its indexer's keys), every key is mapped or ignored with a reason, and forward
FLOPs equal ``FlopCounterMode`` on an eager CPU build while n <= index_topk (as for DeepSeek-V3.2).
"""

from __future__ import annotations

from typing import Any

import pytest
from hf_reference import forward_flops, mapped_config, quiet_transformers, unaccounted_keys

from embedcalc.analysis.flops import forward_flops as analytic_flops
from embedcalc.analysis.memory import kv_cache_bytes
from embedcalc.analysis.params import active_params, count_params
from embedcalc.analysis.workload import Workload
from embedcalc.errors import ConfigError
from embedcalc.sources.hf import map_hf_config

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def transformers() -> Any:
    pytest.importorskip("torch")
    return quiet_transformers()


_SMALL = dict(vocab_size=256, hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=4,
              num_attention_heads=4, num_key_value_heads=4, n_routed_experts=4, num_experts_per_tok=2,
              kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16, index_n_heads=2,
              index_head_dim=16, index_topk=8, max_position_embeddings=256)  # fmt: skip
VARIANTS: dict[str, dict[str, Any]] = {
    "default_layout": _SMALL,
    "shared_selection_nope": _SMALL | dict(indexer_types=["full", "shared", "full", "shared"],
                                           no_rope_layers=[1, 0, 0, 1], n_shared_experts=2,
                                           mlp_layer_types=["dense", "sparse", "dense", "sparse"]),
    "interval_two_tied": _SMALL | dict(no_rope_layer_interval=2, first_k_dense_replace=2, tie_word_embeddings=True),
}  # fmt: skip
_VISION = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, image_size=28,
               patch_size=14, head_dim=16)  # fmt: skip


def _wrapper(transformers: Any, kwargs: dict[str, Any]) -> Any:
    text = transformers.MistralLarge4TextConfig(**kwargs)
    tie = kwargs.get("tie_word_embeddings", False)
    return text, transformers.MistralLarge4Config(text_config=text.to_dict(), vision_config=_VISION,
                                                  tie_word_embeddings=tie)  # fmt: skip


def _text_params(model: Any) -> int:
    return sum(p.numel() for n, p in model.named_parameters() if "language_model" in n or "lm_head" in n)


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_counts_what_transformers_builds(transformers: Any, name: str) -> None:
    import torch

    text, wrapper = _wrapper(transformers, VARIANTS[name])
    with torch.device("meta"):
        total = _text_params(transformers.MistralLarge4ForConditionalGeneration(wrapper))
    expert = 3 * text.hidden_size * text.moe_intermediate_size
    unused = (
        text.mlp_layer_types.count("sparse") * (text.n_routed_experts - text.num_experts_per_tok) * expert
    )
    torch.manual_seed(0)
    model = transformers.MistralLarge4ForConditionalGeneration._from_config(wrapper).eval()
    with torch.no_grad():
        cache = model(torch.randint(0, 256, (2, 7)), use_cache=True).past_key_values
    kv = sum(t.numel() * t.element_size() for layer in cache.layers
             for t in (layer.keys, layer.values, getattr(layer, "indexer_keys", None)) if t is not None)  # fmt: skip
    hand = {"model_type": "mistral_large4_text", **VARIANTS[name]}
    for raw in (text.to_dict(), hand, wrapper.to_dict()):
        ours = mapped_config(raw)
        assert count_params(ours).total == total
        assert active_params(ours) == total - unused
        assert kv_cache_bytes(ours, Workload(batch_size=2, seq_len=7, dtype="float32")) == kv
        if "text_config" not in raw:  # the wrapper's report names the text file's keys, checked here
            assert unaccounted_keys(raw) == set()


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_forward_flops_equal_flop_counter(transformers: Any, name: str) -> None:
    import torch

    text, wrapper = _wrapper(transformers, VARIANTS[name])
    torch.manual_seed(0)
    model = transformers.MistralLarge4ForConditionalGeneration._from_config(
        wrapper, attn_implementation="eager", experts_implementation="eager"
    ).eval()
    measured = forward_flops(model, batch=2, seq_len=8)  # 8 = index_topk: every key selected
    assert (
        analytic_flops(mapped_config(text.to_dict()), Workload(batch_size=2, seq_len=8)).forward == measured
    )


def test_the_default_shape_is_what_transformers_builds(transformers: Any) -> None:
    """MistralLarge4TextConfig's defaults (Mistral-Large-4-1T-A52B): 1,050,118,202,912 parameters, as transformers
    builds the language model and LM head on the meta device."""
    import torch

    text = transformers.MistralLarge4TextConfig()
    with torch.device("meta"):
        model = transformers.MistralLarge4ForConditionalGeneration(
            transformers.MistralLarge4Config(text_config=text.to_dict())
        )
    assert count_params(mapped_config(text.to_dict())).total == _text_params(model) == 1_050_118_202_912


def test_cross_layer_kv_sharing_is_refused() -> None:
    """A layer reading an earlier layer's latent KV (kv_source_layers) has no kv_a of its own: named, not guessed."""
    raw = {"model_type": "mistral_large4_text", **_SMALL, "kv_source_layers": [0, 0, 2, 2]}
    with pytest.raises(ConfigError) as info:
        map_hf_config(raw, "test")
    assert [p.path for p in info.value.problems] == ["kv_source_layers"]
