"""The text models of vision-language families whose decoders embedcalc reads under another name: Qwen2-VL
(``qwen2_vl_text``: Qwen2's decoder), Qwen3-VL-MoE (``qwen3_vl_moe_text``: Qwen3-MoE's), GLM-4.1V (``glm4v_text``)
and GLM-4.5V (``glm4v_moe_text``). Each counts the ``...ForConditionalGeneration``'s language model and LM head;
the vision tower and merger are not counted (:func:`embedcalc.sources.hf._map_text_model` says so).

Read off transformers' ``modeling_qwen2_vl.py``, ``modeling_qwen3_vl_moe.py``, ``modeling_glm4v.py`` and
``modeling_glm4v_moe.py``:

- ``Qwen2VLAttention``: q/k/v with biases, o_proj without; ``Qwen2MLP`` gated, no biases; sliding layers from
  ``max_window_layers`` on when ``use_sliding_window`` (or as ``layer_types`` says): Qwen2's decoder.
- ``Qwen3VLMoeTextAttention``: q_norm / k_norm RMSNorm(head_dim), every projection biased as ``attention_bias``;
  ``Qwen3VLMoeTextSparseMoeBlock`` (router and experts, no shared expert) on layer i unless i is in
  ``mlp_only_layers`` or (i + 1) % ``decoder_sparse_step`` != 0: Qwen3-MoE's decoder. ``Qwen3VLMoeTextConfig``
  sets ``sliding_window`` to None whatever the file says.
- ``Glm4vTextAttention``: head_dim = hidden_size // num_attention_heads (no ``head_dim`` key is read), q/k/v always
  biased and o_proj never, whatever ``attention_bias`` says; ``Glm4vTextMLP`` a fused gate_up_proj; four norms per
  layer (GLM-4's sandwich: ``post_self_attn_layernorm``, ``post_mlp_layernorm``).
- ``Glm4vMoeTextAttention``: GLM-4.5's attention (q/k/v biases from ``attention_bias``, none on o_proj, head_dim
  from ``head_dim`` when the file keeps one) without q/k norms; ``Glm4vMoeTextMoE`` from layer
  ``first_k_dense_replace`` on: GLM-4.5's MoE (DeepSeek-V3's router, experts and shared experts).
"""

from __future__ import annotations

from typing import Any

from embedcalc.sources.hf import keys as hf_keys
from embedcalc.sources.hf.core import read_core
from embedcalc.sources.hf.families.deepseek import GLM_MOE, read_glm4_moe
from embedcalc.sources.hf.families.llama import read_qwen2
from embedcalc.sources.hf.families.qwen3 import read_qwen3_moe
from embedcalc.sources.hf.reader import Family, IgnoredKey, KeyReader

_GLM4V_QKV = "Glm4vTextAttention builds q/k/v with biases and o_proj without, whatever attention_bias says"


def _computed_head_dim(r: KeyReader, how: str) -> None:
    """A family whose attention computes head_dim = hidden_size // num_attention_heads and never reads a
    ``head_dim`` key: a file's ``head_dim`` is reported as ignored and the computed width is mapped."""
    hidden, heads = r.data.get("embed_dim"), r.data.get("num_heads")
    if "head_dim" in r.data:
        kept = [m for m in r.mapped if m.field == "head_dim"]
        r.mapped[:] = [m for m in r.mapped if m.field != "head_dim"]
        del r.data["head_dim"], r.user_keys["head_dim"]
        r.ignored += [IgnoredKey(m.key, m.value, how) for m in kept if m.origin == "file"]
    if isinstance(hidden, int) and isinstance(heads, int) and heads > 0 and hidden % heads:
        r.put("head_dim", hidden // heads, "hidden_size, num_attention_heads", "file", how)


def _read_glm4v_text(r: KeyReader) -> None:
    read_core(r, qkv=True, out=False, ffn=False, placement="sandwich")
    r.ignore("attention_bias", _GLM4V_QKV)
    _computed_head_dim(r, "Glm4vTextAttention: head_dim = hidden_size // num_attention_heads, the key unread")
    r.ignore("partial_rotary_factor", "partial rotary positions: " + hf_keys.ROPE)


def _read_glm4v_moe_text(r: KeyReader) -> None:
    read_glm4_moe(r, qk_norm=False)


_QWEN2_VL: dict[str, Any] = dict(
    vocab_size=152064, hidden_size=8192, intermediate_size=29568, num_hidden_layers=80, num_attention_heads=64,
    num_key_value_heads=8, hidden_act="silu", max_position_embeddings=32768, tie_word_embeddings=False,
    use_sliding_window=False, sliding_window=4096, max_window_layers=80, attention_dropout=0.0,
)  # fmt: skip
_QWEN3_VL_MOE: dict[str, Any] = dict(
    vocab_size=151936, hidden_size=2048, intermediate_size=5632, num_hidden_layers=24, num_attention_heads=16,
    num_key_value_heads=16, hidden_act="silu", max_position_embeddings=128000, tie_word_embeddings=True,
    attention_bias=False, attention_dropout=0.0, decoder_sparse_step=1, moe_intermediate_size=1408,
    num_experts_per_tok=4, num_experts=60, mlp_only_layers=None, head_dim=None, use_sliding_window=False,
    sliding_window=None,
)  # fmt: skip
_GLM4V: dict[str, Any] = dict(
    vocab_size=151552, hidden_size=4096, intermediate_size=13696, num_hidden_layers=40, num_attention_heads=32,
    num_key_value_heads=2, hidden_act="silu", max_position_embeddings=32768, tie_word_embeddings=False,
    attention_dropout=0.0,
)  # fmt: skip
_GLM4V_MOE: dict[str, Any] = GLM_MOE | dict(
    vocab_size=151424, max_position_embeddings=65536, attention_bias=True, use_qk_norm=False,
)  # fmt: skip

FAMILIES = (
    Family("qwen2_vl_text", "Qwen2VLTextConfig",
           "Qwen2VLForConditionalGeneration's language model and LM head (Qwen2's decoder)", "llama-2-7b",
           _QWEN2_VL, read_qwen2),
    Family("qwen3_vl_moe_text", "Qwen3VLMoeTextConfig",
           "Qwen3VLMoeForConditionalGeneration's language model and LM head (Qwen3-MoE's decoder)",
           "qwen3-30b-a3b", _QWEN3_VL_MOE, read_qwen3_moe, {"num_local_experts": "num_experts"}),
    Family("glm4v_text", "Glm4vTextConfig",
           "Glm4vForConditionalGeneration's language model and LM head (GLM-4's sandwich decoder)", "llama-2-7b",
           _GLM4V, _read_glm4v_text),
    Family("glm4v_moe_text", "Glm4vMoeTextConfig",
           "Glm4vMoeForConditionalGeneration's language model and LM head (GLM-4.5's MoE decoder)", "deepseek-v3",
           _GLM4V_MOE, _read_glm4v_moe_text, {"num_local_experts": "n_routed_experts"}),
)  # fmt: skip
