"""Issue 31's families that are (near-)aliases of decoders embedcalc reads, against the models transformers builds:
Ministral 3 (Mistral's layers), GLM-4.7-Flash (``glm4_moe_lite``: MLA and GLM-4.5's MoE) and the text models of
Qwen2-VL, Qwen3-VL-MoE, GLM-4.1V and GLM-4.5V (``sources/hf/families/vl_text.py``).

Each file is written here by transformers' own config class (small dimensions, then ``to_dict()``), and the model is
built from it on the meta device: the parameter total equals transformers' numel (vision tower excluded), the active
count equals the total less the routed experts a token skips (by hand from the config object), the KV cache equals
the per-layer sum read off transformers' config, every key of the file is mapped or ignored with a reason, and
forward FLOPs equal ``FlopCounterMode`` on an eager build (text-only input ids).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from hf_reference import forward_flops, kv_cache_formula, mapped_config, quiet_transformers, unaccounted_keys

from embedcalc.analysis.flops import forward_flops as analytic_flops
from embedcalc.analysis.memory import kv_cache_bytes
from embedcalc.analysis.params import active_params, count_params
from embedcalc.analysis.workload import Workload
from embedcalc.sources.hf import map_hf_config
from embedcalc.sources.hf.registry import OUTER_TIE, TEXT_WITHOUT_POOLER


@pytest.fixture(scope="module")
def transformers() -> Any:
    pytest.importorskip("torch")
    return quiet_transformers()


_TEXT = dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=256)  # fmt: skip
_MOE = dict(moe_intermediate_size=32, num_experts_per_tok=2)


def _mrope(section: list[int]) -> dict[str, Any]:
    """Multimodal RoPE sections that fit the small head_dim (their sum is half the rotary width)."""
    return {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": section}}


_VISION = {
    "qwen2_vl": dict(depth=1, embed_dim=32, hidden_size=64, num_heads=2, mlp_ratio=2),
    "qwen3_vl_moe": dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64,
                         deepstack_visual_indexes=[0]),
    "glm4v": dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64),
    "glm4v_moe": dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64),
}  # fmt: skip
# wrapper model_type -> (outer config class, model class, text config for it)
_WRAPPERS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "qwen2_vl": ("Qwen2VLConfig", "Qwen2VLForConditionalGeneration", _TEXT | _mrope([4, 2, 2])),
    "qwen3_vl_moe": ("Qwen3VLMoeConfig", "Qwen3VLMoeForConditionalGeneration",
                     _TEXT | _MOE | _mrope([4, 2, 2]) | dict(num_experts=4, decoder_sparse_step=2, head_dim=16)),
    "glm4v": ("Glm4vConfig", "Glm4vForConditionalGeneration", _TEXT | _mrope([4, 2, 2])),
    "glm4v_moe": ("Glm4vMoeConfig", "Glm4vMoeForConditionalGeneration",
                  _TEXT | _MOE | _mrope([2, 1, 1])
                  | dict(n_routed_experts=4, n_shared_experts=1, first_k_dense_replace=1, head_dim=16)),
}  # fmt: skip


def _build(transformers: Any, cls: str, config: Any, device: str = "meta") -> Any:
    """The model on ``device``: meta for counts, the CPU for FLOPs (some routers and RoPE sections call .item())."""
    import torch

    config._attn_implementation = "eager"
    torch.manual_seed(0)
    with torch.device(device):
        return getattr(transformers, cls)(config).eval()


def _numel(model: Any, skip: str = "") -> int:
    return sum(p.numel() for name, p in model.named_parameters() if not (skip and name.startswith(skip)))


def _unused_experts(text: Any) -> int:
    """Routed-expert parameters a token does not use, per model, from transformers' text config object."""
    d = text.hidden_size
    if text.model_type == "qwen3_vl_moe_text":
        moe = [i not in text.mlp_only_layers and (i + 1) % text.decoder_sparse_step == 0
               for i in range(text.num_hidden_layers)]  # fmt: skip
        return sum(moe) * (text.num_experts - text.num_experts_per_tok) * 3 * d * text.moe_intermediate_size
    if text.model_type in ("glm4v_moe_text", "glm4_moe_lite"):
        moe = text.num_hidden_layers - (
            text.first_k_dense_replace if text.model_type == "glm4v_moe_text" else 1
        )
        return moe * (text.n_routed_experts - text.num_experts_per_tok) * 3 * d * text.moe_intermediate_size
    return 0


