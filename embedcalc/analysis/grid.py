"""Params, FLOPs and memory of a whole grid of configs and workloads at once, with numpy, exactly.

There is no second implementation here: the grid builds a :class:`~embedcalc.analysis.structure.Dims` whose swept
sizes are numpy arrays and calls the very term functions of :mod:`embedcalc.analysis.params`,
:mod:`embedcalc.analysis.flops` and :mod:`embedcalc.analysis.memory` that count one config (DESIGN.md §9: one
formula per quantity). Each swept axis is an array shaped to broadcast along its own dimension of the cartesian
grid (in :data:`GRID_AXES` order, the last fastest), so a quantity that depends only on the config axes is
computed once per config, not once per point, and is broadcast to the points at the end. The fixed parts of the
config come from a validated ``template``; which block widths follow a swept field (an FFN width the config leaves
to its default follows ``ffn_dim``, which follows ``4 * embed_dim`` unless written) is read from the config's own
specs. ``tests/analysis/test_sweep.py`` checks every point against the per-config analyzer.

Exactness (DESIGN.md §4: never a silently wrapped number). Every quantity is built from the sizes with ``+``,
``*``, ``//``, min and max only, and is non-decreasing in each size, so evaluating the *same* functions on Python
ints at the grid maxima (every factor at least 1) bounds every value and every intermediate product. When that
bound stays under :data:`INT64_SAFE_BOUND` (2**62, which leaves room for the ``n (n + 1)`` before the halving and
for sums) the grid is evaluated in int64; otherwise in numpy object arrays of Python ints: the same code, exact at
any size, slower. :attr:`GridResult.method` says which, and the caller tells the user.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from embedcalc.analysis.flops import TRAINING_STEP_FACTOR, crossover_terms, forward_terms, is_score_key
from embedcalc.analysis.memory import memory_terms
from embedcalc.analysis.params import inactive_params, param_terms
from embedcalc.analysis.structure import Dims, FFNWidths, Num, StackDims, stacks
from embedcalc.analysis.workload import Parallelism, Workload
from embedcalc.config.ffn_spec import FFNSpec
from embedcalc.config.schema import ModelConfig
from embedcalc.config.spec_shapes import DEFAULT_BLOCK, merge_spec

INT64_SAFE_BOUND = 2**62
GRID_AXES = ("embed_dim", "num_heads", "num_layers", "ffn_dim", "batch_size", "seq_len")

Method = Literal["int64", "python-int"]


@dataclass(frozen=True)
class GridResult:
    """Per-point columns (1-D arrays of one length), per-point breakdowns, and how they were computed.

    Columns: ``params``, ``params_active``; ``flops_forward``, ``flops_attention_scores`` (keys ending /scores
    and /context), ``flops_other`` (forward minus scores), ``flops_forward_causal`` (only when a stack is causal),
    ``flops_training_step``; inference memory ``inference_weights_bytes``, ``inference_activations_bytes``,
    ``kv_cache_bytes``, ``inference_total_bytes``; training memory (absent for the weight-only int8/int4 dtypes)
    ``training_weights_bytes``, ``gradients_bytes``, ``optimizer_bytes``, ``training_activations_bytes``,
    ``training_total_bytes``; ``crossover_numerator`` / ``crossover_denominator`` (n* as a fraction); and the
    resolved ``head_dim`` and ``ffn_dim``. :meth:`breakdown` gives ``params`` and ``flops`` (forward) by component,
    the keys of the per-config breakdowns.
    """

    columns: dict[str, np.ndarray]
    method: Method
    bound: int  # the largest upper bound over all quantities
    breakdowns: dict[str, dict[str, Any]] = field(default_factory=dict)  # broadcastable arrays or ints
    shape: tuple[int, ...] = ()

    def __getitem__(self, key: str) -> np.ndarray:
        return self.columns[key]

    def breakdown(self, kind: str) -> dict[str, np.ndarray]:
        """``params`` or ``flops`` by breakdown key, one full column per key (zero where a point has none)."""
        dtype = np.int64 if self.method == "int64" else object
        return {k: _column(v, self.shape, dtype) for k, v in self.breakdowns[kind].items()}


class GridError(ValueError):
    """A grid that the shared formulas cannot evaluate as asked (the sweep reports it as a usage error)."""


# --- sizes -------------------------------------------------------------------------------------------------------


def _follows(config: ModelConfig) -> dict[str, FFNSpec]:
    """Each block's merged FFN spec: a width it leaves unset follows the flat ffn_dim."""
    base = config.ffn or FFNSpec()
    out = {DEFAULT_BLOCK: base}
    for name, spec in config.blocks.items():
        out[name] = merge_spec(base, spec.ffn)
    return out


