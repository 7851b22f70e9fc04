"""The one LLaMA-shaped decoder core every RoPE decoder family here reads first (issue 22: it replaces the two
readers ``read_llama_like`` and ``read_decoder`` that had grown apart).

A pre-norm (or parallel / sandwich) stack of RoPE attention and an MLP, no biases unless the family's modules have
them, an LM head tied as ``tie_word_embeddings`` says: the sizes (vocab, width, depth, heads, KV heads, an explicit
``head_dim``, the MLP width, the context), the activation, the attention dropout, and the RoPE keys (no
parameters). The family says the rest: its norm and placement, whether the MLP is gated, and where each bias comes
from (``qkv`` / ``out`` / ``ffn``: a bool the family's modules fix, a key of the file, or None when the family maps
it itself).
"""

from __future__ import annotations

from typing import Any

from embedcalc.sources.hf import keys as hf_keys
from embedcalc.sources.hf.mappings import map_activation, map_biases, map_dropout
from embedcalc.sources.hf.reader import Family, KeyReader

BiasSource = bool | str | None


def read_shape(r: KeyReader) -> None:
    """The LLaMA-named shape keys: vocab, width, MLP width, depth, heads, KV heads (null: the heads), an explicit
    ``head_dim`` (null, or absent from file and class: hidden_size / num_attention_heads), the context."""
    r.copy("vocab_size", "vocab_size")
    r.copy("hidden_size", "embed_dim")
    r.copy("intermediate_size", "ffn_dim")
    r.copy("num_hidden_layers", "num_layers")
    heads = r.copy("num_attention_heads", "num_heads")
    r.copy_or("num_key_value_heads", "num_kv_heads", heads, "null: num_attention_heads")
    if r.has("head_dim") or "head_dim" in r.family.defaults:
        r.copy("head_dim", "head_dim")
    r.copy(
        "max_position_embeddings", "max_seq_len", note="RoPE has no table; used for the extrapolation warning"
    )


def read_core(
    r: KeyReader,
    *,
    qkv: BiasSource,
    out: BiasSource,
    ffn: BiasSource,
    norm: str = "rmsnorm",
    gated: bool = True,
    act_key: str = "hidden_act",
    placement: str = "pre",
    learned_activations: dict[str, str] | None = None,
    dropout_key: str = "attention_dropout",
) -> None:
    """Map the core's keys (module docstring); ``qkv`` / ``out`` / ``ffn`` as :func:`map_biases` takes them,
    ``learned_activations`` as :func:`map_activation` does; ``dropout_key`` names the family's attention dropout
    (Mllama: ``dropout``)."""
    for name, value in (("architecture", "decoder"), ("norm", norm), ("norm_placement", placement),
                        ("embedding_norm", False), ("position", "rope"), ("bias", False),
                        ("lm_head", True)):  # fmt: skip
        r.fixed(name, value)
    read_shape(r)
    r.copy("tie_word_embeddings", "tie_embeddings")
    map_activation(r, act_key, gated=gated, learned=learned_activations)
    map_dropout(r, dropout_key)
    map_biases(r, **{part: source for part, source in (("qkv", qkv), ("out", out), ("ffn", ffn))
                     if source is not None})  # fmt: skip
    for key in ("rope_theta", "rope_scaling", "rope_parameters", "rope_type"):
        r.ignore(key, hf_keys.ROPE)


def read_row(r: KeyReader) -> None:
    """A family that is a row of data: the core with the row's arguments, and the row's ignored keys."""
    read_core(r, **r.family.core)
    for key, reason in r.family.ignored.items():
        r.ignore(key, reason)


def row(model_type: str, config_class: str, model: str, defaults: dict[str, Any], core: dict[str, Any],
        ignored: dict[str, str] | None = None, attribute_map: dict[str, str] | None = None) -> Family:  # fmt: skip
    """A LLaMA-shaped family that is only the core's arguments and ignored keys (counted as ``model``)."""
    return Family(model_type, config_class, f"{model} (AutoModelForCausalLM)", "llama-2-7b", defaults, read_row,
                  attribute_map or {}, core, ignored or {})  # fmt: skip
