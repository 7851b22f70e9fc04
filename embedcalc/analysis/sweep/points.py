"""Sweeps: the cartesian grid of axis values, which points are valid and why, and the seq-len curves for plots.

A point of ``embedcalc sweep TARGET --embed-dim ... --seq-len ...`` is the target with each swept field set as by
``--set`` (so an ``ffn_dim`` written in the target stays fixed while ``embed_dim`` varies; ``--set ffn_dim=null``
makes it follow 4 * embed_dim) and a workload with the swept batch_size / seq_len. Axes combine as a cartesian
product in the order of :data:`AXES` (seq_len varies fastest, so consecutive points form seq-len curves).

Validity per point is vectorised too (:mod:`embedcalc.analysis.sweep.rules`). Invalid points are kept and carry
their problems; problems no swept axis can cause are raised once, as for ``analyze``.

Axis values are parsed in :mod:`embedcalc.analysis.sweep.axes`;
:func:`embedcalc.analysis.sweep.reference.evaluate_point` is the per-config path that the vectorised grid is
tested and benchmarked against.

No file I/O here (DESIGN.md §7): the caller reads the target and applies ``--set``
(:func:`embedcalc.api.sweep.sweep_base`) and passes the resulting :class:`SweepBase`. ``--num-layers`` is
refused for a config with an explicit ``layers`` pattern: which runs would grow is not defined.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from embedcalc.analysis.grid import GRID_AXES, GridResult, evaluate_grid
from embedcalc.analysis.sweep.rules import FLAGS, PointRule, axis_table, explained_by_sweep, validity_rules
from embedcalc.analysis.workload import DtypeSource, Workload, with_model_dtype
from embedcalc.config.advisories import workload_problems
from embedcalc.config.schema import ModelConfig
from embedcalc.errors import ConfigError, EmbedcalcError, ExitCode, Problem
from embedcalc.sources.loading import validate_config

AXES = GRID_AXES
CONFIG_AXES = ("embed_dim", "num_heads", "num_layers", "ffn_dim")
MAX_POINTS = 2_000_000


class SweepError(EmbedcalcError):
    """A sweep that cannot be run as asked (too many points): exit 2."""

    def __init__(self, message: str, code: str = "bad_sweep"):
        super().__init__(message, ExitCode.USAGE, [Problem("", message, code)], code)


# --- target -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SweepBase:
    """The target's canonical mapping (after ``--set``) that every point starts from."""

    target: str
    data: dict[str, Any]
    user_keys: dict[str, str]
    origin: str
    dtype_source: DtypeSource = (
        "config"  # where the mapping's own dtype comes from: a preset or a config file
    )

    def config_at(self, point: Mapping[str, int], swept: Sequence[str] = ()) -> ModelConfig:
        """The validated config with ``point``'s config-axis values set; swept fields are named by their flag."""
        data = dict(self.data)
        user_keys = dict(self.user_keys)
        for axis in CONFIG_AXES:
            if axis in point:
                data[axis] = int(point[axis])
        for axis in swept:
            if axis in CONFIG_AXES:
                user_keys[axis] = FLAGS[axis]
        return validate_config(data, user_keys, [], self.origin)


