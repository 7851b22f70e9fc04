"""Params, FLOPs and memory of a whole grid of configs and workloads at once, with numpy, exactly.

The formulas (:mod:`embedcalc.analysis.grid_formulas`) are a second implementation of the closed forms of
:mod:`embedcalc.analysis.params`, :mod:`embedcalc.analysis.flops` and :mod:`embedcalc.analysis.memory`: one
vectorised expression per quantity instead of a Python loop over configs. This module sizes the grid and chooses
how to evaluate it. The fixed parts
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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from embedcalc.analysis.grid_formulas import Context, Dims, Num, quantities
from embedcalc.analysis.workload import Parallelism, Workload
from embedcalc.config.schema import ModelConfig

INT64_SAFE_BOUND = 2**62
GRID_AXES = ("embed_dim", "num_heads", "num_layers", "ffn_dim", "batch_size", "seq_len")

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


# --- sizes -------------------------------------------------------------------------------------------------------


def _axis_max(values: Mapping[str, Sequence[int]], name: str, default: int) -> int:
    return max(values[name]) if name in values else default


def _bound_dims(config: ModelConfig, workload: Workload, values: Mapping[str, Sequence[int]]) -> Dims:
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
    return Dims(
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
) -> Dims:
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
    return Dims(
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


def grid_bound(config: ModelConfig, workload: Workload, values: Mapping[str, Sequence[int]]) -> int:
    """An upper bound of every quantity (and every intermediate product) over the grid, in Python ints."""
    ctx = Context(config, workload, maximum=max, minimum=min)
    return int(max(quantities(_bound_dims(config, workload, values), ctx).values()))


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
    ctx = Context(config, workload, maximum=np.maximum, minimum=np.minimum)
    columns = {k: _as_column(v, size, dtype) for k, v in quantities(x, ctx).items()}
    columns["head_dim"] = x.hd
    columns["ffn_dim"] = x.f
    return GridResult(columns=columns, method=method, bound=bound)


def _as_column(value: Num, size: int, dtype: type | np.dtype[Any]) -> np.ndarray:
    """A quantity that is constant over the grid (a Python int) as a full column."""
    if isinstance(value, np.ndarray):
        return value
    return np.full(size, value, dtype=dtype)
