"""The supported Hugging Face families by ``model_type``: one line per family module.

Each family module exports ``FAMILIES``, a tuple of :class:`~embedcalc.sources.hf.reader.Family` (transformers'
config class, its defaults, the mapping function). Adding a family is a module, a line here and a fixture; a
LLaMA-shaped family that is only the decoder core's arguments and ignored keys is a row of :data:`ROWS`, and a
model_type that is another family's config a row of :data:`ALIASES`.
:data:`REFUSED` names the families transformers has that embedcalc cannot count exactly, and what each needs.
"""

from __future__ import annotations

from dataclasses import replace
from types import ModuleType
from typing import Any

from embedcalc.sources.hf.core import row
from embedcalc.sources.hf.families import (
    bamba,
    bart,
    bert,
    cohere2,
    dbrx,
    deberta,
    deepseek,
    deepseek_v4,
    embedders,
    encoders,
    exaone4,
    falcon_h1,
    gemma,
    gemma3n,
    gemma4,
    gemma4_assistant,
    gpt,
    gpt2,
    gpt_oss,
    hybrid,
    jamba,
    kimi_linear,
    laguna,
    lfm2,
    llama,
    llama4,
    llama_like,
    longcat,
    minimax,
    minimax_m3,
    mistral_large4,
    mllama,
    moe,
    moe_families,
    moe_windowed,
    nemotron_h,
    nemotron_nas,
    olmo,
    opt,
    qwen3,
    ssm,
    step3,
    t5,
    t5gemma,
    vl_text,
    zamba2,
)
from embedcalc.sources.hf.reader import Family

MODULES: tuple[ModuleType, ...] = (bert, encoders, deberta, gpt2, gpt, opt, t5, bart, llama, llama_like)
MODULES += (
    gemma,
    gemma4,
    gemma3n,
    qwen3,
    moe,
    deepseek,
    gpt_oss,
    olmo,
)  # the layer-model families (layers as data, DESIGN §9)
MODULES += (llama4, dbrx, cohere2, exaone4)  # issue 10's last layer-model families
MODULES += (moe_families,)  # issue 23's MoE decoder families
MODULES += (
    hybrid,
    jamba,
    nemotron_h,
    lfm2,
    minimax,
    falcon_h1,
)  # token mixers beyond attention (issue 23, DESIGN §16)
MODULES += (ssm, bamba, kimi_linear, zamba2)  # state-space and delta-rule models (issue 31)
MODULES += (embedders,)  # encoders of embedding models: XLM-R-XL, Jina v3, EuroBERT (issue 31)
MODULES += (mllama,)  # cross-attention over an external sequence (Llama-3.2-Vision's text model, issue 23)
MODULES += (
    nemotron_nas,
)  # heterogeneous blocks (issue 23): per-layer KV heads and widths, no-op and linear layers
MODULES += (t5gemma,)  # issue 31: Gemma 2 layers in an encoder-decoder, a token table per stack
MODULES += (vl_text, moe_windowed, laguna)  # issue 31: vision-language text models, MoE decoders with windows
MODULES += (
    minimax_m3,
    step3,
    longcat,
    mistral_large4,
)  # issue 31: block-sparse attention, Step-3.7, LongCat-Flash's zero experts, Mistral Large 4
MODULES += (deepseek_v4,)  # issue 31: compressed attention, hyper-connections, a grouped low-rank output
MODULES += (
    gemma4_assistant,
)  # issue 31: a drafter (the target's keys and values, projections, a masked head)