# --- the sweep ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SweepResult:
    """Every point of one target's sweep: axis values, validity with reasons, and the grid's numbers."""

    target: str
    # the target as given (with --set), None if only some swept values make it valid
    config: ModelConfig | None
    workload: Workload
    axes: dict[str, tuple[int, ...]]  # the swept axes, in AXES order
    index: dict[str, np.ndarray]  # per point, its position on each swept axis
    size: int
    valid: np.ndarray
    rules: list[PointRule]
    grid: GridResult | None  # None when no point is valid
    crossover_seq_len: int | float | None  # of the target as given
    warnings: list[Problem] = field(default_factory=list)
    fixed: dict[str, int | None] = field(default_factory=dict)  # unswept axes: the target's value (or None)

    def axis_column(self, axis: str) -> np.ndarray:
        """Each point's value of ``axis`` (swept or fixed); ffn_dim resolved (4 * embed_dim by default)."""
        if axis in self.axes:
            return np.asarray(axis_table(self.axes[axis])[self.index[axis]])
        if axis == "ffn_dim" and self.grid is not None:
            return self.grid["ffn_dim"]
        return np.full(self.size, self.fixed[axis], dtype=object)

    def problem_column(self, attr: str = "messages", sep: str = "; ") -> np.ndarray:
        """Per point, its problems' messages (or ``attr="codes"``) joined by ``sep``; "" for valid points."""
        out = np.full(self.size, "", dtype=object)
        for rule in self.rules:
            text = (
                rule.messages if attr == "messages" else np.where(rule.failed, rule.code, "").astype(object)
            )
            joined = np.where(out == "", text, out + sep + text)
            out = np.where(rule.failed, joined, out)
        return out

    def problems_at(self, i: int) -> list[Problem]:
        return [Problem(r.path, str(r.messages[i]), r.code) for r in self.rules if r.failed[i]]

    def crossover_column(self) -> np.ndarray:
        """Per point n* (object: int when whole, else float), exact like :func:`crossover.crossover_seq_len`."""
        if self.grid is None:
            return np.full(self.size, None, dtype=object)
        num, den = self.grid["crossover_numerator"], self.grid["crossover_denominator"]
        none = den == 0  # no softmax attention layer (or an invalid point's head_dim 0): no n* (crossover.py)
        den = np.where(none, 1, den)
        whole = num % den == 0
        if num.dtype != object and int(num.max()) < 2**53 and int(den.max()) < 2**53:
            ratio = (num / den).astype(object)  # both exact in float64, so the division rounds correctly
        else:
            ratio = num.astype(object) / den.astype(object)  # int / int: correctly rounded
        return np.asarray(np.where(none, None, np.where(whole, (num // den).astype(object), ratio)))


def _grid_index(axes: Mapping[str, Sequence[int]]) -> tuple[dict[str, np.ndarray], int]:
    names = [a for a in AXES if a in axes]
    shape = [len(axes[a]) for a in names]
    size = math.prod(shape)
    if size > MAX_POINTS:
        dims = " x ".join(f"{FLAGS[a]} {len(axes[a])}" for a in names)
        raise SweepError(
            f"the grid has {size:,} points ({dims}), more than {MAX_POINTS:,}; narrow an axis",
            "grid_too_large",
        )
    flat = np.indices(shape, dtype=np.intp).reshape(len(names), -1) if names else np.zeros((0, 1), np.intp)
    return {a: flat[k] for k, a in enumerate(names)}, size


def _fixed_workload_checks(
    config: ModelConfig, workload: Workload, axes: Mapping[str, Sequence[int]], target: str
) -> list[Problem]:
    """Raise for workload problems no axis causes (tgt_len, an unswept seq_len); return warnings."""
    probe = workload if "seq_len" not in axes else replace(workload, seq_len=1)
    errors, warnings = workload_problems(config, probe)
    if errors:
        lines = "\n".join(f"  {p.message}" for p in errors)
        raise ConfigError(f"{target}: workload does not fit the config\n{lines}", errors)
    if "seq_len" in axes and config.position != "learned":
        over = [n for n in axes["seq_len"] if n > config.max_seq_len]
        if over:
            warnings.append(
                Problem(
                    "--seq-len",
                    f"{len(over)} of {len(axes['seq_len'])} --seq-len values exceed "
                    f"max_seq_len {config.max_seq_len}: {config.position} positions extrapolate, "
                    "quality is not guaranteed",
                    "seq_len_extrapolates",
                )
            )
    return warnings


def sweep_target(
    base: SweepBase,
    axes: Mapping[str, Sequence[int]],
    workload: Workload,
    force_python_ints: bool = False,
) -> SweepResult:
    """Evaluate the loaded target ``base`` at every point of the cartesian product of ``axes`` (module docstring)."""
    target = base.target
    workload = with_model_dtype(workload, base.data.get("dtype"), base.dtype_source)
    runs = next((f for f in ("layers", "decoder_layout") if base.data.get(f) is not None), None)
    if "num_layers" in axes and runs is not None:
        raise SweepError(
            f"{base.origin}: --num-layers cannot be swept for a config with an explicit {runs} pattern (which runs "
            f"would grow is not defined); write one config per depth, or remove {runs} to sweep a stack of "
            "default blocks",
            "num_layers_with_layers",
        )
    swept_axes = {a: tuple(int(v) for v in axes[a]) for a in AXES if a in axes}
    axes = swept_axes
    index, size = _grid_index(axes)
    swept = set(axes)
    try:
        target_config: ModelConfig | None = base.config_at({})
    except ConfigError:
        target_config = None
    first = {a: v[0] for a, v in axes.items()}
    try:
        base.config_at(first, tuple(axes))
    except ConfigError as exc:
        fixed = [p for p in exc.problems if not explained_by_sweep(p, swept, base.data)]
        if fixed:
            lines = "\n".join(f"  {p.path}: {p.message}" for p in fixed)
            raise ConfigError(f"{base.origin}: problems no swept axis causes\n{lines}", fixed) from None
    decoding = workload.mode == "inference" and base.data.get("architecture") == "decoder"
    config_rules, workload_rules = validity_rules(
        base.data, base.user_keys, base.target, axes, index, size, workload.gen_tokens if decoding else 0
    )
    config_ok = np.ones(size, dtype=bool)
    for rule in config_rules:
        config_ok &= ~rule.failed
    valid = config_ok.copy()
    for rule in workload_rules:
        valid &= ~rule.failed
    grid, warnings = None, []
    if config_ok.any():
        i = int(np.argmax(config_ok))
        template = base.config_at({a: axes[a][index[a][i]] for a in axes}, tuple(axes))
        warnings = _fixed_workload_checks(template, workload, axes, target)
        swept_values = {a: v for a, v in axes.items()}
        grid = evaluate_grid(template, workload, swept_values, force_python_ints)
    crossover = None
    if target_config is not None:
        from embedcalc.analysis.crossover import crossover_seq_len

        crossover = crossover_seq_len(target_config)
    return SweepResult(
        target=target,
        config=target_config,
        workload=workload,
        axes=swept_axes,
        index=index,
        size=size,
        valid=valid,
        rules=config_rules + workload_rules,
        grid=grid,
        crossover_seq_len=crossover,
        warnings=warnings,
        fixed={
            **{a: base.data.get(a) for a in CONFIG_AXES},
            "batch_size": workload.batch_size,
            "seq_len": workload.seq_len,
        },
    )


# --- seq-len curves (for plots) -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SeqLenCurve:
    """One line of a seq-len plot: FLOPs and memory per seq_len, None where the point is invalid."""

    label: str
    seq_len: tuple[int, ...]
    score_flops: tuple[int | None, ...]
    other_flops: tuple[int | None, ...]
    inference_bytes: tuple[int | None, ...]
    training_bytes: tuple[int | None, ...] | None  # None for weight-only dtypes
    crossover_seq_len: int | float | None
    dtype: str  # the dtype the points were computed in (a target's own unless one was chosen)


def seq_len_curves(result: SweepResult) -> list[SeqLenCurve]:
    """One curve per combination of the other swept axes (seq_len varies fastest, so each is a block of points)."""
    if "seq_len" not in result.axes:
        raise ValueError("seq-len curves need a swept seq_len")
    seqs = result.axes["seq_len"]
    crossover = result.crossover_column()
    others = [a for a in result.axes if a != "seq_len"]
    curves = []
    for start in range(0, result.size, len(seqs)):
        block = slice(start, start + len(seqs))
        ok = result.valid[block]

        def column(name: str, block: slice = block, ok: np.ndarray = ok) -> tuple[int | None, ...]:
            assert result.grid is not None
            return tuple(
                int(v) if good else None for v, good in zip(result.grid[name][block], ok, strict=True)
            )

        label = " ".join([result.target] + [f"{a}={result.axes[a][result.index[a][start]]}" for a in others])
        if result.grid is None:
            empty: tuple[int | None, ...] = (None,) * len(seqs)
            curves.append(SeqLenCurve(label, seqs, empty, empty, empty, empty, None, result.workload.dtype))
            continue
        first_ok = np.flatnonzero(ok)
        curves.append(
            SeqLenCurve(
                label=label,
                seq_len=seqs,
                score_flops=column("flops_attention_scores"),
                other_flops=column("flops_other"),
                inference_bytes=column("inference_total_bytes"),
                training_bytes=column("training_total_bytes")
                if "training_total_bytes" in result.grid.columns
                else None,
                crossover_seq_len=crossover[start + first_ok[0]] if len(first_ok) else None,
                dtype=result.workload.dtype,
            )
        )
    return curves
