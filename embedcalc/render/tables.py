"""Rich tables for analysis results: right-aligned numbers, units, subtotals, totals, the convention in the caption.

Params, FLOPs and memory of one analysis, a comparison of several, verify's reconciliation and the measured
attention split; the tables about a config itself (check, heads, presets) are in :mod:`embedcalc.render.config_tables`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.markup import escape
from rich.table import Table
from rich.text import Text

from embedcalc.analysis.breakdown import Breakdown
from embedcalc.analysis.memory.estimate import MEMORY_KEYS
from embedcalc.analysis.report import Analysis
from embedcalc.analysis.workload import Workload
from embedcalc.render import units
from embedcalc.render.fit import FitTable

if TYPE_CHECKING:  # analyze and compare render from here without loading the measured side
    from embedcalc.analysis.memory.serving import ServingMemory
    from embedcalc.reconcile.attention_split import AttentionSplit
    from embedcalc.reconcile.verify import Reconciliation

PARAMS_CAPTION = (
    "Trainable parameters; tied weights counted once; fixed buffers (sinusoidal tables) excluded."
)
FLOPS_CAPTION = (
    "FLOPs = 2 per multiply-accumulate, matmuls only (what torch's FlopCounterMode counts); full n×n scores; "
    "training step = 3 × forward. ★ marks the O(n²·d) attention-score terms."
)


def workload_header(a: Analysis, defaulted: Sequence[str] = ()) -> Text:
    """One line above analyze's tables: the workload every number is for, and which of its sizes nobody chose
    (``defaulted``: the Workload fields left at their defaults), since a default is rarely the user's run."""
    w = a.workload
    tokens = f"seq_len {w.seq_len}" + (f", tgt_len {w.tgt_len}" if w.tgt_len is not None else "")
    par = w.parallel
    layout = ", ".join(
        f"{k} {getattr(par, k)}" for k in ("tp", "cp", "pp", "dp", "ep") if getattr(par, k) > 1
    )
    parts = [w.mode, f"batch {w.batch_size} × {tokens}", f"{w.dtype} ({w.dtype_source})", layout]
    line = f"Workload — {a.target}: " + ", ".join(p for p in parts if p)
    sizes = {"batch_size": f"--batch-size {w.batch_size}", "seq_len": f"--seq-len {w.seq_len}"}
    unchosen = [flag for name, flag in sizes.items() if name in defaulted]
    if unchosen:
        line += f" [defaults: {', '.join(unchosen)}; set the run's own]"
    return Text(line)


def _group_rows(
    table: Table, breakdown: Breakdown, fmt: type[str] | object, score_marker: bool = False
) -> None:
    total = breakdown.total or 1
    current = None
    groups = breakdown.group(1)
    for key, value in breakdown.items():
        group = key.split("/")[0]
        if group != current and "/" in key:
            current = group
            table.add_row(
                f"[bold]{group}[/]",
                f"[bold]{units.count(groups[group])}[/]",
                f"[bold]{units.percent(groups[group] / total)}[/]",
                style="",
            )
        elif "/" not in key:
            current = group
        label = key if "/" not in key else "  " + key.split("/", 1)[1]
        if score_marker and key.rsplit("/", 1)[-1] in ("scores", "context", "index_scores"):  # the n² terms
            label += " ★"
        table.add_row(label, units.count(value), units.percent(value / total))


def params_table(a: Analysis) -> Table:
    table = FitTable(title=f"Parameters — {escape(a.target)}", caption=PARAMS_CAPTION, title_justify="left")
    table.add_column("component")
    table.add_column("params", justify="right", whole=True)
    table.add_column("share", justify="right", whole=True)
    _group_rows(table, a.params, str)
    table.add_section()
    table.add_row(
        "[bold]total[/]", f"[bold]{units.count(a.params.total)}[/]", f"[bold]{units.si(a.params.total)}[/]"
    )
    if a.active_params != a.params.total:  # mixture of experts: top_k of the routed experts per token
        table.add_row("active params", units.count(a.active_params), units.si(a.active_params))
    return table


