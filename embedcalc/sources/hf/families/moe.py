"""Mixtures of experts on a LLaMA-shaped decoder, every layer MoE: Mixtral (MixtralForCausalLM), Phi-3.5-MoE
(PhimoeForCausalLM) and Granite-MoE (GraniteMoeForCausalLM).

Each layer: a bias-free router Linear(hidden, num_local_experts) and num_local_experts gated experts of
``intermediate_size`` (transformers fuses gate and up into ``gate_up_proj``: the same parameters), top
``num_experts_per_tok`` per token. Mixtral and Phi-MoE apply ``sliding_window`` (when set) to every layer. Phi-MoE
uses LayerNorm with biases, optional attention biases and an LM head bias (``lm_head_bias``); Granite's
multipliers are scalars (no parameters). Jiang et al. 2024 (Mixtral); Abdin et al. 2024 (Phi-3.5-MoE); IBM
Granite 3.0 (2024); transformers' ``modeling_mixtral.py``, ``modeling_phimoe.py``, ``modeling_granitemoe.py``.
"""

from __future__ import annotations

from typing import Any

from embedcalc.sources.hf import keys as hf_keys
from embedcalc.sources.hf.core import read_core
from embedcalc.sources.hf.layered import ignore_moe_keys, origin, read_moe
from embedcalc.sources.hf.reader import Family, KeyReader

_GRANITE_SCALARS = ("embedding_multiplier", "logits_scaling", "residual_multiplier", "attention_multiplier")


def every_layer_experts(r: KeyReader) -> None:
    """Mixtral's layout: every layer a router of num_local_experts and experts of intermediate_size."""
    ignore_moe_keys(r)
    moe = read_moe(r, "num_local_experts", width_key="intermediate_size")
    if moe is not None:
        key = "num_local_experts, num_experts_per_tok, intermediate_size"
        r.put("ffn", moe, key, origin(r, key), "every layer: router + experts")  # fmt: skip


def _window(r: KeyReader) -> None:
    r.copy("sliding_window", "sliding_window", note="every layer; caps the KV cache at this many tokens")


def _read_mixtral(r: KeyReader) -> None:
    read_core(r, qkv=False, out=False, ffn=False)
    every_layer_experts(r)
    _window(r)


def _read_phimoe(r: KeyReader) -> None:
    read_core(r, qkv="attention_bias", out="attention_bias", ffn=False)
    r.fixed("norm", "layernorm", "PhimoeDecoderLayer: nn.LayerNorm with bias")
    r.copy("lm_head_bias", "lm_head_bias")
    r.ignore("original_max_position_embeddings", "the LongRoPE pre-training context: " + hf_keys.ROPE)
    every_layer_experts(r)
    _window(r)


def _read_granitemoe(r: KeyReader) -> None:
    read_core(r, qkv="attention_bias", out="attention_bias", ffn=False)
    every_layer_experts(r)
    for key in _GRANITE_SCALARS:
        r.ignore(key, "a scalar multiplier; element-wise only")


_MOE: dict[str, Any] = dict(num_experts_per_tok=2, num_local_experts=8, hidden_act="silu", attention_dropout=0.0,
                            tie_word_embeddings=False, vocab_size=32000, hidden_size=4096, num_hidden_layers=32,
                            num_attention_heads=32)  # fmt: skip
FAMILIES = (
    Family("mixtral", "MixtralConfig", "MixtralForCausalLM (AutoModelForCausalLM)", "mixtral-8x7b",
           _MOE | dict(intermediate_size=14336, num_key_value_heads=8, head_dim=None,
                       max_position_embeddings=131072, sliding_window=None),
           _read_mixtral, {"num_experts": "num_local_experts"}),
    Family("phimoe", "PhimoeConfig", "PhimoeForCausalLM (AutoModelForCausalLM)", "mixtral-8x7b",
           _MOE | dict(vocab_size=32064, intermediate_size=6400, num_key_value_heads=8, num_local_experts=16,
                       max_position_embeddings=131072, sliding_window=None, attention_bias=False,
                       lm_head_bias=False), _read_phimoe),
    Family("granitemoe", "GraniteMoeConfig", "GraniteMoeForCausalLM (AutoModelForCausalLM)", "mixtral-8x7b",
           _MOE | dict(intermediate_size=11008, num_key_value_heads=None, max_position_embeddings=2048,
                       attention_bias=False), _read_granitemoe),
)  # fmt: skip
