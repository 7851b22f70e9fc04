"""LLaMA-style decoders (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM): RMSNorm, pre-norm, RoPE,
gated MLP, on :func:`embedcalc.sources.hf.core.read_core`.
"""

from __future__ import annotations

from embedcalc.sources.hf.core import read_core
from embedcalc.sources.hf.families.qwen3 import put_qwen_layout, qwen3_rule
from embedcalc.sources.hf.reader import Family, KeyReader


def _read_llama(r: KeyReader) -> None:
    read_core(r, qkv="attention_bias", out="attention_bias", ffn="mlp_bias")
    r.ignore("max_sequence_length", "a key of early (2023) LLaMA conversions that transformers never reads; the "
             "context is max_position_embeddings")  # fmt: skip


def _read_mistral(r: KeyReader) -> None:
    read_core(r, qkv=None, out=None, ffn=None)
    r.fixed("qkv_bias", False, "MistralAttention builds no biases")
    r.fixed("out_bias", False)
    r.fixed("ffn_bias", False)
    r.copy("sliding_window", "sliding_window", note="caps the KV cache at this many tokens (rolling buffer)")
    for key in ("attention_bias", "mlp_bias"):
        r.ignore(key, "MistralAttention and MistralMLP build no biases whatever this says")
    r.ignore(
        "layer_types", "MistralModel masks every layer with sliding_window and does not read layer_types"
    )


def read_qwen2(r: KeyReader) -> None:
    """Qwen2ForCausalLM: LLaMA-like with biases on q/k/v and none on o_proj or the MLP; sliding attention on the
    layers >= max_window_layers when use_sliding_window (Qwen2Config's layer_types rule, which Qwen3 shares)."""
    read_core(r, qkv=True, out=False, ffn=False)
    for key in ("attention_bias", "mlp_bias"):
        r.ignore(key, "Qwen2's modules fix their biases (q/k/v yes, o_proj and MLP no) whatever this says")
    put_qwen_layout(r, None, "layer_types", qwen3_rule)


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
                attention_dropout=0.0), read_qwen2),
)  # fmt: skip