def flops_table(a: Analysis) -> Table:
    w = a.workload
    tgt = f", tgt_len {w.tgt_len}" if w.tgt_len is not None else ""
    table = FitTable(
        title=f"Forward FLOPs — {escape(a.target)} (batch {w.batch_size}, seq_len {w.seq_len}{tgt})",
        caption=FLOPS_CAPTION,
        title_justify="left",
    )
    table.add_column("component")
    table.add_column("FLOPs", justify="right", whole=True)
    table.add_column("share", justify="right", whole=True)
    _group_rows(table, a.flops.breakdown, str, score_marker=True)
    table.add_section()
    f = a.flops
    table.add_row(
        "[bold]forward[/]", f"[bold]{units.count(f.forward)}[/]", f"[bold]{units.flops(f.forward)}[/]"
    )
    table.add_row(
        "attention scores ★ (n²)",
        units.count(f.attention_score_flops),
        units.percent(f.attention_score_share),
    )
    if f.forward_causal is not None:
        table.add_row(
            "forward, causal/windowed pairs", units.count(f.forward_causal), units.flops(f.forward_causal)
        )
    table.add_row("training step (3 × forward)", units.count(f.training_step), units.flops(f.training_step))
    elementwise = f.elementwise.total
    table.add_row(
        "[dim]element-wise estimate (not in total)[/]",
        f"[dim]{units.count(elementwise)}[/]",
        f"[dim]{units.flops(elementwise)}[/]",
    )
    table.add_row("attention crossover n*", crossover_text(a.crossover_seq_len), "tokens")
    return table


def memory_table(a: Analysis, serving: ServingMemory | None = None) -> Table:
    w = a.workload
    table = FitTable(
        title=f"Memory — {w.mode}, {dtype_label(w)}, attention {w.attention}",
        title_justify="left",
        caption=_memory_caption(a),
    )
    table.add_column("kind")
    table.add_column("bytes", justify="right", whole=True)
    table.add_column("size", justify="right", whole=True)
    memory = a.memory.as_dict()
    for key, value in memory.items():
        if key in ("total_bytes", "buffers_bytes"):
            continue
        if value or key in ("weights_bytes", "activations_bytes"):
            table.add_row(
                key.removesuffix("_bytes").replace("_", " "), units.count(value), units.binary_bytes(value)
            )
        if key == "weights_bytes" and (buffers := memory.get("buffers_bytes")):  # a part of the weights
            table.add_row("  [dim]weights: of which fixed buffers[/]", f"[dim]{units.count(buffers)}[/]",
                          f"[dim]{units.binary_bytes(buffers)}[/]")  # fmt: skip
    for key, value in a.memory.activations.items():
        table.add_row(
            f"  [dim]activations: {key}[/]",
            f"[dim]{units.count(value)}[/]",
            f"[dim]{units.binary_bytes(value)}[/]",
        )
    if len(a.memory.stages) > 1:
        for st in a.memory.stages:
            table.add_row(
                f"  [dim]stage {st.index} ({st.num_layers} blocks, {units.si(st.params)} params)[/]",
                f"[dim]{units.count(st.total_bytes)}[/]",
                f"[dim]{units.binary_bytes(st.total_bytes)}[/]",
            )
    table.add_section()
    total = memory["total_bytes"]
    table.add_row("[bold]total[/]", f"[bold]{units.count(total)}[/]", f"[bold]{units.binary_bytes(total)}[/]")
    if serving is not None:
        _serving_rows(table, serving)
    return table


def _serving_rows(table: FitTable, s: ServingMemory) -> None:
    """The memory a server holds for ``s.concurrency`` sequences, and whether it fits (analysis/memory/serving.py)."""
    table.add_section()
    table.add_row(f"[bold]serving: {s.concurrency:,} in flight[/]", "", "")
    rows = [
        ("weights", s.weights_bytes),
        ("activation workspace", s.workspace_bytes),
        (f"KV cache ({s.concurrency:,} sequence{'s' if s.concurrency != 1 else ''})", s.kv_cache_bytes),
        (f"paged KV rounding ({s.tokens_per_sequence:,} -> {s.paged_tokens_per_sequence:,} tokens)",
         s.kv_paging_bytes),
    ]  # fmt: skip
    if s.recurrent_state_bytes:
        rows.append((f"recurrent state ({s.concurrency:,} sequences)", s.recurrent_state_bytes))
    for label, value in rows:
        table.add_row(f"  {label}", units.count(value), units.binary_bytes(value))
    table.add_row("[bold]  serving total[/]", f"[bold]{units.count(s.used_bytes)}[/]",
                  f"[bold]{units.binary_bytes(s.used_bytes)}[/]")  # fmt: skip
    usable = s.usable_bytes
    if usable is None or s.device_bytes is None:
        return
    # the total above is what the server holds; the reserve is outside it, left to the rest of the process
    share = (
        f"{s.utilization:.0%} of {units.binary_bytes(s.device_bytes)}" if s.utilization is not None else "all"
    )
    table.add_row(
        f"  usable: {share}, the rest a runtime reserve", units.count(usable), units.binary_bytes(usable)
    )
    most = "" if s.max_concurrency is None else f"; at most {s.max_concurrency:,} sequences fit"
    margin = usable - s.used_bytes
    verdict = (f"[green]fits[/], {units.binary_bytes(margin)} to spare{most}" if margin >= 0 else
               f"[red]does not fit[/], {units.binary_bytes(-margin)} short{most}")  # fmt: skip
    table.add_row(f"  {verdict}", "", "")


