"""Machine-readable sweep output: the DESIGN.md §5 JSON (``points``, ``crossover_seq_len``) and a CSV written in
vectorised chunks (one fixed set of columns, invalid points with their problem code and message).

Both read a :class:`embedcalc.analysis.sweep.SweepResult`; numbers stay exact (Python ints in JSON, digits in CSV).
"""

from __future__ import annotations

import io
from typing import IO, TYPE_CHECKING, Any, TypeAlias

import numpy as np

from embedcalc.analysis.sweep import AXES

if TYPE_CHECKING:
    from embedcalc.analysis.sweep import SweepResult

Source: TypeAlias = tuple[np.ndarray, np.ndarray | None] | None  # (values, where shown); None: empty


# --- JSON ---------------------------------------------------------------------------------------------------------

_MEMORY = {
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

    memory_keys = _MEMORY[result.workload.mode]
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
    breakdowns = {kind: _breakdown_lists(grid, kind) for kind in ("params", "flops")} if grid is not None else {}
    points = []
    for i in range(size):
        point: dict[str, Any] = {a: axis_cols[a][i] for a in AXES}
        point["valid"] = valid[i]
        if valid[i]:
            point["head_dim"] = head_dim[i]
            point["params"] = {"total": params[i], "active": active[i], "breakdown": _at(breakdowns["params"], i)}
            point["flops"] = {
                "forward": forward[i],
                "attention_scores": scores[i],
                "other": other[i],
                "attention_score_share": scores[i] / forward[i] if forward[i] else 0.0,
                "forward_causal": causal[i],
                "training_step": training_step[i],
                "breakdown": _at(breakdowns["flops"], i),
            }
            point["memory"] = {
                **{k: c[i] for k, c in memory_cols.items()},
                "inference_total_bytes": inference_total[i],
                "training_total_bytes": training_total[i],
            }
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


# --- CSV ----------------------------------------------------------------------------------------------------------

CSV_COLUMNS = (
    "target", "embed_dim", "num_heads", "head_dim", "num_layers", "ffn_dim", "batch_size", "seq_len", "valid",
    "params", "flops_forward", "flops_attention_scores", "flops_other", "flops_forward_causal",
    "flops_training_step", "weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes",
    "kv_cache_bytes", "total_bytes", "inference_total_bytes", "training_total_bytes", "crossover_seq_len",
    "problem_codes", "problems",
)  # fmt: skip


def _quote(text: str) -> str:
    """RFC 4180 quoting, only where needed."""
    if any(c in text for c in ',"\n\r'):
        return '"' + text.replace('"', '""') + '"'
    return text


def _quoted(texts: np.ndarray) -> np.ndarray:
    """Quote a column of strings, each distinct string once (columns of messages repeat a few strings)."""
    import numpy as np

    distinct, inverse = np.unique(texts.astype(str), return_inverse=True)
    return np.asarray([_quote(str(t)) for t in distinct], dtype=object)[inverse]


def _csv_sources(result: SweepResult) -> dict[str, Source]:
    import numpy as np

    grid, valid, size = result.grid, result.valid, result.size
    sources: dict[str, Source] = {"target": (np.full(size, _quote(result.target), dtype=object), None)}
    for axis in AXES:
        sources[axis] = (result.axis_column(axis), None)
    sources["valid"] = (np.where(valid, "true", "false"), None)
    memory_keys = _MEMORY[result.workload.mode]
    for name in CSV_COLUMNS:
        if name in sources or name in ("problem_codes", "problems", "crossover_seq_len"):
            continue
        key = memory_keys.get(name, name)
        if name in memory_keys and key is None:
            sources[name] = (np.zeros(size, dtype=np.int64), valid)  # none in this mode
        elif grid is not None and key in grid.columns:
            sources[name] = (grid[key], valid)
        else:
            sources[name] = None
    sources["crossover_seq_len"] = (result.crossover_column(), valid)
    sources["problem_codes"] = (_quoted(result.problem_column("codes", ";")), None)
    sources["problems"] = (_quoted(result.problem_column("messages", "; ")), None)
    return sources


def _cells(source: Source, part: slice, count: int) -> list[str]:
    if source is None:
        return [""] * count
    values, where = source[0][part].tolist(), source[1]
    if where is None:
        return ["" if v is None else str(v) for v in values]
    return [str(v) if shown else "" for v, shown in zip(values, where[part].tolist(), strict=True)]


def write_csv(result: SweepResult, stream: IO[str], chunk: int = 16_384) -> None:
    """One header line and one line per point, columns :data:`CSV_COLUMNS`; empty cells where not applicable.

    Columns are turned into text a chunk of points at a time (no csv.writer call per row)."""
    sources = _csv_sources(result)
    stream.write(",".join(CSV_COLUMNS) + "\n")
    for start in range(0, result.size, chunk):
        part = slice(start, min(start + chunk, result.size))
        count = part.stop - part.start
        columns = [_cells(sources[name], part, count) for name in CSV_COLUMNS]
        stream.write("\n".join(map(",".join, zip(*columns, strict=True))) + "\n")


def result_csv(result: SweepResult) -> str:
    buffer = io.StringIO()
    write_csv(result, buffer)
    return buffer.getvalue()
