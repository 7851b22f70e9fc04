"""LLaMA-style decoders (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM): RMSNorm, pre-norm, RoPE,
gated MLP; :func:`read_llama_like` is the base other LLaMA-like families build on.
"""

from __future__ import annotations

from embedcalc.config.hf import keys as hf_keys
from embedcalc.config.hf.reader import MISSING, Family, KeyReader, map_activation, map_dropout, yaml_hint


def read_llama_like(
    r: KeyReader,
    *,
    attention_bias: bool | None,
    mlp_bias: bool | None,
    norm: str = "rmsnorm",
    gated: bool = True,
    activation_key: str = "hidden_act",
    placement: str = "pre",
) -> None:
    """LLaMA-style decoders: RMSNorm (weight only), pre-norm, RoPE, gated MLP (gate, up, down), untied head by
    default. ``attention_bias`` / ``mlp_bias`` None: read from the file (LLaMA); a bool: fixed by the family (the
    caller maps the bias fields). ``norm`` / ``gated`` for the relatives that differ (LayerNorm, up/down MLPs)."""
    for name, value in (("architecture", "decoder"), ("norm", norm), ("norm_placement", placement),
                        ("embedding_norm", False), ("position", "rope"), ("bias", False),
                        ("lm_head", True)):  # fmt: skip
        r.fixed(name, value)
    r.copy("vocab_size", "vocab_size")
    r.copy("hidden_size", "embed_dim")
    r.copy("intermediate_size", "ffn_dim")
    r.copy("num_hidden_layers", "num_layers")
    heads = r.copy("num_attention_heads", "num_heads")
    r.copy_or("num_key_value_heads", "num_kv_heads", heads, "null: num_attention_heads")
    if r.has("head_dim") or r.family.defaults.get("head_dim") is not None:
        r.copy("head_dim", "head_dim")  # null keeps embedcalc's default, hidden_size / num_attention_heads
    r.copy(
        "max_position_embeddings", "max_seq_len", note="RoPE has no table; used for the extrapolation warning"
    )
    r.copy("tie_word_embeddings", "tie_embeddings")
    map_activation(r, activation_key, gated=gated)
    map_dropout(r, "attention_dropout")
    for key, name, fixed in (("attention_bias", "qkv_bias", attention_bias), ("attention_bias", "out_bias",
                             attention_bias), ("mlp_bias", "ffn_bias", mlp_bias)):  # fmt: skip
        if fixed is None:
            r.copy(key, name)
    for key in ("rope_theta", "rope_scaling", "rope_parameters", "rope_type"):
        r.ignore(key, hf_keys.ROPE)


def _read_llama(r: KeyReader) -> None:
    read_llama_like(r, attention_bias=None, mlp_bias=None)
    r.ignore(
        "pretraining_tp", "how Meta split matmuls over tensor-parallel ranks in pre-training; the same FLOPs"
    )
    r.ignore("max_sequence_length", "a key of early (2023) LLaMA conversions that transformers never reads; the "
             "context is max_position_embeddings")  # fmt: skip


def _read_mistral(r: KeyReader) -> None:
    read_llama_like(r, attention_bias=False, mlp_bias=False)
    r.fixed("qkv_bias", False, "MistralAttention builds no biases")
    r.fixed("out_bias", False)
    r.fixed("ffn_bias", False)
    r.copy("sliding_window", "sliding_window", note="caps the KV cache at this many tokens (rolling buffer)")
    for key in ("attention_bias", "mlp_bias"):
        r.ignore(key, "MistralAttention and MistralMLP build no biases whatever this says")
    r.ignore(
        "layer_types", "MistralModel masks every layer with sliding_window and does not read layer_types"
    )


def _read_qwen2(r: KeyReader) -> None:
    """Qwen2ForCausalLM: LLaMA-like with biases on q/k/v and none on o_proj or the MLP; sliding attention only on
    layers >= max_window_layers when use_sliding_window."""
    read_llama_like(r, attention_bias=True, mlp_bias=False)
    r.fixed("qkv_bias", True, "Qwen2Attention: q_proj, k_proj, v_proj with bias")
    r.fixed("out_bias", False, "Qwen2Attention: o_proj without bias")
    r.fixed("ffn_bias", False)
    for key in ("attention_bias", "mlp_bias"):
        r.ignore(key, "Qwen2's modules fix their biases (q/k/v yes, o_proj and MLP no) whatever this says")
    _qwen2_window(r)


def _qwen2_window(r: KeyReader) -> None:
    use_key, use, _ = r.value("use_sliding_window")
    window_key, window, _ = r.value("sliding_window")
    layers_key, first_sliding, _ = r.value("max_window_layers")
    types_key, types = r.lookup("layer_types")
    layers = r.data.get("num_layers")
    if types is MISSING or types is None:
        if use is not True or window is None or not isinstance(layers, int):
            reason = "no layer uses sliding attention (use_sliding_window is not true)"
            for key in (window_key, layers_key) + ((types_key,) if types is None else ()):
                r.ignore(key, reason)
            r.ignore(use_key, "false: every layer attends to the whole context")
            return
        types = ["sliding_attention" if window is not None and i >= first_sliding else "full_attention"
                 for i in range(layers)]  # fmt: skip
    kinds = set(types) if isinstance(types, list) else {None}
    if kinds <= {"full_attention"}:
        for key in (use_key, window_key, layers_key, types_key):
            r.ignore(key, "every layer is full_attention: no sliding window")
        return
    if kinds == {"sliding_attention"} and window is not None:
        r.put("sliding_window", window, window_key, "file", "every layer is sliding_attention")
        for key in (use_key, layers_key, types_key):
            r.ignore(key, "every layer is sliding_attention")
        return
    r.problem(types_key if types_key in r.raw else use_key,
              "layers mix full and sliding-window attention, which embedcalc does not model (the KV cache differs "
              f"per layer). {yaml_hint(r.family)}")  # fmt: skip


FAMILIES = (
    Family("llama", "LlamaConfig", "LlamaForCausalLM (AutoModelForCausalLM)", "llama-2-7b",
           dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                num_attention_heads=32, num_key_value_heads=None, hidden_act="silu", max_position_embeddings=2048,
                tie_word_embeddings=False, attention_bias=False, attention_dropout=0.0, mlp_bias=False,
                head_dim=None), _read_llama),
    Family("mistral", "MistralConfig", "MistralForCausalLM (AutoModelForCausalLM)", "mistral-7b",
           dict(vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                num_attention_heads=32, num_key_value_heads=8, head_dim=None, hidden_act="silu",
                max_position_embeddings=4096 * 32, tie_word_embeddings=False, sliding_window=4096,
                attention_dropout=0.0), _read_mistral),
    Family("qwen2", "Qwen2Config", "Qwen2ForCausalLM (AutoModelForCausalLM)", "llama-2-7b",
           dict(vocab_size=151936, hidden_size=4096, intermediate_size=22016, num_hidden_layers=32,
                num_attention_heads=32, num_key_value_heads=32, hidden_act="silu", max_position_embeddings=32768,
                tie_word_embeddings=False, use_sliding_window=False, sliding_window=4096, max_window_layers=28,
                attention_dropout=0.0), _read_qwen2),
)  # fmt: skip
