"""Which points of a sweep are valid, and why not: the shape and workload rules a swept axis can break.

The config rules (embed_dim divisible by num_heads, an even head_dim for rope, num_kv_heads dividing num_heads) and
the workload rule (seq_len within max_seq_len for learned positions) are evaluated on small tables over the axis
values and indexed per point, so that validity is as vectorised as the grid itself. Messages follow the schema's
(``embedcalc.config.schema``), naming the flag or key the user wrote.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from embedcalc.analysis.grid import GRID_AXES
from embedcalc.config.schema import ModelConfig
from embedcalc.errors import Problem

FLAGS = {axis: "--" + axis.replace("_", "-") for axis in GRID_AXES}


# --- rules -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PointRule:
    """One validity rule over the grid: where it fails and the message at each failing point."""

    code: str
    path: str
    failed: np.ndarray  # bool per point
    messages: np.ndarray  # object (str) per point, "" where the rule holds


def axis_table(values: Sequence[int]) -> np.ndarray:
    """Axis values as an array: int64 when they fit comfortably, else exact Python ints."""
    return np.asarray(list(values), dtype=np.int64 if max(values) < 2**62 else object)


def _rule(code: str, path: str, bad: np.ndarray, text: Any, where: tuple[np.ndarray, ...]) -> PointRule:
    """Index a rule table (over axis values) per point; ``text(*indices)`` writes the message of a bad entry."""
    messages = np.full(bad.shape, "", dtype=object)
    for entry in np.argwhere(bad):
        messages[tuple(entry)] = text(*entry)
    return PointRule(code, path, bad[where], messages[where])


def validity_rules(
    data: Mapping[str, Any],
    user_keys: Mapping[str, str],
    target: str,
    axes: Mapping[str, Sequence[int]],
    index: Mapping[str, np.ndarray],
    size: int,
    gen_tokens: int = 0,
) -> tuple[list[PointRule], list[PointRule]]:
    """(config rules, workload rules) that depend on a swept axis, evaluated per point.

    ``gen_tokens``: tokens a decoder generates after a --seq-len prompt (they need position rows too).

    ``data`` is the target's canonical mapping (with --set applied), ``user_keys`` the keys as the user wrote them.
    """
    keys = dict(user_keys)
    for axis in axes:
        keys[axis] = FLAGS[axis]
    zero = np.zeros(size, dtype=np.intp)
    d_vals = axes.get("embed_dim", (data["embed_dim"],))
    h_vals = axes.get("num_heads", (data["num_heads"],))
    d_idx, h_idx = index.get("embed_dim", zero), index.get("num_heads", zero)
    kd, kh = keys.get("embed_dim", "embed_dim"), keys.get("num_heads", "num_heads")
    position = data.get("position", ModelConfig.model_fields["position"].default)
    config_rules: list[PointRule] = []
    heads_ok = np.ones((len(d_vals), len(h_vals)), dtype=bool)
    if data.get("head_dim") is None and {"embed_dim", "num_heads"} & set(axes):
        d, h = axis_table(d_vals)[:, None], axis_table(h_vals)[None, :]
        indivisible = np.asarray(d % h != 0, dtype=bool)
        config_rules.append(
            _rule(
                "heads_indivisible",
                kh,
                indivisible,
                lambda i, j: (
                    f"{kh} ({h_vals[j]}) must divide {kd} ({d_vals[i]}): head_dim would be "
                    f"{d_vals[i] / h_vals[j]:.2f}"
                ),
                (d_idx, h_idx),
            )
        )
        heads_ok = ~indivisible
        if position == "rope":
            odd = heads_ok & np.asarray((d // h) % 2 == 1, dtype=bool)
            config_rules.append(
                _rule(
                    "rope_head_dim_odd",
                    kh,
                    odd,
                    lambda i, j: (
                        f"head_dim = {kd} / {kh} = {d_vals[i] // h_vals[j]} must be even for position rope"
                    ),
                    (d_idx, h_idx),
                )
            )
            heads_ok &= ~odd
    for kk, kv_heads in _kv_head_fields(data, keys):
        if "num_heads" not in axes:
            break
        kv_bad = heads_ok & np.asarray(axis_table(h_vals)[None, :] % kv_heads != 0, dtype=bool)
        config_rules.append(
            _rule(
                "kv_heads_indivisible",
                kk,
                kv_bad,
                lambda i, j, kk=kk, kv_heads=kv_heads: f"{kk} ({kv_heads}) must divide {kh} ({h_vals[j]})",
                (d_idx, h_idx),
            )
        )
    workload_rules: list[PointRule] = []
    if "seq_len" in axes and position == "learned":
        limit, seq_vals = data["max_seq_len"], axes["seq_len"]
        label = data.get("name") or target
        over = np.asarray([n + gen_tokens > limit for n in seq_vals], dtype=bool)
        workload_rules.append(
            _rule(
                "seq_len_over_context",
                FLAGS["seq_len"],
                over,
                lambda i: (
                    f"--seq-len {seq_vals[i]}{f' + --gen-tokens {gen_tokens}' if gen_tokens else ''} exceeds "
                    f"max_seq_len {limit} of {label}: its learned position table has no rows beyond that"
                ),
                (index["seq_len"],),
            )
        )
    return config_rules, workload_rules


def _kv_head_fields(data: Mapping[str, Any], keys: Mapping[str, str]) -> list[tuple[str, int]]:
    """(field as written, value) of every KV head count a swept num_heads must stay a multiple of: the flat
    num_kv_heads and each block's own (``attention.num_kv_heads``, the NAS models' per-layer KV heads)."""
    out = []
    if isinstance(data.get("num_kv_heads"), int):
        out.append((keys.get("num_kv_heads", "num_kv_heads"), data["num_kv_heads"]))
    specs = [("attention", data.get("attention"))]
    specs += [(f"blocks.{name}.attention", (block or {}).get("attention"))
              for name, block in (data.get("blocks") or {}).items()]  # fmt: skip
    for where, spec in specs:
        if isinstance(spec, Mapping) and isinstance(spec.get("num_kv_heads"), int):
            out.append((f"{where}.num_kv_heads", spec["num_kv_heads"]))
    return out


def explained_by_sweep(problem: Problem, swept: set[str], data: Mapping[str, Any]) -> bool:
    """Whether a problem of the first point is one that a swept axis causes (so other points may be valid)."""
    shape_swept = bool({"embed_dim", "num_heads"} & swept)
    if problem.code == "heads_indivisible":
        return shape_swept
    if problem.code == "rope_head_dim_odd":
        return shape_swept and data.get("head_dim") is None
    if problem.code in ("kv_heads_indivisible", "kv_heads_not_divisor"):  # flat, or a block's own
        return "num_heads" in swept
    return False
