"""Exact parameter counts per component (DESIGN.md §4): every trainable parameter, tied weights once.

Conventions, matching the model ``embedcalc.modeling`` builds and Hugging Face's BertModel / GPT2LMHeadModel /
MarianModel for the presets:

- attention: Q/K/V projections embed_dim -> (num_heads + 2 * num_kv_heads) * head_dim (one fused tensor here, the
  layout Megatron-LM shards) and an output projection (num_heads * head_dim) -> embed_dim; biases per projection
  (``qkv_bias``, ``out_bias``, default ``bias``; Qwen2 has Q/K/V biases and no output bias).
- FFN: embed_dim -> ffn_dim -> embed_dim; gated activations (swiglu, geglu) have gate and up projections, so three
  embed_dim x ffn_dim matrices (Shazeer 2020, "GLU Variants Improve Transformer"); biases when ``ffn_bias``.
- norms: LayerNorm 2 * embed_dim (embed_dim with ``norm_bias: false``), RMSNorm embed_dim. Post-norm: one after
  each sublayer; pre-norm: one before each sublayer; a final norm per stack when ``final_norm`` (default: pre-norm).
- positions: learned tables are parameters (one per stack, max_seq_len + position_offset rows: OPT and RoBERTa
  keep 2 rows before position 0); sinusoidal and rope are not; relative (T5) is a buckets x num_heads table in the
  first block of each stack (Raffel et al. 2020, §2.1).
- token table vocab_size x token_embed_dim; when token_embed_dim differs from embed_dim (OPT-350m), bias-free
  projections token_embed_dim -> embed_dim after the lookup and embed_dim -> token_embed_dim before the LM head.
- encoder-decoder: one token table shared by encoder and decoder (Vaswani et al. 2017, §3.4); the LM head reuses
  it when ``tie_embeddings``. An untied LM head is vocab_size x token_embed_dim with no bias.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Literal

from embedcalc.analysis.breakdown import Breakdown
from embedcalc.analysis.structure import Stack, ffn_in_width, norm_has_bias, stacks
from embedcalc.config.schema import ModelConfig

# How Megatron-style tensor parallelism shards a tensor (Shoeybi et al. 2019, §3): column-parallel layers split
# their output features (weight and bias), row-parallel layers split their input features (the bias is
# replicated), vocab-parallel embeddings split their rows; everything else is replicated.
Split = Literal["column", "row", "vocab", "none"]


@dataclass(frozen=True)
class ParamTensor:
    """One kind of parameter tensor: its breakdown key, shape, how many identical copies, how TP shards it."""

    key: str
    shape: tuple[int, ...]
    copies: int = 1
    split: Split = "none"
    stack: str | None = None  # the stack whose layers hold it (pipeline stages split these), else None
    per_layer: bool = False

    @property
    def numel(self) -> int:
        return prod(self.shape) * self.copies


def _linear(key: str, in_f: int, out_f: int, bias: bool, split: Split) -> list[ParamTensor]:
    weight = ParamTensor(key, (out_f, in_f), split=split)
    if not bias:
        return [weight]
    return [weight, ParamTensor(key, (out_f,), split="column" if split == "column" else "none")]


def _norm(config: ModelConfig, key: str) -> list[ParamTensor]:
    d = config.embed_dim
    return (
        [ParamTensor(key, (d,)), ParamTensor(key, (d,))]
        if norm_has_bias(config)
        else [ParamTensor(key, (d,))]
    )


def _block(config: ModelConfig, stack: Stack) -> list[ParamTensor]:
    """The tensors of one block of ``stack``; keys are relative to the stack."""
    d, q, kv, f = config.embed_dim, config.q_dim, config.kv_dim, config.resolved_ffn_dim
    attention_kinds = ["attention", "cross_attention"] if stack.cross_attention else ["attention"]
    out: list[ParamTensor] = []
    for kind in attention_kinds:
        out += _linear(f"{kind}/qkv", d, q + 2 * kv, config.resolved_qkv_bias, "column")
        out += _linear(f"{kind}/out", q, d, config.resolved_out_bias, "row")
        out += _norm(config, f"{kind}/norm")
    out += _linear("ffn/in", d, ffn_in_width(config), config.resolved_ffn_bias, "column")
    out += _linear("ffn/out", f, d, config.resolved_ffn_bias, "row")
    out += _norm(config, "ffn/norm")
    return out


def param_tensors(config: ModelConfig) -> list[ParamTensor]:
    """Every parameter tensor of ``config`` (tied weights once), with its breakdown key and TP split."""
    d, d_tok = config.embed_dim, config.resolved_token_embed_dim
    all_stacks = stacks(config)
    out = [ParamTensor("embedding/token", (config.vocab_size, d_tok), split="vocab")]
    if config.embedding_projection:
        out.append(ParamTensor("embedding/project_in", (d, d_tok)))
    if config.position == "learned":
        out.append(ParamTensor("embedding/position", (config.position_rows, d), copies=len(all_stacks)))
    if config.type_vocab_size:
        out.append(ParamTensor("embedding/type", (config.type_vocab_size, d)))
    if config.resolved_embedding_norm:
        out += [ParamTensor(t.key, t.shape, copies=len(all_stacks)) for t in _norm(config, "embedding/norm")]
    for stack in all_stacks:
        if config.position == "relative":
            shape = (config.relative_attention_num_buckets, config.num_heads)
            out.append(ParamTensor(f"{stack.name}/attention/relative_bias", shape, stack=stack.name))
        for t in _block(config, stack):
            out.append(
                ParamTensor(f"{stack.name}/{t.key}", t.shape, stack.num_layers, t.split, stack.name, True)
            )
        if config.resolved_final_norm:
            out += [
                ParamTensor(f"{stack.name}/final_norm", t.shape, stack=stack.name)
                for t in _norm(config, "final_norm")
            ]
    if config.resolved_pooler:
        out += _linear("pooler", d, d, config.bias, "none")
    if config.resolved_lm_head and config.embedding_projection:
        out.append(ParamTensor("head/project_out", (d_tok, d)))
    if config.resolved_lm_head and not config.tie_embeddings:
        out.append(ParamTensor("head/lm", (config.vocab_size, d_tok), split="vocab"))
    return out


def count_params(config: ModelConfig) -> Breakdown:
    """Trainable parameters of ``config`` by component; ``.total`` is the model's size."""
    out = Breakdown()
    for tensor in param_tensors(config):
        out.add(tensor.key, tensor.numel)
    return out
