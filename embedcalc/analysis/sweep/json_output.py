"""The DESIGN.md §5 JSON of a sweep (``points``, ``crossover_seq_len``) from a
:class:`embedcalc.analysis.sweep.SweepResult`: numbers stay exact (Python ints). What ``embedcalc sweep --format
json`` writes and what :meth:`embedcalc.Sweep.to_json` returns; the CSV is in :mod:`embedcalc.render.sweep_output`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from embedcalc.analysis.sweep.points import AXES

if TYPE_CHECKING:
    from embedcalc.analysis.sweep.points import SweepResult

# the memory keys of a point -> the grid column holding each, per mode (None: zero in that mode)
MEMORY_COLUMNS = {
    "inference": {
        "weights_bytes": "inference_weights_bytes",
        "gradients_bytes": None,
        "optimizer_bytes": None,
        "activations_bytes": "inference_activations_bytes",
        "kv_cache_bytes": "kv_cache_bytes",
        "total_bytes": "inference_total_bytes",
    },
    "training": {
        "weights_bytes": "training_weights_bytes",
        "gradients_bytes": "gradients_bytes",
        "optimizer_bytes": "optimizer_bytes",
        "activations_bytes": "training_activations_bytes",
        "kv_cache_bytes": None,
        "total_bytes": "training_total_bytes",
    },
}


def workload_json(result: SweepResult) -> dict[str, Any]:
    workload = result.workload.as_dict()
    for axis in ("batch_size", "seq_len"):
        if axis in result.axes:
            workload[axis] = None  # swept: see "axes" and each point
    return workload


def result_json(result: SweepResult) -> dict[str, Any]:
    """The ``results[]`` entry of DESIGN.md §5 for a sweep: ``points`` and ``crossover_seq_len``."""
    grid = result.grid
    axis_cols = {a: result.axis_column(a).tolist() for a in AXES}
    valid = result.valid.tolist()
    crossover = result.crossover_column().tolist()
    cols = {k: v.tolist() for k, v in grid.columns.items()} if grid is not None else {}
    size = result.size

    def col(key: str | None) -> list[Any]:
        return cols[key] if key is not None and key in cols else [0 if key is None else None] * size

    memory_keys = MEMORY_COLUMNS[result.workload.mode]
    memory_cols = {k: col(v) for k, v in memory_keys.items()}
    head_dim, causal = col("head_dim"), col("flops_forward_causal")
    params, forward, scores, other = (
        col("params"),
        col("flops_forward"),
        col("flops_attention_scores"),
        col("flops_other"),
    )
    training_step, inference_total, training_total = (
        col("flops_training_step"),
        col("inference_total_bytes"),
        col("training_total_bytes"),
    )
    active = col("params_active")
    breakdowns = (
        {kind: _breakdown_lists(grid, kind) for kind in ("params", "flops")} if grid is not None else {}
    )
    points = []
    for i in range(size):
        point: dict[str, Any] = {a: axis_cols[a][i] for a in AXES}
        point["valid"] = valid[i]
        if valid[i]:
            point["head_dim"] = head_dim[i]
            point["params"] = {
                "total": params[i],
                "active": active[i],
                "breakdown": _at(breakdowns["params"], i),
            }
            point["flops"] = {
                "forward": forward[i],
                "attention_scores": scores[i],
                "other": other[i],
                "attention_score_share": scores[i] / forward[i] if forward[i] else 0.0,
                "forward_causal": causal[i],
                "training_step": training_step[i],
                "breakdown": _at(breakdowns["flops"], i),
            }
            # linear in seq_len, where attention_scores grow as its square
            if "flops_recurrent_mixers" in cols:
                point["flops"]["recurrent_mixers"] = cols["flops_recurrent_mixers"][i]
            point["memory"] = {
                **{k: c[i] for k, c in memory_cols.items()},
                "inference_total_bytes": inference_total[i],
                "training_total_bytes": training_total[i],
            }
            if "recurrent_state_bytes" in cols:  # constant in seq_len, beside the KV cache that grows
                point["memory"]["recurrent_state_bytes"] = cols["recurrent_state_bytes"][i]
            point["crossover_seq_len"] = crossover[i]
            point["problems"] = []
        else:
            point |= {
                "params": None,
                "flops": None,
                "memory": None,
                "crossover_seq_len": None,
                "problems": [p.as_dict() for p in result.problems_at(i)],
            }
        points.append(point)
    return {
        "target": result.target,
        "config": result.config.model_dump(mode="json") if result.config is not None else None,
        "crossover_seq_len": result.crossover_seq_len,
        "evaluation": {
            "method": grid.method if grid is not None else None,
            "points": size,
            "valid_points": int(result.valid.sum()),
        },
        "points": points,
        "warnings": [w.as_dict() for w in result.warnings],
    }


def _breakdown_lists(grid: Any, kind: str) -> dict[str, list[Any]]:
    return {k: v.tolist() for k, v in grid.breakdown(kind).items()}


def _at(columns: dict[str, list[Any]], i: int) -> dict[str, Any]:
    """One point's breakdown: its non-zero components, as the per-config breakdowns list them."""
    return {k: v[i] for k, v in columns.items() if v[i]}