_LLAMA_BIASES = dict(qkv="attention_bias", out="attention_bias", ffn="mlp_bias")  # LlamaAttention, LlamaMLP
# LLaMA-shaped families that are only the core's arguments and ignored keys: rows of data, no reader of their own
ROWS: tuple[Family, ...] = (
    row("granite", "GraniteConfig", "GraniteForCausalLM", llama_like.LLAMA, _LLAMA_BIASES,
        dict.fromkeys(("embedding_multiplier", "residual_multiplier", "attention_multiplier", "logits_scaling"),
                      llama_like.SCALARS)),
    # ArceeMLP: up_proj, down_proj and squared ReLU, no gate
    row("arcee", "ArceeConfig", "ArceeForCausalLM",
        llama_like.LLAMA | dict(hidden_size=2560, intermediate_size=18432, hidden_act="relu2",
                                max_position_embeddings=4096, head_dim=None), _LLAMA_BIASES | dict(gated=False)),
    row("helium", "HeliumConfig", "HeliumForCausalLM",
        dict(vocab_size=48000, hidden_size=2560, intermediate_size=7040, num_hidden_layers=24, num_attention_heads=20,
             num_key_value_heads=20, head_dim=128, hidden_act="silu", max_position_embeddings=4096,
             tie_word_embeddings=False, attention_bias=False, mlp_bias=False, attention_dropout=0.0),
        _LLAMA_BIASES | dict(out=False)),
    row("seed_oss", "SeedOssConfig", "SeedOssForCausalLM",
        dict(vocab_size=155136, hidden_size=4096, intermediate_size=27648, num_hidden_layers=64,
             num_attention_heads=80, num_key_value_heads=8, head_dim=128, hidden_act="silu",
             max_position_embeddings=524288, tie_word_embeddings=False, attention_bias=True,
             attention_out_bias=False, mlp_bias=False, attention_dropout=0.1),
        _LLAMA_BIASES | dict(out="attention_out_bias")),
    row("ernie4_5", "Ernie4_5Config", "Ernie4_5ForCausalLM",
        dict(vocab_size=103424, hidden_size=1024, intermediate_size=3072, num_hidden_layers=18,
             num_attention_heads=16, num_key_value_heads=2, head_dim=128, hidden_act="silu",
             max_position_embeddings=131072, tie_word_embeddings=True, use_bias=False, attention_dropout=0.0),
        dict(qkv="use_bias", out="use_bias", ffn="use_bias")),
    row("exaone", "ExaoneConfig", "LlamaForCausalLM",
        llama_like.LLAMA | dict(vocab_size=102400, intermediate_size=14336, num_key_value_heads=8,
                                max_position_embeddings=4096, head_dim=None),
        _LLAMA_BIASES, attribute_map={"num_layers": "num_hidden_layers", "activation_function": "hidden_act"}),
)  # fmt: skip

FAMILIES: dict[str, Family] = {
    family.model_type: family
    for module in MODULES
    for family in (ROWS if module is llama_like else ()) + module.FAMILIES
}
"""Supported families by ``model_type``; defaults are those of transformers' config classes (tests check them)."""


def _alias(model_type: str, of: str, config_class: str, counted_as: str, **defaults: Any) -> Family:
    """A ``model_type`` whose file another family's reader reads: the same rules, its own class defaults."""
    base = FAMILIES[of]
    return replace(base, model_type=model_type, config_class=config_class, counted_as=counted_as,
                   defaults=base.defaults | defaults)  # fmt: skip


