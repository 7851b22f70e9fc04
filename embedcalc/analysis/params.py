"""Exact parameter counts per component (DESIGN.md §4): every trainable parameter, tied weights once.

Conventions, matching the model ``embedcalc.modeling`` builds and Hugging Face's BertModel / GPT2LMHeadModel /
MarianModel for the presets:

- attention: one fused Q/K/V projection embed_dim -> (num_heads + 2 * num_kv_heads) * head_dim and an output
  projection (num_heads * head_dim) -> embed_dim; biases when ``bias``.
- FFN: embed_dim -> ffn_dim -> embed_dim; gated activations (swiglu, geglu) have gate and up projections, so three
  embed_dim x ffn_dim matrices (Shazeer 2020, "GLU Variants Improve Transformer").
- norms: LayerNorm 2 * embed_dim, RMSNorm embed_dim. Post-norm: one after each sublayer; pre-norm: one before
  each sublayer plus a final norm per stack.
- positions: learned tables are parameters (one per stack); sinusoidal and rope are not; relative (T5) is a
  buckets x num_heads table in the first block of each stack (Raffel et al. 2020, §2.1).
- encoder-decoder: one token table shared by encoder and decoder (Vaswani et al. 2017, §3.4); the LM head reuses
  it when ``tie_embeddings``. An untied LM head is vocab_size x embed_dim with no bias.
"""

from __future__ import annotations

from embedcalc.analysis.breakdown import Breakdown
from embedcalc.analysis.structure import Stack, ffn_in_width, norm_params, stacks
from embedcalc.config.schema import ModelConfig


def _linear(in_features: int, out_features: int, bias: bool) -> int:
    return in_features * out_features + (out_features if bias else 0)


def _block_params(config: ModelConfig, stack: Stack) -> list[tuple[str, int]]:
    """(key, count) for one block of ``stack``; keys are relative to the stack."""
    d, q, kv, f, b = config.embed_dim, config.q_dim, config.kv_dim, config.resolved_ffn_dim, config.bias
    terms = [
        ("attention/qkv", _linear(d, q + 2 * kv, b)),
        ("attention/out", _linear(q, d, b)),
        ("attention/norm", norm_params(config)),
    ]
    if stack.cross_attention:
        terms += [
            ("cross_attention/qkv", _linear(d, q + 2 * kv, b)),
            ("cross_attention/out", _linear(q, d, b)),
            ("cross_attention/norm", norm_params(config)),
        ]
    terms += [
        ("ffn/in", _linear(d, ffn_in_width(config), b)),
        ("ffn/out", _linear(f, d, b)),
        ("ffn/norm", norm_params(config)),
    ]
    return terms


def count_params(config: ModelConfig) -> Breakdown:
    """Trainable parameters of ``config`` by component; ``.total`` is the model's size."""
    d = config.embed_dim
    out = Breakdown()
    all_stacks = stacks(config)
    out.add("embedding/token", config.vocab_size * d)
    if config.position == "learned":
        out.add("embedding/position", len(all_stacks) * config.max_seq_len * d)
    if config.type_vocab_size:
        out.add("embedding/type", config.type_vocab_size * d)
    if config.resolved_embedding_norm:
        out.add("embedding/norm", len(all_stacks) * norm_params(config))
    for stack in all_stacks:
        if config.position == "relative":
            out.add(
                f"{stack.name}/attention/relative_bias",
                config.relative_attention_num_buckets * config.num_heads,
            )
        for key, count in _block_params(config, stack):
            out.add(f"{stack.name}/{key}", stack.num_layers * count)
        if config.resolved_norm_placement == "pre":
            out.add(f"{stack.name}/final_norm", norm_params(config))
    if config.resolved_pooler:
        out.add("pooler", _linear(d, d, config.bias))
    if config.resolved_lm_head and not config.tie_embeddings:
        out.add("head/lm", config.vocab_size * d)
    return out
