"""gpt-oss (GptOssForCausalLM; OpenAI 2025, "gpt-oss-120b & gpt-oss-20b Model Card").

Attention with biases on q, k, v and o (``attention_bias``), a learned sink logit per head (``sinks``), and
``layer_types`` alternating sliding-window (``sliding_window``, 128) and full attention from layer 0. Every layer
is a mixture of ``num_local_experts`` experts of ``intermediate_size`` with biases on ``gate_up_proj`` and
``down_proj``, behind a router Linear(hidden, num_local_experts) with a bias; top ``num_experts_per_tok``. The
clamped SwiGLU (``swiglu_limit``, ``swiglu_alpha``) is element-wise. transformers' ``modeling_gpt_oss.py``.
"""

from __future__ import annotations

from embedcalc.sources.hf.core import read_core
from embedcalc.sources.hf.layered import (
    FULL,
    SLIDING,
    ignore_moe_keys,
    layer_types,
    origin,
    put_layout,
    read_moe,
)
from embedcalc.sources.hf.reader import Family, KeyReader


def _read_gpt_oss(r: KeyReader) -> None:
    read_core(r, qkv="attention_bias", out="attention_bias", ffn=False)
    r.put("attention", {"sinks": True}, "model_type", "family", "GptOssAttention.sinks: one logit per head")
    ignore_moe_keys(r)
    r.ignore("experts_per_token", "a duplicate of num_experts_per_tok that transformers never reads")
    r.ignore("initial_context_length", "the pre-training context before YaRN; " + "RoPE has no parameters")
    for key in ("swiglu_limit", "swiglu_alpha"):
        r.ignore(key, "the clamped SwiGLU's constants; element-wise only")
    moe = read_moe(r, "num_local_experts", width_key="intermediate_size",
                   extra={"router_bias": True, "expert_bias": True})  # fmt: skip
    if moe is not None:
        key = "num_local_experts, num_experts_per_tok, intermediate_size"
        r.put("ffn", moe, key, origin(r, key), "router and experts with biases")  # fmt: skip
    layers = r.data.get("num_layers")
    if not isinstance(layers, int):
        return
    window_key, window, _ = r.value("sliding_window")
    types_key, types = layer_types(r, layers, [SLIDING if (i + 1) % 2 else FULL for i in range(layers)])
    if types is None:
        return
    if window is None or SLIDING not in types:
        for key in (window_key, types_key):
            r.ignore(key, "no layer uses sliding attention")
        return
    names = ["local" if t == SLIDING else "default" for t in types]
    put_layout(r, names, {"local": {"attention": {"sliding_window": window}}}, f"{types_key}, {window_key}")


FAMILIES = (
    Family("gpt_oss", "GptOssConfig", "GptOssForCausalLM (AutoModelForCausalLM)", "gpt-oss-20b",
           dict(num_hidden_layers=36, num_local_experts=128, vocab_size=201088, hidden_size=2880,
                intermediate_size=2880, head_dim=64, num_attention_heads=64, num_key_value_heads=8,
                sliding_window=128, tie_word_embeddings=False, hidden_act="silu", max_position_embeddings=131072,
                attention_dropout=0.0, num_experts_per_tok=4, attention_bias=True), _read_gpt_oss,
           {"num_experts": "num_local_experts"}),
)  # fmt: skip