def _memory_caption(a: Analysis) -> str:
    w = a.workload
    par = w.parallel
    where = ""
    if par.devices > 1:
        where = (
            f" Per device: tp {par.tp}, pp {par.pp}, dp {par.dp}, ZeRO {par.zero}; heaviest pipeline stage."
        )
        if par.cp > 1:
            where += (
                f" Context-parallel over {par.cp} ranks: each holds seq_len / {par.cp} tokens' activations."
            )
    if w.mode == "training":
        recipe = "fp32 weights and gradients" if w.dtype == "fp32" else "mixed precision, fp32 master copy"
        return (
            f"Weights + gradients + {w.optimizer} state ({recipe}) + saved activations (Korthikanti et al. "
            f"2022, recompute {w.recompute}).{where}"
        )
    return f"Weights + KV cache + peak activations of one forward pass (an estimate).{where}"


def crossover_text(n: int | float | None) -> str:
    """n* with thousands separators; a fractional one to one decimal (it is an exact ratio, rarely whole); "none"
    for a model without softmax attention."""
    if n is None:
        return "none (no n² term)"
    if isinstance(n, float) and not n.is_integer():
        return f"{n:,.1f}" if n == n and abs(n) != float("inf") else str(n)
    return f"{int(n):,}"


def dtype_label(w: Workload) -> str:
    """``bf16 (preset)``: the dtype and where it came from (--dtype, the preset, the config, the default)."""
    return f"{w.dtype} ({'--dtype' if w.dtype_source == 'flag' else w.dtype_source})"


def compare_rows(analyses: Sequence[Analysis]) -> list[tuple[str, list[str], list[int | float | str | None]]]:
    """(label, formatted cells, raw values) per row; shared by the table, CSV and Markdown renderings."""
    rows: list[tuple[str, list[str], list[int | float | str | None]]] = []

    def row(label: str, values: list[int | float | str | None], fmt: object = units.count) -> None:
        cells = [
            "—" if v is None else (fmt(v) if callable(fmt) and not isinstance(v, str) else str(v))
            for v in values
        ]
        rows.append((label, cells, values))

    row("architecture", [a.config.architecture for a in analyses])
    row("dtype", [dtype_label(a.workload) for a in analyses])
    row("embed_dim", [a.config.embed_dim for a in analyses])
    row(
        "num_heads / head_dim", [f"{a.config.num_heads} / {a.config.derived()['head_dim']}" for a in analyses]
    )
    row("num_kv_heads", [a.config.resolved_kv_heads for a in analyses])
    row("layers", [a.config.total_layers for a in analyses])
    row("ffn_dim", [a.config.resolved_ffn_dim for a in analyses])
    row("vocab_size", [a.config.vocab_size for a in analyses])
    row("params", [a.params.total for a in analyses])
    if any(a.active_params != a.params.total for a in analyses):
        row("active params", [a.active_params for a in analyses])
    groups = []
    for a in analyses:
        for g in a.params.group(1):
            if g not in groups:
                groups.append(g)
    for g in groups:
        row(f"  params: {g}", [a.params.group(1).get(g, 0) for a in analyses])
    row("forward FLOPs", [a.flops.forward for a in analyses])
    row("  attention scores (n²)", [a.flops.attention_score_flops for a in analyses])
    row("  attention score share", [a.flops.attention_score_share for a in analyses], units.percent)
    row("forward FLOPs, causal", [a.flops.forward_causal for a in analyses])
    row("training step FLOPs", [a.flops.training_step for a in analyses])
    row("crossover seq_len n*", [a.crossover_seq_len for a in analyses], crossover_text)
    for key in MEMORY_KEYS:
        row(key, [a.memory.as_dict()[key] for a in analyses], units.binary_bytes)
    return rows


