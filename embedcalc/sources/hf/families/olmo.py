"""OLMo (OlmoForCausalLM), OLMo 2 (Olmo2ForCausalLM), OLMo 3 (Olmo3ForCausalLM) and OLMoE (OlmoeForCausalLM);
Groeneveld et al. 2024, OLMo Team 2024 ("2 OLMo 2 Furious"), Muennighoff et al. 2024 (OLMoE). OLMo 3: OLMo 2 with
sliding-window layers (three of every four by default).

OLMo: LLaMA-shaped with parameter-free LayerNorms (OlmoLayerNorm has no weight or bias), ``clip_qkv`` a clamp.
OLMo 2: RMSNorms *after* each sublayer inside the residual (``post_attention_layernorm``,
``post_feedforward_layernorm``) and none before, plus the final norm: the same parameters and matmuls as pre-norm,
so counted as pre-norm; q_norm RMSNorm(heads x head_dim) and k_norm RMSNorm(kv_heads x head_dim) over the full
width. OLMoE: OLMo 2's full-width q/k norms with pre-norm blocks, every layer a mixture of ``num_experts`` experts
of ``intermediate_size`` behind a bias-free router. transformers' ``modeling_olmo*.py``.
"""

from __future__ import annotations

from typing import Any

from embedcalc.sources.hf.core import read_core
from embedcalc.sources.hf.layered import FULL, SLIDING, ignore_moe_keys, origin, put_window_layout, read_moe
from embedcalc.sources.hf.reader import Family, KeyReader

_CLIP = "clamps q, k and v element-wise; no parameters or matmul FLOPs"
_FULL_QK = "q_norm RMSNorm(heads x head_dim), k_norm RMSNorm(kv_heads x head_dim)"


def _read_olmo(r: KeyReader) -> None:
    read_core(r, qkv="attention_bias", out="attention_bias", ffn=False)
    r.fixed("norm", "layernorm", "OlmoLayerNorm")
    r.fixed("norm_affine", False, "OlmoLayerNorm has no weight and no bias")
    r.ignore("clip_qkv", _CLIP)


def _read_olmo2(r: KeyReader) -> None:
    read_core(r, qkv="attention_bias", out="attention_bias", ffn=False)
    r.fixed(
        "norm_placement", "pre", "post-sublayer RMSNorms and a final norm: the same parameters as pre-norm"
    )
    r.put("attention", {"qk_norm": "full"}, "model_type", "family", _FULL_QK)


def _read_olmo3(r: KeyReader) -> None:
    """Olmo3ForCausalLM: OLMo 2's layers with sliding-window attention on the layers layer_types marks (without
    it, Olmo3Config slides every layer but each fourth: ``(i + 1) % 4 != 0``)."""
    _read_olmo2(r)
    layers = r.data.get("num_layers")
    window_key, window, _ = r.value("sliding_window")
    if isinstance(layers, int):
        derived = [SLIDING if (i + 1) % 4 else FULL for i in range(layers)]
        put_window_layout(r, layers, derived, window, window_key, None)


def _read_olmoe(r: KeyReader) -> None:
    read_core(r, qkv="attention_bias", out="attention_bias", ffn=False)
    r.put("attention", {"qk_norm": "full"}, "model_type", "family", _FULL_QK)
    r.ignore("clip_qkv", _CLIP)
    ignore_moe_keys(r)
    moe = read_moe(r, "num_experts", width_key="intermediate_size")
    if moe is not None:
        key = "num_experts, num_experts_per_tok, intermediate_size"
        r.put("ffn", moe, key, origin(r, key), "every layer MoE")


_OLMO: dict[str, Any] = dict(
    vocab_size=50304, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
    num_key_value_heads=None, hidden_act="silu", max_position_embeddings=2048, tie_word_embeddings=False,
    attention_bias=False, attention_dropout=0.0,
)  # fmt: skip
FAMILIES = (
    Family("olmo", "OlmoConfig", "OlmoForCausalLM (AutoModelForCausalLM)", "llama-2-7b", _OLMO, _read_olmo),
    Family("olmo2", "Olmo2Config", "Olmo2ForCausalLM (AutoModelForCausalLM)", "llama-2-7b", _OLMO, _read_olmo2),
    Family("olmo3", "Olmo3Config", "Olmo3ForCausalLM (AutoModelForCausalLM)", "gemma-2-9b",
           _OLMO | dict(sliding_window=4096), _read_olmo3),
    Family("olmoe", "OlmoeConfig", "OlmoeForCausalLM (AutoModelForCausalLM)", "qwen3-30b-a3b",
           _OLMO | dict(hidden_size=2048, intermediate_size=2048, num_hidden_layers=16, num_attention_heads=16,
                        max_position_embeddings=4096, num_experts_per_tok=8, num_experts=64), _read_olmoe,
           {"num_local_experts": "num_experts"}),
)  # fmt: skip