# Model types that are another family's config (issue 23): one row each, no reader of their own.
ALIASES: tuple[Family, ...] = (
    # moonshotai/Kimi-K2: auto_map and architectures name DeepseekV3Config / DeepseekV3ForCausalLM
    _alias("kimi_k2", "deepseek_v3", "DeepseekV3Config",
           "DeepseekV3ForCausalLM (the class its auto_map and architectures name)"),
    # transformers maps internlm3 to LlamaForCausalLM; InternLM3Config aliases qkv_bias and bias
    replace(_alias("internlm3", "llama", "InternLM3Config", "LlamaForCausalLM (AutoModelForCausalLM)",
                   vocab_size=128512, intermediate_size=10240, num_hidden_layers=48, num_key_value_heads=2,
                   max_position_embeddings=32768, head_dim=128),
            attribute_map={"qkv_bias": "attention_bias", "bias": "mlp_bias"}),
    # the text models of Qwen2.5-VL and Qwen3-VL: Qwen2's and Qwen3's decoders with an LM head
    _alias("qwen2_5_vl_text", "qwen2", "Qwen2_5_VLTextConfig",
           "Qwen2_5_VLForConditionalGeneration's language model and LM head (Qwen2's decoder)",
           vocab_size=152064, hidden_size=8192, intermediate_size=29568, num_hidden_layers=80,
           num_attention_heads=64, num_key_value_heads=8, max_window_layers=80),
    _alias("qwen3_vl_text", "qwen3", "Qwen3VLTextConfig",
           "Qwen3VLForConditionalGeneration's language model and LM head (Qwen3's decoder)",
           max_position_embeddings=128000, use_sliding_window=False, sliding_window=None),
    # Ministral 3 (Ministral3ForCausalLM): MistralModel's layers; its attention scales the queries by position
    # (llama_4_scaling_beta, element-wise), and rope_parameters default to YaRN (no parameters)
    _alias("ministral3", "mistral", "Ministral3Config", "Ministral3ForCausalLM (AutoModelForCausalLM)",
           vocab_size=131072, num_hidden_layers=34, head_dim=128, max_position_embeddings=262144,
           sliding_window=None),
)  # fmt: skip
FAMILIES |= {family.model_type: family for family in ALIASES}

REMOTE_CODE: frozenset[str] = frozenset(family.model_type for family in nemotron_nas.FAMILIES)
"""Families transformers has no class for: their readers follow the checkpoint's own remote code (cited in the
module), so the accept-list (scripts/hf_accept_list.py) and the class-default checks skip them."""

CONFIG_TYPE: dict[str, str] = {"kimi_k2": "deepseek_v3"}
"""A ``model_type`` transformers has no class for -> the model_type of the class its file names (``auto_map``)."""

MULTIMODAL_TEXT: dict[str, str] = {
    "qwen2_5_vl": "qwen2_5_vl_text",
    "qwen3_vl": "qwen3_vl_text",
    "qwen2_vl": "qwen2_vl_text",
}
"""Multimodal model types -> their text config's model_type, for files that keep the text keys at top level
(Qwen2.5-VL before transformers 5: the class then takes every key its text config declares)."""

OUTER_TIE: dict[str, tuple[bool, bool]] = {
    "qwen2_vl": (False, True),
    "qwen2_5_vl": (False, True),
    "qwen3_vl": (False, False),
    "qwen3_vl_moe": (False, False),
    "glm4v": (False, True),
    "glm4v_moe": (False, True),
    "qwen3_5": (False, False),
    "qwen3_5_moe": (False, False),
    "minimax_m3_vl": (False, True),
    "step3p7": (False, False),
}
"""Multimodal model types whose outer config alone ties the LM head (transformers 5 looks at the outer
``tie_word_embeddings``): (the class default, whether ``__post_init__`` also honours a ``text_config``
``tie_word_embeddings: true`` of files saved before transformers 5). tests/sources/hf/test_hf_vl_text.py checks each
against transformers' classes."""

TEXT_WITHOUT_POOLER: frozenset[str] = frozenset({"grounding-dino", "mm-grounding-dino"})
"""Multimodal model types whose modeling code builds the text encoder without its pooler
(``AutoModel.from_config(config.text_config, add_pooling_layer=False)``: Grounding DINO's ``text_backbone``);
tests/sources/hf/test_hf_vl_text.py derives the set from transformers' modeling sources."""

FORWARDED: dict[str, tuple[str, ...]] = {"mllama": ("vision_config",)}
"""Multimodal model types -> keys of the outer file their text model reads beside ``text_config``: Mllama's
``vision_config`` sets how many vision tokens its cross-attention layers attend to (sources/hf/families/mllama.py)."""

REFUSED: dict[str, str] = {}
"""Families embedcalc refuses, with the layer feature it would need to count them exactly."""
