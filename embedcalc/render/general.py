"""Tables for the general reader (DESIGN §19): a model counted by transformers' own class on the meta device.

The same shape as ``analyze``'s tables (component rows grouped by their first segment, totals below), each titled
with the path the numbers took, and the cache per run of identical layers.
"""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from embedcalc.reconcile.general import GeneralCount
from embedcalc.render import units
from embedcalc.render.fit import FitTable
from embedcalc.render.tables import _group_rows

__all__ = ["general_tables"]

_PARAMS = (
    "Trainable parameters of transformers' class as built (named_parameters: tied weights once), placed by module "
    "name as verify --checkpoint places tensors; other/...: modules no rule names (still in the total)."
)
_FLOPS = (
    "FlopCounterMode on one meta forward: 2 per multiply-accumulate, eager attention (full n×n scores), top_k "
    "experts per token. attention/core = Q·Kᵀ + weights·V; mixer/core = a recurrent mixer's own scan/conv work."
)


def _params(c: GeneralCount) -> Table:
    caption = (
        f"{c.counted_by[0].upper()}{c.counted_by[1:]} (transformers {c.transformers_version}). {_PARAMS}"
    )
    table = FitTable(title=f"Parameters — {escape(c.target)}", caption=escape(caption), title_justify="left")
    table.add_column("component")
    table.add_column("params", justify="right", whole=True)
    table.add_column("share", justify="right", whole=True)
    _group_rows(table, c.params, str)
    table.add_section()
    total = c.params.total
    table.add_row("[bold]total[/]", f"[bold]{units.count(total)}[/]", f"[bold]{units.si(total)}[/]")
    active = c.active_params
    if c.experts:
        text = (units.count(active), units.si(active)) if active is not None else ("unknown", "no top-k")
        table.add_row("active params", *text)
    if c.outside_params:
        table.add_row("[dim]not counted: vision/audio towers[/]", f"[dim]{units.count(c.outside_params)}[/]",
                      f"[dim]{units.si(c.outside_params)}[/]")  # fmt: skip
    return table


def _flops(c: GeneralCount) -> Table:
    w = c.workload
    tgt = f", tgt_len {w['tgt_len']}" if w.get("tgt_len") is not None else ""
    title = f"Forward FLOPs — {escape(c.target)} (batch {w['batch_size']}, seq_len {w['seq_len']}{tgt})"
    alone = (
        f" The language model ({c.ran_alone}) run alone on token ids: the vision tower is not run."
        if c.ran_alone
        else ""
    )
    table = FitTable(title=title, caption=escape(_FLOPS + alone), title_justify="left")
    table.add_column("component")
    table.add_column("FLOPs", justify="right", whole=True)
    table.add_column("share", justify="right", whole=True)
    if c.flops is None:
        table.add_row("not counted", escape(c.flops_error or "the forward failed on meta tensors"), "")
        return table
    _group_rows(table, c.flops, str)
    table.add_section()
    total = c.flops.total
    table.add_row("[bold]forward[/]", f"[bold]{units.count(total)}[/]", f"[bold]{units.flops(total)}[/]")
    return table


def _runs(c: GeneralCount) -> list[tuple[str, int, int, int]]:
    """(layers, count, kv bytes, state bytes) per run of consecutive layers with the same cache."""
    runs: list[tuple[list[int], str, int, int]] = []
    for layer in c.cache or ():
        if runs and runs[-1][1:] == (layer.stack, layer.kv_bytes, layer.state_bytes):
            runs[-1][0].append(layer.layer)
        else:
            runs.append(([layer.layer], layer.stack, layer.kv_bytes, layer.state_bytes))
    out = []
    for layers, stack, kv, state in runs:
        span = str(layers[0]) if len(layers) == 1 else f"{layers[0]}–{layers[-1]}"
        out.append((f"{stack} {span}", len(layers), kv, state))
    return out


def _memory(c: GeneralCount) -> Table:
    dtype = c.workload.get("dtype")
    cls = f", {escape(c.cache_class)}" if c.cache_class else ""
    caption = "The family's own cache after the forward (seq_len + gen_tokens tokens), per layer."
    table = FitTable(title=f"Memory — inference, {dtype}{cls}", title_justify="left", caption=caption)
    table.add_column("kind")
    table.add_column("bytes", justify="right", whole=True)
    table.add_column("size", justify="right", whole=True)
    table.add_row("weights", units.count(c.weights_bytes), units.binary_bytes(c.weights_bytes))
    if c.cache is None:
        table.add_row("cache: not counted", escape(c.cache_error or "the forward failed on meta tensors"), "")
        return table
    kv, state = c.kv_cache_bytes or 0, c.recurrent_state_bytes or 0
    table.add_row("kv cache", units.count(kv), units.binary_bytes(kv))
    if state:
        table.add_row("recurrent state", units.count(state), units.binary_bytes(state))
    for label, n, layer_kv, layer_state in _runs(c):
        per = " + ".join(
            f"{what} {units.binary_bytes(v)}" for what, v in (("kv", layer_kv), ("state", layer_state)) if v
        )
        table.add_row(f"  [dim]layers {label} (×{n})[/]", f"[dim]{units.count(n * (layer_kv + layer_state))}[/]",
                      f"[dim]{per or '0 B'} each[/]")  # fmt: skip
    table.add_section()
    total = c.memory_bytes
    table.add_row("[bold]total[/]", f"[bold]{units.count(total)}[/]", f"[bold]{units.binary_bytes(total)}[/]")
    return table


def general_tables(c: GeneralCount) -> list[Table]:
    """The params, FLOPs and memory tables of a general-reader count."""
    return [_params(c), _flops(c), _memory(c)]