def _ffn_widths(config: ModelConfig, flat_f: Num) -> dict[str, FFNWidths]:
    out = {}
    for name, spec in _follows(config).items():
        block = config.named_blocks[name].ffn
        if block is None:
            out[name] = FFNWidths(0, 0, 0)
            continue
        f = spec.ffn_dim if spec.ffn_dim is not None else flat_f
        fe = spec.expert_dim if spec.expert_dim is not None else flat_f
        shared = spec.shared_expert_dim if spec.shared_expert_dim is not None else fe
        out[name] = FFNWidths(f if not block.moe else 0, fe if block.moe else 0,
                              spec.num_shared_experts * shared if block.moe else 0)  # fmt: skip
    return out


def _dims(config: ModelConfig, workload: Workload, size: dict[str, Num], head_dim: Num) -> Dims:
    """The grid's Dims from per-axis sizes (arrays, or their maxima as ints for the bound)."""
    d, h = size["embed_dim"], size["num_heads"]
    layers = size["num_layers"]
    flat_f = size["ffn_dim"]
    plans = []
    for stack in stacks(config):
        counts = tuple(config.stack_plan(stack.name).counts())
        follows_layers = stack.name == stacks(config)[0].name or (
            config.num_decoder_layers is None and config.decoder_layout is None
        )
        if follows_layers and len(counts) == 1:
            counts = ((counts[0][0], layers),)
        plans.append(StackDims(stack, counts))
    n = size["seq_len"]
    return Dims(
        d=d,
        d_tok=config.token_embed_dim if config.token_embed_dim is not None else d,
        h=h,
        g=config.num_kv_heads if config.num_kv_heads is not None else h,
        hd=head_dim,
        b=size["batch_size"],
        n=n,
        n_dec=workload.tgt_len if workload.tgt_len is not None else n,
        ffn=_ffn_widths(config, flat_f),
        stacks=tuple(plans),
        depth=layers,
    )


def _fixed(config: ModelConfig, workload: Workload) -> dict[str, int]:
    return {
        "embed_dim": config.embed_dim,
        "num_heads": config.num_heads,
        "num_layers": config.num_layers,
        "ffn_dim": config.resolved_ffn_dim,
        "batch_size": workload.batch_size,
        "seq_len": workload.seq_len,
    }