def compare_table(analyses: Sequence[Analysis]) -> Table:
    w = analyses[0].workload
    table = FitTable(
        title=f"Compare — batch {w.batch_size}, seq_len {w.seq_len}, {w.mode}",
        caption=PARAMS_CAPTION + " " + FLOPS_CAPTION,
        title_justify="left",
        keep=1,  # too wide: the targets in groups, one table below the other, each with the labels
    )
    table.add_column("")
    for a in analyses:
        table.add_column(escape(a.target), justify="right", whole=True)
    for label, cells, _ in compare_rows(analyses):
        table.add_row(label, *cells)
    return table


def reconcile_table(title: str, reconciliation: Reconciliation) -> Table:
    """component | analytic | counted | difference, with a total row; mismatches in red."""
    table = FitTable(title=escape(title), title_justify="left")
    table.add_column("component")
    for name in ("analytic", "torch", "difference"):
        table.add_column(name, justify="right", whole=True)
    for r in reconciliation.rows:
        table.add_row(
            r.component,
            units.count(r.analytic),
            units.count(r.counted),
            f"{r.difference:+,}" if r.difference else "0",
            style="red" if r.difference else None,
        )
    table.add_section()
    a, c = reconciliation.analytic_total, reconciliation.counted_total
    table.add_row(
        "[bold]total[/]",
        f"[bold]{units.count(a)}[/]",
        f"[bold]{units.count(c)}[/]",
        f"{c - a:+,}" if c != a else "0",
    )
    return table


def verify_verdict(
    target: str, params: Reconciliation, flops: Reconciliation, others: Sequence[tuple[str, bool]] = ()
) -> str:
    """The one line under verify's tables: agreed or not, over how many components, at what totals; ``others``: the
    other reconciliations run (every shard, a fine-tune's counts) and whether each agreed."""
    off = [r.component for r in (*params.rows, *flops.rows) if r.difference]
    if off:
        more = " ..." if len(off) > 6 else ""
        return f"verify {target}: DIFFER on {len(off)} component(s): {', '.join(off[:6])}{more}"
    agreed = [what for what, ok in others if ok]
    differ = [what for what, ok in others if not ok]

    def over(n: int) -> str:
        return f"{n} component{'s' if n != 1 else ''}"

    counts = (f"{units.count(params.analytic_total)} parameters over {over(len(params.rows))} and "
              f"{units.count(flops.analytic_total)} forward FLOPs over {over(len(flops.rows))}")  # fmt: skip
    if differ:
        return f"verify {target}: {counts} exact, but {' and '.join(differ)} DIFFER"
    too = f"; {' and '.join(agreed)} too" if agreed else ""
    return f"verify {target}: exact — {counts}, analytic = torch{too}"


def measure_table(target: str, measured: AttentionSplit) -> Table:
    """Measured attention vs rest time per seq_len, beside the FLOP-predicted attention share."""
    crossover = measured.measured_crossover_seq_len
    found = f"{crossover:,.0f}" if crossover is not None else "not reached in the range"
    table = FitTable(
        title=escape(f"Measured attention split — {target} on {measured.device} ({measured.threads} threads)"),
        title_justify="left",
        caption=escape(
            f"Crossover seq_len: measured {found}, predicted n* = {measured.predicted_crossover_seq_len} "
            f"(FLOPs). Method: {measured.method}."
        ),
    )  # fmt: skip
    for name in (
        "seq_len",
        "forward",
        "attention",
        "rest",
        "attention share (measured)",
        "(predicted, FLOPs)",
    ):
        table.add_column(name, justify="right", whole=True)
    for p in measured.points:
        table.add_row(
            str(p.seq_len), f"{p.full_s * 1000:,.1f} ms", f"{p.attention_s * 1000:,.1f} ms",
            f"{p.rest_s * 1000:,.1f} ms", units.percent(p.measured_attention_share),
            units.percent(p.predicted_attention_share),
        )  # fmt: skip
    return table
