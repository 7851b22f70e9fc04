"""Gemma (GemmaForCausalLM), Gemma 2 and the Gemma 3 text model (Gemma2ForCausalLM, Gemma3ForCausalLM).

All three: RMSNorm (weight only, applied as 1 + w), RoPE, a GeGLU MLP (tanh GELU), embeddings scaled by
sqrt(hidden_size) (a buffer, no parameter), an explicit head_dim (Gemma 7B: 16 x 256 = 4096 != 3072), LM head tied
by default. Gemma 2 and 3 add sandwich norms (``input_layernorm``, ``post_attention_layernorm``,
``pre_feedforward_layernorm``, ``post_feedforward_layernorm``) and sliding-window layers laid out by
``layer_types`` (Gemma 2: even layers slide; Gemma 3: ``sliding_window_pattern`` 6, five local to one global);
Gemma 3 adds q/k RMSNorms of head_dim. Soft-capping and ``query_pre_attn_scalar`` are element-wise only.
Gemma Team 2024 (Gemma, Gemma 2), 2025 (Gemma 3); transformers' ``modeling_gemma*.py``.
"""

from __future__ import annotations

from typing import Any

from embedcalc.sources.hf import keys as hf_keys
from embedcalc.sources.hf.core import read_shape
from embedcalc.sources.hf.layered import FULL, SLIDING, pattern_types, put_window_layout
from embedcalc.sources.hf.mappings import map_activation, map_dropout
from embedcalc.sources.hf.reader import MISSING, Family, IgnoredKey, KeyReader

_NO_PARAMS = "a scalar of the attention or the logits (soft-capping, score scale); element-wise only"


def read_common(r: KeyReader, act_key: str, other_act_key: str, placement: str = "pre",
                 encoder: bool = False) -> None:  # fmt: skip
    architecture = ("encoder", "use_bidirectional_attention: Gemma3TextModel (AutoModel), no LM head, no KV "
                    "cache") if encoder else ("decoder", "")  # fmt: skip
    for name, value, note in (
        ("architecture", *architecture), ("norm", "rmsnorm", "GemmaRMSNorm: one weight, used as 1 + w"),
        ("norm_placement", placement, "norms before and after attention and the MLP" if placement == "sandwich"
         else ""), ("embedding_norm", False, ""), ("position", "rope", ""),
        ("bias", False, ""), ("ffn_bias", False, "GemmaMLP builds no biases"), ("lm_head", not encoder, ""),
        *((("pooler", False, "sentence-transformers' pooling and dense layers are outside the model"),) if encoder
          else ()),
        ("scale_embeddings", True, "embeddings times sqrt(hidden_size): a buffer, no parameter"),
    ):  # fmt: skip
        r.fixed(name, value, note)
    read_shape(r)  # every Gemma config has head_dim (Gemma 7B: 16 x 256 != 3072)
    if encoder:
        r.ignore("tie_word_embeddings", "AutoModel builds the backbone, which has no LM head to tie")
    else:
        r.copy("tie_word_embeddings", "tie_embeddings")
    r.copy("attention_bias", "qkv_bias")
    r.copy("attention_bias", "out_bias")
    map_activation(r, act_key, gated=True)
    r.ignore(other_act_key, f"transformers' MLP of this family reads {act_key}, not {other_act_key}")
    map_dropout(r, "attention_dropout")
    for key in ("rope_theta", "rope_scaling", "rope_parameters", "rope_local_base_freq"):
        r.ignore(key, hf_keys.ROPE)
    for key in ("query_pre_attn_scalar", "attn_logit_softcapping", "final_logit_softcapping"):
        r.ignore(key, _NO_PARAMS)
    r.ignore(
        "cache_implementation",
        "the KV cache class generate() uses (hybrid: sliding layers keep their window)",
    )
    if not encoder:
        r.ignore(
            "use_bidirectional_attention", "changes which scores are masked, not the matmuls (full n x n)"
        )


def _read_gemma(r: KeyReader) -> None:
    read_common(r, "hidden_act", "hidden_activation")


def _windowed(r: KeyReader, derive: list[str] | None, derive_key: str | None = None) -> None:
    """Sliding layers from ``layer_types`` (or ``derive``, from ``derive_key`` when the file has it) with
    ``sliding_window`` as their window."""
    layers = r.data.get("num_layers")
    window_key, window, _ = r.value("sliding_window")
    if isinstance(layers, int):
        put_window_layout(r, layers, derive, window, window_key, derive_key, cap_at_context=False)


