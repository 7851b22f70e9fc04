"""``analyze --dtype all``: one row per dtype (weights, the largest layer, inference and training memory), as
accelerate's estimate-memory prints every dtype in one table (embedcalc/api/dtypes.py states the conventions)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.markup import escape
from rich.table import Table

from embedcalc.render import units
from embedcalc.render.fit import FitTable

if TYPE_CHECKING:
    from embedcalc.api.dtypes import MemoryByDtype


def _size(value: int | None) -> str:
    return "—" if value is None else units.binary_bytes(value)


def dtype_table(result: MemoryByDtype) -> Table:
    w = result.workload
    untrained = [r.dtype for r in result.rows if r.inference_bytes is not None and r.training_bytes is None]
    failed = [f"{r.dtype}: {r.why[0]}" for r in result.rows if r.inference_bytes is None and r.why]
    largest = {r.largest_layer.name for r in result.rows if r.largest_layer is not None}
    caption = (
        f"Memory per device. Inference: batch {w.batch_size} × {w.seq_len} tokens"
        + (f" + {w.gen_tokens} generated" if w.gen_tokens else "")
        + f" (weights, KV cache, activations); training: one step of the same batch with {w.optimizer} "
        "(weights, gradients, optimizer state, saved activations). Largest layer: the most bytes one device "
        'must hold at once when layers are placed or offloaded whole (device_map="auto")'
        + (f": {', '.join(sorted(largest))}" if largest else "")
        + "."
        + (f" {', '.join(untrained)}: inference formats, not trained." if untrained else "")
        + (f" {'; '.join(failed)}." if failed else "")
    )
    table = FitTable(title=f"Memory by dtype — {escape(result.target)}", title_justify="left",
                     caption=escape(caption))  # fmt: skip
    for name in ("dtype", "weights", "largest layer", "inference", "training"):
        table.add_column(name, justify="left" if name == "dtype" else "right", whole=True)
    for r in result.rows:
        layer = None if r.largest_layer is None else r.largest_layer.bytes
        table.add_row(r.dtype, _size(r.weights_bytes), _size(layer), _size(r.inference_bytes),
                      _size(r.training_bytes), style="" if r.inference_bytes is not None else "dim")  # fmt: skip
    return table
