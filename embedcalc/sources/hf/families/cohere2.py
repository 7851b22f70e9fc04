"""Command R7B / Command A (Cohere2ForCausalLM); Cohere 2024/2025; transformers' ``configuration_cohere2.py`` /
``modeling_cohere2.py``.

Cohere's parallel block (attention and the gated MLP read one ``input_layernorm`` and add to one residual) with a
bias-free LayerNorm (``Cohere2LayerNorm``: weight only), RoPE, no MLP biases, attention biases when
``attention_bias``, and the head tied by default. Sliding-window layers by ``layer_types`` or, in the files on the
hub, ``sliding_window_pattern`` (default 4: three local layers, then a global one). head_dim is always
``hidden_size // num_attention_heads`` (Cohere2Config sets it whatever the file says). ``logit_scale`` multiplies
the logits (no parameters); the keys of Cohere's original release that transformers never reads are accepted when
they describe what transformers builds.
"""

from __future__ import annotations

from typing import Any

from embedcalc.sources.hf.core import read_core
from embedcalc.sources.hf.layered import pattern_types, put_window_layout
from embedcalc.sources.hf.reader import MISSING, Family, KeyReader

_UNREAD = "a key of Cohere's original release that transformers never reads"


def _windows(r: KeyReader) -> None:
    layers = r.data.get("num_layers")
    window_key, window, _ = r.value("sliding_window")
    pattern_key, pattern = r.lookup("sliding_window_pattern")
    if pattern is MISSING or pattern is None:
        pattern = 4  # Cohere2Config: kwargs.pop("sliding_window_pattern", 4)
    if not isinstance(layers, int):
        return
    if not isinstance(pattern, int) or isinstance(pattern, bool) or pattern < 1:
        r.problem(pattern_key, f"{pattern_key} = {pattern!r} must be a positive integer")
        return
    put_window_layout(r, layers, pattern_types(layers, pattern), window, window_key, pattern_key)


def _read_cohere2(r: KeyReader) -> None:
    read_core(
        r, qkv="attention_bias", out="attention_bias", ffn=False, norm="layernorm", placement="parallel"
    )
    r.fixed("norm_bias", False, "Cohere2LayerNorm has a weight and no bias")
    r.fixed("parallel_norms", 1, "one input_layernorm feeds attention and the MLP")
    r.ignore("mlp_bias", "Cohere2MLP builds no biases whatever this says")
    hidden, heads = r.data.get("embed_dim"), r.data.get("num_heads")
    if "head_dim" in r.data:
        r.data.pop("head_dim")
        r.user_keys.pop("head_dim", None)
        r.mapped = [m for m in r.mapped if m.field != "head_dim"]
        r.ignore(
            "head_dim", "Cohere2Config sets head_dim = hidden_size // num_attention_heads whatever it says"
        )
        if isinstance(hidden, int) and isinstance(heads, int) and heads > 0 and hidden % heads:
            r.put("head_dim", hidden // heads, "hidden_size, num_attention_heads", "file",
                  "Cohere2Config: hidden_size // num_attention_heads (floor)")  # fmt: skip
    r.ignore("logit_scale", "scales the logits: no parameters or matmul FLOPs")
    _windows(r)
    for key, harmless, what in (
        ("order_of_interleaved_layers", ("local_attn_first",), "global layers first in each group"),
        ("use_gated_activation", (True,), "an MLP without the gate"),
    ):  # fmt: skip
        r.expect(key, harmless, f"{what}, which transformers' Cohere2 does not build")
    for key in ("position_embedding_type", "rotary_pct"):
        r.ignore(key, _UNREAD + "; rotary embeddings have no parameters")
    share_key, share = r.lookup("use_embedding_sharing")
    if share is not MISSING:
        if share != r.data.get("tie_embeddings"):
            r.problem(share_key, f"{share_key} = {share!r} disagrees with tie_word_embeddings, which transformers "
                                 "reads; make them agree")  # fmt: skip
        else:
            r.ignore(share_key, _UNREAD + "; it agrees with tie_word_embeddings")


_DEFAULTS: dict[str, Any] = dict(
    vocab_size=256000, hidden_size=8192, intermediate_size=22528, num_hidden_layers=40, num_attention_heads=64,
    num_key_value_heads=None, hidden_act="silu", max_position_embeddings=8192, tie_word_embeddings=True,
    attention_bias=False, attention_dropout=0.0, sliding_window=4096,
)  # fmt: skip
FAMILIES = (
    Family("cohere2", "Cohere2Config", "Cohere2ForCausalLM (AutoModelForCausalLM)", "llama-2-7b", _DEFAULTS,
           _read_cohere2),
)  # fmt: skip
