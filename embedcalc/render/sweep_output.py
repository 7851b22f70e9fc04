"""Machine-readable sweep output: a CSV written in vectorised chunks (one fixed set of columns, invalid points with
their problem code and message), and the DESIGN.md §5 JSON of :mod:`embedcalc.analysis.sweep.json_output` (re-exported).

Both read a :class:`embedcalc.analysis.sweep.SweepResult`; numbers stay exact (Python ints in JSON, digits in CSV).
"""

from __future__ import annotations

import io
from typing import IO, TYPE_CHECKING, TypeAlias

import numpy as np

from embedcalc.analysis.sweep import AXES, MEMORY_COLUMNS, result_json, workload_json

if TYPE_CHECKING:
    from embedcalc.analysis.sweep import SweepResult

Source: TypeAlias = tuple[np.ndarray, np.ndarray | None] | None  # (values, where shown); None: empty

__all__ = ["CSV_COLUMNS", "result_csv", "result_json", "workload_json", "write_csv"]


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
    memory_keys = MEMORY_COLUMNS[result.workload.mode]
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
