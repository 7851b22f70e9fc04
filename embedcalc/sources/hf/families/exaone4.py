"""EXAONE 4.0 (Exaone4ForCausalLM); LG AI Research 2025, "EXAONE 4.0"; transformers' ``configuration_exaone4.py``
/ ``modeling_exaone4.py``.

LLaMA-shaped without any bias, with q_norm / k_norm RMSNorm(head_dim) and RMSNorms *after* each sublayer inside
the residual (``post_attention_layernorm``, ``post_feedforward_layernorm``; none before) plus the final norm: the
same parameters and matmuls as pre-norm, so counted as pre-norm (as OLMo 2). head_dim is the file's, else
hidden_size // num_attention_heads. Sliding-window layers (``sliding_window``; global layers are NoPE, which has
no parameters) by ``layer_types``, else ``sliding_window_pattern``: an int p makes every p-th layer global; a
string of L (local) and G (global) repeats from layer 0 with the last layer always global (the config's
docstring); with ``sliding_window`` null every layer is global.
"""

from __future__ import annotations

from typing import Any

from embedcalc.sources.hf.core import read_core
from embedcalc.sources.hf.layered import FULL, SLIDING, pattern_types, put_window_layout
from embedcalc.sources.hf.reader import Family, KeyReader


def derive_window_types(r: KeyReader, layers: int, pattern_key: str, pattern: Any) -> list[str] | None:
    """Per-layer types from ``sliding_window_pattern`` (None and a problem when it is malformed)."""
    if pattern is None or pattern == 0:
        return [FULL] * layers
    if isinstance(pattern, int) and not isinstance(pattern, bool) and pattern > 0:
        return pattern_types(layers, pattern)
    if isinstance(pattern, str) and pattern and set(pattern) <= {"L", "G"}:
        return [
            SLIDING if i != layers - 1 and pattern[i % len(pattern)] == "L" else FULL for i in range(layers)
        ]
    r.problem(pattern_key, f"{pattern_key} = {pattern!r} must be a positive integer or a string of L and G")
    return None


def _windows(r: KeyReader) -> None:
    layers = r.data.get("num_layers")
    window_key, window, _ = r.value("sliding_window")
    pattern_key, pattern, _ = r.value("sliding_window_pattern")
    if not isinstance(layers, int):
        return
    derived = derive_window_types(r, layers, pattern_key, pattern if window is not None else None)
    if derived is None:
        return
    put_window_layout(r, layers, derived, window, window_key, pattern_key)


def _read_exaone4(r: KeyReader) -> None:
    read_core(r, qkv=False, out=False, ffn=False)
    r.fixed(
        "norm_placement", "pre", "post-sublayer RMSNorms and a final norm: the same parameters as pre-norm"
    )
    r.put("attention", {"qk_norm": "head"}, "model_type", "family", "q_norm, k_norm: RMSNorm(head_dim)")
    for key in ("attention_bias", "mlp_bias"):
        r.ignore(key, "Exaone4Attention and Exaone4MLP build no biases whatever this says")
    _windows(r)


FAMILIES = (
    Family("exaone4", "Exaone4Config", "Exaone4ForCausalLM (AutoModelForCausalLM)", "llama-2-7b",
           dict(vocab_size=102400, hidden_size=4096, intermediate_size=16384, num_hidden_layers=32,
                num_attention_heads=32, num_key_value_heads=32, hidden_act="silu", max_position_embeddings=2048,
                tie_word_embeddings=False, attention_dropout=0.0, sliding_window=4096, sliding_window_pattern=4),
           _read_exaone4),
)  # fmt: skip