def _bound_dims(config: ModelConfig, workload: Workload, values: Mapping[str, Sequence[int]]) -> Dims:
    """Upper bounds of every size over the grid, each at least 1 (so partial products never exceed the bound)."""
    size: dict[str, Num] = {
        a: max(values[a]) if a in values else v for a, v in _fixed(config, workload).items()
    }
    if "ffn_dim" not in values and config.ffn_dim is None:
        size["ffn_dim"] = 4 * size["embed_dim"]
    h_min = min(values["num_heads"]) if "num_heads" in values else config.num_heads
    head_dim = config.head_dim if config.head_dim is not None else max(size["embed_dim"] // h_min, 1)
    return _dims(config, workload, size, head_dim)


def _array_dims(
    config: ModelConfig, workload: Workload, values: Mapping[str, Sequence[int]], dtype: type | np.dtype[Any]
) -> tuple[Dims, tuple[int, ...], Num]:
    """Per-point sizes, each swept axis broadcast along its own dimension; fixed ones stay Python ints."""
    names = [a for a in GRID_AXES if a in values]
    shape = tuple(len(values[a]) for a in names)
    size: dict[str, Num] = dict(_fixed(config, workload))
    for k, axis in enumerate(names):
        view = [1] * len(names)
        view[k] = len(values[axis])
        size[axis] = np.asarray(list(values[axis]), dtype=dtype).reshape(view)
    if "ffn_dim" not in values and config.ffn_dim is None:
        size["ffn_dim"] = 4 * size["embed_dim"]
    head_dim = config.head_dim if config.head_dim is not None else size["embed_dim"] // size["num_heads"]
    return _dims(config, workload, size, head_dim), shape, size["ffn_dim"]


# --- the quantities -----------------------------------------------------------------------------------------------


def _sum(values: Any) -> Num:
    total: Num = 0
    for v in values:
        total = total + v
    return total


def quantities(
    config: ModelConfig, workload: Workload, x: Dims
) -> tuple[dict[str, Num], dict[str, dict[str, Num]]]:
    """Every column of :class:`GridResult` at sizes ``x`` (ints or arrays), and the params / FLOPs breakdowns."""
    params_by_key = param_terms(config, x)
    flops_by_key = forward_terms(config, x, causal=False)
    params = _sum(params_by_key.values())
    forward = _sum(flops_by_key.values())
    scores = _sum(v for k, v in flops_by_key.items() if is_score_key(k))
    out: dict[str, Num] = {
        "params": params,
        "params_active": params - inactive_params(config, x),
        "flops_forward": forward,
        "flops_attention_scores": scores,
        "flops_other": _sum(v for k, v in flops_by_key.items() if not is_score_key(k)),
        "flops_training_step": TRAINING_STEP_FACTOR * forward,
    }
    if any(s.causal for s in stacks(config)):
        out["flops_forward_causal"] = _sum(forward_terms(config, x, causal=True).values())
    if config.has_recurrent_state:  # the recurrent mixers' FLOPs, linear in n beside the scores' n²
        out["flops_recurrent_mixers"] = _sum(v for k, v in flops_by_key.items() if "/mixer/" in k)
    out |= memory_terms(config, workload, x, params)
    linear, quadratic = crossover_terms(config, x)
    out["crossover_numerator"], out["crossover_denominator"] = linear, quadratic
    return out, {"params": params_by_key, "flops": flops_by_key}


def _check(config: ModelConfig, workload: Workload, values: Mapping[str, Sequence[int]]) -> None:
    unknown = set(values) - set(GRID_AXES)
    if unknown:
        raise ValueError(f"not sweepable: {', '.join(sorted(unknown))}")
    if workload.parallel != Parallelism():
        raise ValueError("the grid evaluates one device; tensor/pipeline/data parallelism is not supported")
    if "num_layers" in values and config.layers is not None:
        raise GridError(
            "--num-layers cannot be swept for a config with an explicit layers pattern: which runs would grow is "
            "not defined. Sweep the pattern by writing one config per depth (layers: [{pattern: [...], repeat: "
            "R}]), or remove layers to sweep a stack of default blocks"
        )


def grid_bound(config: ModelConfig, workload: Workload, values: Mapping[str, Sequence[int]]) -> int:
    """An upper bound of every quantity (and every intermediate product) over the grid, in Python ints."""
    _check(config, workload, values)
    columns, _ = quantities(config, workload, _bound_dims(config, workload, values))
    return int(max(columns.values()))


def evaluate_grid(
    config: ModelConfig,
    workload: Workload,
    values: Mapping[str, Sequence[int]],
    force_python_ints: bool = False,
) -> GridResult:
    """Evaluate every quantity at every point of the cartesian grid of ``values``.

    ``config`` gives the fixed fields (a validated config whose swept fields are ignored), ``workload`` the dtype,
    mode, attention and recompute (and batch_size / seq_len / tgt_len when not swept). ``values`` maps each swept
    axis (:data:`GRID_AXES`) to its values; points are in :data:`GRID_AXES` order, the last axis fastest.
    Invalid points (as :mod:`embedcalc.analysis.sweep` judges them) get numbers too; the caller masks them.
    """
    bound = grid_bound(config, workload, values)
    method: Method = "int64" if bound < INT64_SAFE_BOUND and not force_python_ints else "python-int"
    dtype: type | np.dtype[Any] = np.int64 if method == "int64" else object
    x, shape, flat_ffn = _array_dims(config, workload, values, dtype)
    columns_by_name, breakdowns = quantities(config, workload, x)
    columns = {k: _column(v, shape, dtype) for k, v in columns_by_name.items()}
    default = config.named_blocks[DEFAULT_BLOCK].attention
    head_dim = x.hd if default is None or default.kind == "standard" else default.head_dim
    columns["head_dim"] = _column(head_dim, shape, dtype)
    columns["ffn_dim"] = _column(flat_ffn, shape, dtype)
    return GridResult(columns=columns, method=method, bound=bound, breakdowns=breakdowns, shape=shape)


def _column(value: Num, shape: tuple[int, ...], dtype: type | np.dtype[Any]) -> np.ndarray:
    """A quantity (a Python int, or an array broadcastable to the grid) as one full 1-D column."""
    if not isinstance(value, np.ndarray):
        return np.full(int(np.prod(shape)), value, dtype=dtype)
    return np.ascontiguousarray(np.broadcast_to(value, shape)).reshape(-1)
