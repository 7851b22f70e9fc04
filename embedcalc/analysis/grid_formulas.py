"""The closed forms behind the numpy grid: params, FLOPs and memory as expressions over per-point sizes.

A second implementation of :mod:`embedcalc.analysis.params`, :mod:`embedcalc.analysis.flops` and
:mod:`embedcalc.analysis.memory` (their docstrings state the conventions and cite the sources). Every function
works on numpy arrays (one entry per grid point) and on Python ints alike; :mod:`embedcalc.analysis.grid` decides
which, and proves int64 safe by evaluating these same formulas on Python ints at the grid maxima.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeAlias

from embedcalc.analysis.memory import FP32_BYTES, MASK_BYTES
from embedcalc.analysis.structure import Stack, norm_has_bias, stacks
from embedcalc.analysis.workload import WEIGHT_ONLY_DTYPES, Workload
from embedcalc.config.schema import ModelConfig

# A per-point integer array (int64 or object dtype), or a Python int when the formulas compute upper bounds.
Num: TypeAlias = Any


@dataclass(frozen=True)
class Dims:
    """Sizes per point (arrays) or their maxima (ints); names follow flops.py: d, q, kv, f, hd, h."""

    d: Num
    d_tok: Num  # token_embed_dim (fixed) or embed_dim
    h: Num
    hd: Num
    q: Num
    kv: Num
    f: Num
    f_in: Num
    layers: Num
    decoder_layers: Num
    b: Num
    n: Num  # encoder / decoder-only tokens per sequence
    n_dec: Num  # decoder tokens of an encoder-decoder (tgt_len, default seq_len)


@dataclass(frozen=True)
class Context:
    """What the formulas need besides the sizes: the fixed config, the workload and the reduction helper."""

    config: ModelConfig
    workload: Workload
    maximum: Callable[[Num, Num], Num]
    minimum: Callable[[Num, Num], Num]

    @property
    def e(self) -> int:
        return self.workload.activation_bytes

    @property
    def gen_tokens(self) -> int:
        return self.workload.gen_tokens

    @property
    def optimizer(self) -> str:
        return self.workload.optimizer


def stack_sizes(x: Dims, config: ModelConfig, stack: Stack) -> tuple[Num, Num, Num]:
    """(layers, tokens per sequence, tokens of the encoder memory it attends to) of ``stack``."""
    if config.architecture == "encoder-decoder" and stack.name == "decoder":
        return x.decoder_layers, x.n_dec, x.n
    return x.layers, x.n, x.n


# --- params (params.py) -----------------------------------------------------------------------------------------


def _linear(in_features: Num, out_features: Num, bias: bool) -> Num:
    return in_features * out_features + out_features if bias else in_features * out_features


def _params(x: Dims, ctx: Context) -> Num:
    c, d = ctx.config, x.d
    norm = 2 * d if norm_has_bias(c) else d
    all_stacks = stacks(c)
    total = c.vocab_size * x.d_tok
    if c.embedding_projection:
        total = total + d * x.d_tok  # embedding/project_in
    if c.position == "learned":
        total = total + len(all_stacks) * c.position_rows * d
    if c.type_vocab_size:
        total = total + c.type_vocab_size * d
    if c.resolved_embedding_norm:
        total = total + len(all_stacks) * norm
    attention = _linear(d, x.q + 2 * x.kv, c.resolved_qkv_bias) + _linear(x.q, d, c.resolved_out_bias) + norm
    ffn = _linear(d, x.f_in, c.resolved_ffn_bias) + _linear(x.f, d, c.resolved_ffn_bias) + norm
    for stack in all_stacks:
        layers, _, _ = stack_sizes(x, c, stack)
        if c.position == "relative":
            total = total + c.relative_attention_num_buckets * x.h
        block = attention + attention + ffn if stack.cross_attention else attention + ffn
        total = total + layers * block
        if c.resolved_final_norm:
            total = total + norm
    if c.resolved_pooler:
        total = total + _linear(d, d, c.bias)
    if c.resolved_lm_head and c.embedding_projection:
        total = total + d * x.d_tok  # head/project_out
    if c.resolved_lm_head and not c.tie_embeddings:
        total = total + c.vocab_size * x.d_tok
    return total


# --- FLOPs (flops.py) -------------------------------------------------------------------------------------------


def _flops(x: Dims, ctx: Context, causal: bool) -> tuple[Num, Num]:
    """(forward matmul FLOPs, the attention-score part of them) with full or causal self-attention scores."""
    c, d, b = ctx.config, x.d, x.b
    all_stacks = stacks(c)
    total: Num = 0
    scores: Num = 0
    for stack in all_stacks:
        layers, n, n_mem = stack_sizes(x, c, stack)
        t = b * n
        if c.embedding_projection:
            total = total + 2 * t * x.d_tok * d  # embedding/project_in on this stack's tokens
        if causal and stack.causal and c.sliding_window is not None:
            m = ctx.minimum(n, c.sliding_window)
            pairs = m * (m + 1) // 2 + (n - m) * c.sliding_window
        else:
            pairs = n * (n + 1) // 2 if causal and stack.causal else n * n
        self_scores = layers * 2 * b * x.h * pairs * x.hd * 2  # Q·Kᵀ and A·V
        linear = layers * 2 * t * d * (x.q + 2 * x.kv) + layers * 2 * t * x.q * d
        linear = linear + layers * 2 * t * d * x.f_in + layers * 2 * t * x.f * d
        scores = scores + self_scores
        if stack.cross_attention:
            cross_scores = layers * 2 * b * x.h * n * n_mem * x.hd * 2
            linear = (
                linear + layers * (2 * t * d * x.q + 2 * b * n_mem * d * 2 * x.kv) + layers * 2 * t * x.q * d
            )
            scores = scores + cross_scores
        total = total + linear
    if c.resolved_pooler:
        total = total + 2 * b * d * d
    if c.resolved_lm_head:
        _, n_last, _ = stack_sizes(x, c, all_stacks[-1])
        if c.embedding_projection:
            total = total + 2 * b * n_last * d * x.d_tok  # head/project_out
        total = total + 2 * b * n_last * x.d_tok * c.vocab_size
    return total + scores, scores


# --- memory (memory.py) -----------------------------------------------------------------------------------------


def _weight_bytes(params: Num, dtype: str) -> Num:
    if dtype == "int4":
        return (params + 1) // 2
    return params * {"float32": 4, "bfloat16": 2, "float16": 2, "int8": 1}[dtype]


def _kv_cache_bytes(x: Dims, ctx: Context) -> Num:
    """memory.kv_cache_bytes: K and V of the prompt and generated tokens (and an encoder-decoder's source)."""
    c, e, generated = ctx.config, ctx.e, ctx.gen_tokens
    if c.architecture == "encoder":
        return 0
    cached = (x.n if c.architecture == "decoder" else x.n_dec) + generated
    if c.sliding_window is not None:
        cached = ctx.minimum(cached, c.sliding_window)
    if c.architecture == "decoder":
        return 2 * x.b * cached * x.layers * x.kv * e
    return 2 * x.b * (cached + x.n) * x.decoder_layers * x.kv * e


def _adafactor_state(x: Dims, ctx: Context) -> Num:
    """Adafactor's factored state (memory.optimizer_state_bytes): rows + columns per matrix, numel per vector."""
    c, d = ctx.config, x.d
    norm = 2 * d if norm_has_bias(c) else d
    all_stacks = stacks(c)
    state = c.vocab_size + x.d_tok
    if c.embedding_projection:
        state = state + d + x.d_tok  # embedding/project_in
    if c.position == "learned":
        state = state + len(all_stacks) * (c.position_rows + d)
    if c.type_vocab_size:
        state = state + c.type_vocab_size + d
    if c.resolved_embedding_norm:
        state = state + len(all_stacks) * norm
    qkv = x.q + 2 * x.kv
    attention = (qkv + d) + (d + x.q) + norm
    attention = attention + (qkv if c.resolved_qkv_bias else 0) + (d if c.resolved_out_bias else 0)
    ffn = (x.f_in + d) + (d + x.f) + norm + ((x.f_in + d) if c.resolved_ffn_bias else 0)
    for stack in all_stacks:
        layers, _, _ = stack_sizes(x, c, stack)
        if c.position == "relative":
            state = state + c.relative_attention_num_buckets + x.h
        block = attention + attention + ffn if stack.cross_attention else attention + ffn
        state = state + layers * block
        if c.resolved_final_norm:
            state = state + norm
    if c.resolved_pooler:
        state = state + 2 * d + (d if c.bias else 0)
    if c.resolved_lm_head and c.embedding_projection:
        state = state + x.d_tok + d  # head/project_out
    if c.resolved_lm_head and not c.tie_embeddings:
        state = state + c.vocab_size + x.d_tok
    return state


def _optimizer_bytes(params: Num, x: Dims, ctx: Context, mixed: bool) -> Num:
    """fp32 optimizer state plus, in mixed precision, the fp32 master copy of the weights."""
    optimizer = ctx.optimizer
    if optimizer == "adamw":
        state = 2 * params
    elif optimizer == "sgd":
        state = params
    else:
        state = _adafactor_state(x, ctx)
    return FP32_BYTES * (state + params) if mixed else FP32_BYTES * state


def _peak_activations(x: Dims, ctx: Context) -> Num:
    """The largest stage of one forward pass (memory.peak_inference_activations)."""
    c, w, e, b, d = ctx.config, ctx.workload, ctx.e, x.b, x.d
    all_stacks = stacks(c)
    stages: list[Num] = []
    for stack in all_stacks:
        _, n, n_mem = stack_sizes(x, c, stack)
        t = b * n
        base = 2 * e * t * d + (e * b * n_mem * d if stack.cross_attention else 0)
        attention = e * t * (x.q + 2 * x.kv) + e * t * x.q
        if w.attention == "eager":
            attention = attention + 2 * e * b * x.h * n * n
        stages += [base + attention, base + e * t * x.f * (3 if c.gated else 2)]
    if c.resolved_lm_head:
        _, n_last, _ = stack_sizes(x, c, all_stacks[-1])
        stages.append(e * b * n_last * (x.d_tok + c.vocab_size))
    return functools.reduce(ctx.maximum, stages)


def _attention_saved(x: Dims, ctx: Context, n: Num, n_kv: Num, cross: bool) -> tuple[Num, Num]:
    """memory._attention_saved: (linear, scores) saved bytes of one attention sublayer with no recomputation."""
    w, e, b, d = ctx.workload, ctx.e, x.b, x.d
    dropout = ctx.config.dropout > 0
    saved = e * b * n * d + e * b * n * x.q + e * b * n_kv * 2 * x.kv + e * b * n * x.q
    if cross:  # K and V come from the encoder output, saved as their input
        saved = saved + e * b * n_kv * d
    if dropout:
        saved = saved + MASK_BYTES * b * n * d
    if w.attention == "sdpa":
        scores: Num = FP32_BYTES * b * x.h * n  # log-sum-exp statistics
    else:
        per_score = e + ((MASK_BYTES + e) if dropout else 0)
        scores = per_score * b * x.h * n * n_kv
    return saved, scores


def _saved_activations(x: Dims, ctx: Context) -> Num:
    """memory.saved_activations: activations kept for the backward pass (+ the recompute working set)."""
    c, w, e, b, d = ctx.config, ctx.workload, ctx.e, x.b, x.d
    dropout = c.dropout > 0
    all_stacks = stacks(c)
    total: Num = 0
    working_sets: list[Num] = []
    for stack in all_stacks:
        layers, n, n_mem = stack_sizes(x, c, stack)
        t = b * n
        total = total + e * t * d + (MASK_BYTES * t * d if dropout else 0)
        if c.embedding_projection:
            total = total + e * t * x.d_tok  # the input of embedding/project_in
        linear, scores = _attention_saved(x, ctx, n, n, cross=False)
        if stack.cross_attention:
            cross_linear, cross_scores = _attention_saved(x, ctx, n, n_mem, cross=True)
            linear, scores = linear + cross_linear, scores + cross_scores
        plain = linear + scores + e * t * d + e * t * x.f * (4 if c.gated else 2)
        if dropout:
            plain = plain + MASK_BYTES * t * d
        plain = plain + (3 if stack.cross_attention else 2) * e * t * d
        if w.recompute == "full":
            layer: Num = e * t * d
            working_sets.append(plain)
        elif w.recompute == "selective":
            keep_scores = scores if w.attention == "sdpa" else 0  # sdpa's statistics are kept either way
            layer = plain - scores + keep_scores
            working_sets.append(0 if w.attention == "sdpa" else scores)
        else:
            layer = plain
        total = total + layers * layer
        if c.resolved_final_norm:
            total = total + e * t * d
    if c.resolved_lm_head:
        _, n_last, _ = stack_sizes(x, c, all_stacks[-1])
        t = b * n_last
        total = total + e * t * d + FP32_BYTES * t * c.vocab_size
        if c.embedding_projection:
            total = total + e * t * x.d_tok  # the LM head's input after head/project_out
    if c.resolved_pooler:
        total = total + e * b * d
    if working_sets:
        total = total + functools.reduce(ctx.maximum, working_sets)
    return total


# --- all quantities of a point ---------------------------------------------------------------------------


def quantities(x: Dims, ctx: Context) -> dict[str, Num]:
    c, dtype = ctx.config, ctx.workload.dtype
    params = _params(x, ctx)
    forward, scores = _flops(x, ctx, causal=False)
    out: dict[str, Num] = {
        "params": params,
        "flops_forward": forward,
        "flops_attention_scores": scores,
        "flops_other": forward - scores,
        "flops_training_step": 3 * forward,
    }
    if any(s.causal for s in stacks(c)):
        out["flops_forward_causal"] = _flops(x, ctx, causal=True)[0]
    weights, activations, kv_cache = (
        _weight_bytes(params, dtype),
        _peak_activations(x, ctx),
        _kv_cache_bytes(x, ctx),
    )
    out |= {
        "inference_weights_bytes": weights,
        "inference_activations_bytes": activations,
        "kv_cache_bytes": kv_cache,
        "inference_total_bytes": weights + activations + kv_cache,
    }
    if dtype not in WEIGHT_ONLY_DTYPES:
        mixed = dtype != "float32"
        saved, optimizer = _saved_activations(x, ctx), _optimizer_bytes(params, x, ctx, mixed)
        out |= {
            "training_weights_bytes": params * (2 if mixed else 4),
            "gradients_bytes": params * (2 if mixed else 4),
            "optimizer_bytes": optimizer,
            "training_activations_bytes": saved,
            "training_total_bytes": params * (4 if mixed else 8) + optimizer + saved,
        }
    # crossover.py: n* = (2 d (q + 2 kv) + 2 q d + 2 d f_in + 2 f d) / (4 q)
    out["crossover_numerator"] = 2 * x.d * (x.q + 2 * x.kv) + 2 * x.q * x.d + 2 * x.d * x.f_in + 2 * x.f * x.d
    out["crossover_denominator"] = 4 * x.q
    return out