def _read_gemma2(r: KeyReader) -> None:
    read_common(r, "hidden_activation", "hidden_act", "sandwich")
    r.ignore("sliding_window_size", "an old duplicate of sliding_window that transformers never reads")
    layers = r.data.get("num_layers")
    derive = [SLIDING if (i + 1) % 2 else FULL for i in range(layers)] if isinstance(layers, int) else None
    _windowed(r, derive)


def _bidirectional_windows(r: KeyReader) -> None:
    """EmbeddingGemma: Gemma3TextConfig turns a file's ``sliding_window`` w into w // 2 + 1, an exclusive bound on
    each side (512 -> 257: a token sees the 256 on each side and itself). An encoder's attention computes the full
    score matrix and masks it, and keeps no KV cache, so the window changes no count; the report says what it is."""
    window_key, window, _ = r.value("sliding_window")
    if isinstance(window, int) and not isinstance(window, bool) and window > 0:
        each = window // 2 + 1
        reason = (f"bidirectional: Gemma3TextConfig makes it {window} // 2 + 1 = {each} (an exclusive bound), so "
                  f"a sliding layer's token sees the {each - 1} tokens on each side and itself; the encoder computes "
                  "the full score matrix and masks it, and keeps no KV cache")  # fmt: skip
        r.ignore(window_key, reason)
        r.notes.append(
            f"{window_key} {window} is bidirectional ({each - 1} tokens each way), as transformers reads it"
        )
    else:
        r.ignore(window_key, "no sliding window")
    for key in ("layer_types", "sliding_window_pattern"):
        r.ignore(key, "which layers attend within the window: the same weights and matmuls in an encoder")


def _read_gemma3_text(r: KeyReader) -> None:
    bidirectional = r.lookup("use_bidirectional_attention")[1] is True
    if bidirectional:
        r.ignored.append(IgnoredKey("use_bidirectional_attention", True, "read: an encoder (EmbeddingGemma)"))
    read_common(r, "hidden_activation", "hidden_act", "sandwich", encoder=bidirectional)
    r.put("attention", {"qk_norm": "head"}, "model_type", "family", "q_norm, k_norm: RMSNorm(head_dim)")
    if bidirectional:
        _bidirectional_windows(r)
        return
    layers = r.data.get("num_layers")
    pattern_key, pattern = r.lookup("sliding_window_pattern")
    if pattern is MISSING or pattern is None:
        pattern = 6  # Gemma3TextConfig's default when the file has neither layer_types nor the pattern
    derive = pattern_types(layers, pattern) if isinstance(layers, int) and isinstance(pattern, int) else None
    _windowed(r, derive, pattern_key)


_COMMON: dict[str, Any] = dict(
    vocab_size=256000, num_key_value_heads=16, head_dim=256, max_position_embeddings=8192,
    tie_word_embeddings=True, attention_bias=False, attention_dropout=0.0,
)  # fmt: skip
FAMILIES = (
    Family("gemma", "GemmaConfig", "GemmaForCausalLM (AutoModelForCausalLM)", "gemma-7b",
           _COMMON | dict(hidden_size=3072, intermediate_size=24576, num_hidden_layers=28, num_attention_heads=16,
                          hidden_act="gelu_pytorch_tanh"), _read_gemma),
    Family("gemma2", "Gemma2Config", "Gemma2ForCausalLM (AutoModelForCausalLM)", "gemma-2-9b",
           _COMMON | dict(hidden_size=2304, intermediate_size=9216, num_hidden_layers=26, num_attention_heads=8,
                          num_key_value_heads=4, hidden_activation="gelu_pytorch_tanh", sliding_window=4096),
           _read_gemma2),
    Family("gemma3_text", "Gemma3TextConfig", "Gemma3ForCausalLM (AutoModelForCausalLM)", "gemma-3-27b",
           _COMMON | dict(vocab_size=262208, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
                          num_attention_heads=8, num_key_value_heads=4, hidden_activation="gelu_pytorch_tanh",
                          max_position_embeddings=131072, sliding_window=4096), _read_gemma3_text),
)  # fmt: skip