@pytest.mark.torch
@pytest.mark.parametrize("wrapper", sorted(_WRAPPERS))
@pytest.mark.parametrize("tied", [None, False, True])
def test_text_model_counts_what_transformers_builds(
    transformers: Any, wrapper: str, tied: bool | None
) -> None:
    config_class, model_class, text = _WRAPPERS[wrapper]
    outer = {} if tied is None else {"tie_word_embeddings": tied}
    config = getattr(transformers, config_class)(text_config=text, vision_config=_VISION[wrapper], **outer)
    raw = config.to_dict()
    if tied is None:
        raw.pop("tie_word_embeddings")
    model = _build(transformers, model_class, config)
    ours = mapped_config(raw)
    assert count_params(ours).total == _numel(model, skip="model.visual.")
    assert active_params(ours) == count_params(ours).total - _unused_experts(config.text_config)
    for tokens in (1, 100):
        assert kv_cache_bytes(ours, Workload(seq_len=tokens, dtype="float16")) == kv_cache_formula(
            config.text_config, tokens, 2
        )
    assert unaccounted_keys(raw["text_config"] | {"model_type": config.text_config.model_type}) == set()


@pytest.mark.torch
@pytest.mark.parametrize("wrapper", sorted(_WRAPPERS))
def test_text_model_forward_flops(transformers: Any, wrapper: str) -> None:
    config_class, model_class, text = _WRAPPERS[wrapper]
    config = getattr(transformers, config_class)(text_config=text, vision_config=_VISION[wrapper])
    config.text_config._experts_implementation = "eager"
    model = _build(transformers, model_class, config, "cpu")
    measured = forward_flops(model, batch=2, seq_len=16)
    ours = mapped_config(config.to_dict())
    assert analytic_flops(ours, Workload(batch_size=2, seq_len=16)).forward == measured


@pytest.mark.torch
@pytest.mark.parametrize("wrapper", sorted(OUTER_TIE))
@pytest.mark.parametrize("text_tie", [None, False, True])
def test_outer_tie_rule_is_transformers(transformers: Any, wrapper: str, text_tie: bool | None) -> None:
    """OUTER_TIE's (class default, honours a text_config true) for each wrapper, as its config class decides the
    tie from a file without an outer ``tie_word_embeddings``."""
    default, honours_text = OUTER_TIE[wrapper]
    text = {} if text_tie is None else {"tie_word_embeddings": text_tie}
    config = transformers.CONFIG_MAPPING[wrapper].from_dict({"model_type": wrapper, "text_config": text})
    # what PreTrainedModel reads (modeling_utils: getattr(self.config, "tie_word_embeddings", False)): a wrapper
    # whose config class declares no such attribute (Step3p7Config) never ties
    tied = getattr(config, "tie_word_embeddings", False)
    assert tied == (default or (honours_text and text_tie is True))


def test_glm4v_text_never_reads_head_dim() -> None:
    """Glm4vTextAttention computes head_dim = hidden_size // num_attention_heads: a file's head_dim is ignored."""
    raw = {"model_type": "glm4v_text", **_TEXT, "head_dim": 32, "attention_bias": False}
    mapping = map_hf_config(raw, "test")
    assert "head_dim" not in mapping.data
    assert {i.key for i in mapping.report.ignored} >= {"head_dim", "attention_bias"}
    assert mapped_config(raw).resolved_head_dim == 16


# --- Ministral 3 and GLM-4.7-Flash: causal LMs of their own --------------------------------------------------------

_CAUSAL = {
    "ministral3": ("Ministral3Config", _TEXT | dict(head_dim=32, sliding_window=None)),
    "ministral3_window": ("Ministral3Config", _TEXT | dict(head_dim=16, sliding_window=24)),
    "glm4_moe_lite": ("Glm4MoeLiteConfig", _TEXT | _MOE | dict(
        n_routed_experts=4, n_shared_experts=1, kv_lora_rank=16, q_lora_rank=24, qk_rope_head_dim=8,
        v_head_dim=16, qk_nope_head_dim=16, num_key_value_heads=4)),
    "glm4_moe_lite_no_q_rank": ("Glm4MoeLiteConfig", _TEXT | _MOE | dict(
        n_routed_experts=4, n_shared_experts=2, kv_lora_rank=16, q_lora_rank=None, qk_rope_head_dim=8,
        v_head_dim=16, qk_nope_head_dim=16, attention_bias=True, num_key_value_heads=4)),
}  # fmt: skip


