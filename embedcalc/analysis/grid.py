"""Params, FLOPs and memory of a whole grid of configs and workloads at once, with numpy, exactly.

This is a second implementation of the closed forms of :mod:`embedcalc.analysis.params`,
:mod:`embedcalc.analysis.flops` and :mod:`embedcalc.analysis.memory` (their docstrings state the conventions and
cite the sources): one vectorised expression per quantity instead of a Python loop over configs. The fixed parts
of the config come from a validated ``template``; the swept quantities (embed_dim, num_heads, num_layers, ffn_dim,
batch_size, seq_len) are per-point arrays. ``tests/test_sweep.py`` checks it against the per-config analyzer.

Exactness (DESIGN.md §4: never a silently wrapped number). Every quantity is a polynomial with non-negative
coefficients in the per-point sizes, so evaluating the *same* formulas on Python ints at the grid maxima (every
factor at least 1) bounds every value and every intermediate product. When that bound stays under
:data:`INT64_SAFE_BOUND` (2**62, which leaves room for the ``n (n + 1)`` before the halving and for sums) the grid
is evaluated in int64; otherwise in numpy object arrays of Python ints: the same code, exact at any size, slower.
:attr:`GridResult.method` says which, and the caller tells the user.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

import numpy as np

from embedcalc.analysis.memory import FP32_BYTES, MASK_BYTES
from embedcalc.analysis.structure import Stack, norm_has_bias, stacks
from embedcalc.analysis.workload import WEIGHT_ONLY_DTYPES, Parallelism, Workload
from embedcalc.config.schema import ModelConfig

INT64_SAFE_BOUND = 2**62
GRID_AXES = ("embed_dim", "num_heads", "num_layers", "ffn_dim", "batch_size", "seq_len")

# A per-point integer array (int64 or object dtype), or a Python int when the formulas compute upper bounds.
Num: TypeAlias = Any
Method = Literal["int64", "python-int"]


@dataclass(frozen=True)
class GridResult:
    """Per-point columns (1-D arrays of one length), and how they were computed.

    Columns: ``params``; ``flops_forward``, ``flops_attention_scores`` (keys ending /scores and /context),
    ``flops_other`` (forward minus scores), ``flops_forward_causal`` (only when a stack is causal),
    ``flops_training_step``; inference memory ``inference_weights_bytes``, ``inference_activations_bytes``,
    ``kv_cache_bytes``, ``inference_total_bytes``; training memory (absent for the weight-only int8/int4 dtypes)
    ``training_weights_bytes``, ``gradients_bytes``, ``optimizer_bytes``, ``training_activations_bytes``,
    ``training_total_bytes``; ``crossover_numerator`` / ``crossover_denominator`` (n* as a fraction); and the
    resolved ``head_dim`` and ``ffn_dim``.
    """

    columns: dict[str, np.ndarray]
    method: Method
    bound: int  # the largest upper bound over all quantities

    def __getitem__(self, key: str) -> np.ndarray:
        return self.columns[key]


@dataclass(frozen=True)
class _Dims:
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
class _Context:
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


# --- sizes -------------------------------------------------------------------------------------------------------


def _axis_max(values: Mapping[str, Sequence[int]], name: str, default: int) -> int:
    return max(values[name]) if name in values else default


def _bound_dims(config: ModelConfig, workload: Workload, values: Mapping[str, Sequence[int]]) -> _Dims:
    """Upper bounds of every size over the grid, each at least 1 (so partial products never exceed the bound)."""
    d = _axis_max(values, "embed_dim", config.embed_dim)
    h = _axis_max(values, "num_heads", config.num_heads)
    h_min = min(values["num_heads"]) if "num_heads" in values else config.num_heads
    if config.head_dim is not None:
        hd, q = config.head_dim, h * config.head_dim
    else:
        hd, q = max(d // h_min, 1), d  # h * (d // h) <= d
    kv = config.num_kv_heads * hd if config.num_kv_heads is not None else q
    f = _axis_max(values, "ffn_dim", config.ffn_dim if config.ffn_dim is not None else 4 * d)
    layers = _axis_max(values, "num_layers", config.num_layers)
    decoder_layers = config.num_decoder_layers if config.num_decoder_layers is not None else layers
    n = _axis_max(values, "seq_len", workload.seq_len)
    n_dec = workload.tgt_len if workload.tgt_len is not None else n
    return _Dims(
        d=d,
        d_tok=config.token_embed_dim if config.token_embed_dim is not None else d,
        h=h,
        hd=hd,
        q=max(q, 1),
        kv=max(kv, 1),
        f=f,
        f_in=2 * f if config.gated else f,
        layers=layers,
        decoder_layers=max(decoder_layers, 1),
        b=_axis_max(values, "batch_size", workload.batch_size),
        n=n,
        n_dec=max(n_dec, 1),
    )


def _array_dims(
    config: ModelConfig,
    workload: Workload,
    values: Mapping[str, Sequence[int]],
    index: Mapping[str, np.ndarray],
    size: int,
    dtype: type | np.dtype[Any],
) -> _Dims:
    """Per-point sizes: swept axes indexed from their values, fixed ones from the template and workload."""

    def column(name: str, fixed: int) -> np.ndarray:
        if name in values:
            table: np.ndarray = np.asarray(list(values[name]), dtype=dtype)
            return np.asarray(table[index[name]])
        return np.full(size, fixed, dtype=dtype)

    d = column("embed_dim", config.embed_dim)
    h = column("num_heads", config.num_heads)
    hd = np.full(size, config.head_dim, dtype=dtype) if config.head_dim is not None else d // h
    kvh = np.full(size, config.num_kv_heads, dtype=dtype) if config.num_kv_heads is not None else h
    if "ffn_dim" in values:
        f = column("ffn_dim", 0)
    else:
        f = np.full(size, config.ffn_dim, dtype=dtype) if config.ffn_dim is not None else 4 * d
    layers = column("num_layers", config.num_layers)
    decoder_layers = (
        np.full(size, config.num_decoder_layers, dtype=dtype)
        if config.num_decoder_layers is not None
        else layers
    )
    n = column("seq_len", workload.seq_len)
    n_dec = np.full(size, workload.tgt_len, dtype=dtype) if workload.tgt_len is not None else n
    return _Dims(
        d=d,
        d_tok=np.full(size, config.token_embed_dim, dtype=dtype) if config.token_embed_dim is not None else d,
        h=h,
        hd=hd,
        q=h * hd,
        kv=kvh * hd,
        f=f,
        f_in=2 * f if config.gated else f,
        layers=layers,
        decoder_layers=decoder_layers,
        b=column("batch_size", workload.batch_size),
        n=n,
        n_dec=n_dec,
    )


def _stack_sizes(x: _Dims, config: ModelConfig, stack: Stack) -> tuple[Num, Num, Num]:
    """(layers, tokens per sequence, tokens of the encoder memory it attends to) of ``stack``."""
    if config.architecture == "encoder-decoder" and stack.name == "decoder":
        return x.decoder_layers, x.n_dec, x.n
    return x.layers, x.n, x.n


# --- params (params.py) -----------------------------------------------------------------------------------------


def _linear(in_features: Num, out_features: Num, bias: bool) -> Num:
    return in_features * out_features + out_features if bias else in_features * out_features


def _params(x: _Dims, ctx: _Context) -> Num:
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
        layers, _, _ = _stack_sizes(x, c, stack)
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


def _flops(x: _Dims, ctx: _Context, causal: bool) -> tuple[Num, Num]:
    """(forward matmul FLOPs, the attention-score part of them) with full or causal self-attention scores."""
    c, d, b = ctx.config, x.d, x.b
    all_stacks = stacks(c)
    total: Num = 0
    scores: Num = 0
    for stack in all_stacks:
        layers, n, n_mem = _stack_sizes(x, c, stack)
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
        _, n_last, _ = _stack_sizes(x, c, all_stacks[-1])
        if c.embedding_projection:
            total = total + 2 * b * n_last * d * x.d_tok  # head/project_out
        total = total + 2 * b * n_last * x.d_tok * c.vocab_size
    return total + scores, scores


# --- memory (memory.py) -----------------------------------------------------------------------------------------


def _weight_bytes(params: Num, dtype: str) -> Num:
    if dtype == "int4":
        return (params + 1) // 2
    return params * {"float32": 4, "bfloat16": 2, "float16": 2, "int8": 1}[dtype]


def _kv_cache_bytes(x: _Dims, ctx: _Context) -> Num:
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


def _adafactor_state(x: _Dims, ctx: _Context) -> Num:
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
        layers, _, _ = _stack_sizes(x, c, stack)
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


def _optimizer_bytes(params: Num, x: _Dims, ctx: _Context, mixed: bool) -> Num:
    """fp32 optimizer state plus, in mixed precision, the fp32 master copy of the weights."""
    optimizer = ctx.optimizer
    if optimizer == "adamw":
        state = 2 * params
    elif optimizer == "sgd":
        state = params
    else:
        state = _adafactor_state(x, ctx)
    return FP32_BYTES * (state + params) if mixed else FP32_BYTES * state


def _peak_activations(x: _Dims, ctx: _Context) -> Num:
    """The largest stage of one forward pass (memory.peak_inference_activations)."""
    c, w, e, b, d = ctx.config, ctx.workload, ctx.e, x.b, x.d
    all_stacks = stacks(c)
    stages: list[Num] = []
    for stack in all_stacks:
        _, n, n_mem = _stack_sizes(x, c, stack)
        t = b * n
        base = 2 * e * t * d + (e * b * n_mem * d if stack.cross_attention else 0)
        attention = e * t * (x.q + 2 * x.kv) + e * t * x.q
        if w.attention == "eager":
            attention = attention + 2 * e * b * x.h * n * n
        stages += [base + attention, base + e * t * x.f * (3 if c.gated else 2)]
    if c.resolved_lm_head:
        _, n_last, _ = _stack_sizes(x, c, all_stacks[-1])
        stages.append(e * b * n_last * (x.d_tok + c.vocab_size))
    return functools.reduce(ctx.maximum, stages)


def _attention_saved(x: _Dims, ctx: _Context, n: Num, n_kv: Num, cross: bool) -> tuple[Num, Num]:
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


def _saved_activations(x: _Dims, ctx: _Context) -> Num:
    """memory.saved_activations: activations kept for the backward pass (+ the recompute working set)."""
    c, w, e, b, d = ctx.config, ctx.workload, ctx.e, x.b, x.d
    dropout = c.dropout > 0
    all_stacks = stacks(c)
    total: Num = 0
    working_sets: list[Num] = []
    for stack in all_stacks:
        layers, n, n_mem = _stack_sizes(x, c, stack)
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
        _, n_last, _ = _stack_sizes(x, c, all_stacks[-1])
        t = b * n_last
        total = total + e * t * d + FP32_BYTES * t * c.vocab_size
        if c.embedding_projection:
            total = total + e * t * x.d_tok  # the LM head's input after head/project_out
    if c.resolved_pooler:
        total = total + e * b * d
    if working_sets:
        total = total + functools.reduce(ctx.maximum, working_sets)
    return total


# --- the grid ---------------------------------------------------------------------------------------------------


def _quantities(x: _Dims, ctx: _Context) -> dict[str, Num]:
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


def grid_bound(config: ModelConfig, workload: Workload, values: Mapping[str, Sequence[int]]) -> int:
    """An upper bound of every quantity (and every intermediate product) over the grid, in Python ints."""
    ctx = _Context(config, workload, maximum=max, minimum=min)
    return int(max(_quantities(_bound_dims(config, workload, values), ctx).values()))


def evaluate_grid(
    config: ModelConfig,
    workload: Workload,
    values: Mapping[str, Sequence[int]],
    index: Mapping[str, np.ndarray],
    force_python_ints: bool = False,
) -> GridResult:
    """Evaluate every quantity at every point of the grid.

    ``config`` gives the fixed fields (a validated config whose swept fields are ignored), ``workload`` the dtype,
    mode, attention and recompute (and batch_size / seq_len / tgt_len when not swept). ``values`` maps each swept
    axis (:data:`GRID_AXES`) to its values, ``index`` to each point's position in them (equal-length int arrays).
    Invalid points (as :mod:`embedcalc.analysis.sweep` judges them) get numbers too; the caller masks them.
    """
    unknown = set(values) - set(GRID_AXES)
    if unknown:
        raise ValueError(f"not sweepable: {', '.join(sorted(unknown))}")
    if workload.parallel != Parallelism():
        raise ValueError("the grid evaluates one device; tensor/pipeline/data parallelism is not supported")
    size = len(next(iter(index.values()))) if index else 1
    bound = grid_bound(config, workload, values)
    method: Method = "int64" if bound < INT64_SAFE_BOUND and not force_python_ints else "python-int"
    dtype: type | np.dtype[Any] = np.int64 if method == "int64" else object
    x = _array_dims(config, workload, values, index, size, dtype)
    ctx = _Context(config, workload, maximum=np.maximum, minimum=np.minimum)
    columns = {k: _as_column(v, size, dtype) for k, v in _quantities(x, ctx).items()}
    columns["head_dim"] = x.hd
    columns["ffn_dim"] = x.f
    return GridResult(columns=columns, method=method, bound=bound)


def _as_column(value: Num, size: int, dtype: type | np.dtype[Any]) -> np.ndarray:
    """A quantity that is constant over the grid (a Python int) as a full column."""
    if isinstance(value, np.ndarray):
        return value
    return np.full(size, value, dtype=dtype)