def _causal(transformers: Any, name: str, device: str = "meta") -> tuple[Any, dict[str, Any], Any]:
    import torch

    cls, kwargs = _CAUSAL[name]
    config = getattr(transformers, cls)(**kwargs)
    torch.manual_seed(0)
    with torch.device(device):
        model = transformers.AutoModelForCausalLM.from_config(
            config, attn_implementation="eager", experts_implementation="eager"
        )
    return config, config.to_dict(), model.eval()


@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(_CAUSAL))
def test_causal_family_counts_what_transformers_builds(transformers: Any, name: str) -> None:
    config, raw, model = _causal(transformers, name)
    ours = mapped_config(raw)
    assert map_hf_config(raw, "test").report.family == config.model_type
    assert count_params(ours).total == _numel(model)
    assert active_params(ours) == count_params(ours).total - _unused_experts(config)
    for tokens in (1, 100):
        assert kv_cache_bytes(ours, Workload(seq_len=tokens, dtype="float16")) == kv_cache_formula(
            config, tokens, 2
        )
    assert unaccounted_keys(raw) == set()
    measured = forward_flops(_causal(transformers, name, "cpu")[2], batch=2, seq_len=16)
    assert analytic_flops(ours, Workload(batch_size=2, seq_len=16)).forward == measured


def test_glm4_moe_lite_places_moe_by_mlp_layer_types_not_first_k() -> None:
    """Glm4MoeLiteConfig has no first_k_dense_replace: a file's value is ignored, layer 0 alone is dense."""
    raw = {"model_type": "glm4_moe_lite", **_TEXT, **_MOE, "n_routed_experts": 4, "kv_lora_rank": 16,
           "q_lora_rank": 24, "qk_rope_head_dim": 8, "v_head_dim": 16, "qk_nope_head_dim": 16}  # fmt: skip
    base = count_params(mapped_config(raw)).total
    assert count_params(mapped_config(raw | {"first_k_dense_replace": 3})).total == base
    dense_two = raw | {"mlp_layer_types": ["dense", "dense", "sparse", "sparse"]}
    assert count_params(mapped_config(dense_two)).total != base


# --- Grounding DINO's text backbone: BERT without its pooler ---------------------------------------------------------

_NO_POOLER = re.compile(r"AutoModel\.from_config\(\s*config\.text_config,\s*add_pooling_layer=False")


def test_text_without_pooler_is_read_off_transformers_sources() -> None:
    """TEXT_WITHOUT_POOLER is every model_type whose modeling code builds ``AutoModel.from_config(config.text_config,
    add_pooling_layer=False)`` in the installed transformers (a new one fails here)."""
    transformers = pytest.importorskip("transformers")
    import importlib

    root = Path(transformers.__file__).parent / "models"
    found: set[str] = set()
    for source in root.glob("*/modeling_*.py"):
        if _NO_POOLER.search(source.read_text(encoding="utf-8")):
            module = importlib.import_module(f"transformers.models.{source.parent.name}")
            found |= {
                cls.model_type for name in dir(module) if name.endswith("Config")
                and "text_config" in getattr(cls := getattr(module, name), "sub_configs", {})
            }  # fmt: skip
    assert found == TEXT_WITHOUT_POOLER


@pytest.mark.torch
@pytest.mark.parametrize("wrapper", sorted(TEXT_WITHOUT_POOLER))
def test_grounding_dino_text_backbone_has_no_pooler(transformers: Any, wrapper: str) -> None:
    import torch

    text = dict(model_type="bert", vocab_size=256, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                intermediate_size=64)  # fmt: skip
    config = transformers.CONFIG_MAPPING[wrapper](text_config=text)
    with torch.device("meta"):
        backbone = transformers.AutoModel.from_config(config.text_config, add_pooling_layer=False)
    raw = config.to_dict()
    mapping = map_hf_config(raw, "test")
    assert mapping.data["pooler"] is False and "no pooler" in mapping.report.counted_as
    assert count_params(mapped_config(raw)).total == _numel(backbone)
