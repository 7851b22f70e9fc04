"""Tables for ``bench --nproc``: the group's throughput and scaling, then one row per rank, measured vs predicted
(with the node and host of each rank when the run spans nodes); on a node other than node 0, where the report is."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Group
from rich.markup import escape
from rich.text import Text

from embedcalc.reconcile.distributed import DistributedBench
from embedcalc.reconcile.sharding import ShardedVerify, ShardRow
from embedcalc.render import units
from embedcalc.render.fit import FitTable

if TYPE_CHECKING:
    from embedcalc.api.distributed import ElsewhereReport


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value:+.1f}%"


def distributed_table(result: DistributedBench) -> Group:
    """Summary table and per-rank table."""
    data = result.to_json()
    nodes = len({r.node_rank for r in result.ranks})
    where = f" on {nodes} nodes" if nodes > 1 else ""
    summary = FitTable(title=escape(f"{result.target}: {result.strategy} on {result.nproc} ranks{where}"),
                       title_justify="left",
                       caption=escape(f"Predicted: {result.prediction_note}."))  # fmt: skip
    summary.add_column("quantity")
    summary.add_column("value", justify="right", prefer_whole=True)
    p, e = result.predicted, data["error_pct"]

    def ms(value: float | int | None) -> str | None:
        return None if value is None else f"{value * 1000:.1f} ms"

    rows = [
        ("step (slowest rank's median)", f"{result.step_s * 1000:.1f} ms"),
        ("step predicted", units.predicted(ms(p["step_s"]), e["step_s"])),
        ("tokens/s (all ranks)", f"{result.tokens_per_s:,.0f}"),
        ("tokens/s predicted", units.predicted(None if p["tokens_per_s"] is None else f"{p['tokens_per_s']:,.0f}",
                                               e["tokens_per_s"])),
        ("achieved FLOP/s (all ranks)", units.si(data["achieved_flops_per_s"], "FLOP/s")),
        ("one-process step", "—" if result.baseline is None else f"{result.baseline.median_s * 1000:.1f} ms"),
        ("scaling efficiency", "—" if result.scaling_efficiency is None else units.percent(result.scaling_efficiency)),
        ("collectives per step (measured)", f"{result.comm_s * 1000:.1f} ms"),
        ("collectives per step predicted", units.predicted(ms(p["comm_s_per_step"]), e["comm_s_per_step"])),
        ("bytes sent per rank per step (predicted)", units.binary_bytes(result.predicted_comm.wire_bytes)),
        ("implied collective bandwidth", "—" if result.achieved_comm_bytes_per_s is None
         else units.binary_bytes(result.achieved_comm_bytes_per_s) + "/s"),
    ]  # fmt: skip
    for name, value in rows:
        summary.add_row(name, value)
    ranks = FitTable(
        title="per rank", title_justify="left", keep=1,
        caption=escape(f"memory: {data['memory_method']}; predicted: the analytic per-device estimate"),
    )  # fmt: skip
    for column in ("rank", *(("node", "host") if nodes > 1 else ()), "median", "p10 / p90", "peak memory", "predicted",
                   "error", "params", "predicted"):  # fmt: skip
        ranks.add_column(column, justify="right", whole=column != "host")
    for row in result.rank_rows():
        ranks.add_row(
            str(row["rank"]), *((str(row["node_rank"]), escape(row["host"])) if nodes > 1 else ()),
            f"{row['median_s'] * 1000:.1f} ms",
            f"{row['p10_s'] * 1000:.1f} / {row['p90_s'] * 1000:.1f}",
            units.binary_bytes(row["peak_memory_bytes"]), units.binary_bytes(row["predicted_memory_bytes"]),
            _pct(row["memory_error_pct"]), units.count(row["local_params"]), units.count(row["predicted_params"]),
        )  # fmt: skip
    return Group(summary, ranks)


def sharded_tables(result: ShardedVerify) -> Group:
    """Per key (ranks collapsed when they hold the same), collectives per pass, pipeline stages."""
    p = result.parallel
    shards = FitTable(title=escape(f"Shards — {result.target} at tp {p.tp}, dp {p.dp}, zero {p.zero}: analytic vs "
                                "torch local numel"), title_justify="left")  # fmt: skip
    for column in ("component", "ranks", "analytic", "torch", "ok"):
        shards.add_column(column, justify="left" if column in ("component", "ranks") else "right",
                          whole=column != "component")  # fmt: skip
    by_key: dict[str, list[ShardRow]] = {}
    for row in result.shards:
        by_key.setdefault(row.key, []).append(row)
    for key, rows in by_key.items():
        values = {(r.analytic, r.torch) for r in rows}
        if len(values) == 1:
            ((analytic, held),) = values
            shards.add_row(
                key, "all", units.count(analytic), units.count(held), "yes" if analytic == held else "NO"
            )
            continue
        for r in rows:
            shards.add_row(
                key, str(r.rank), units.count(r.analytic), units.count(r.torch), "yes" if r.ok else "NO"
            )
    parts: list[Any] = [shards]
    if result.collectives:
        comm = FitTable(
            title="Collectives of one training step (CommDebugMode)", title_justify="left", keep=2
        )
        for column in (
            "collective",
            "pass",
            "analytic calls",
            "torch calls",
            "analytic bytes",
            "torch bytes",
            "ok",
        ):
            comm.add_column(
                column, justify="left" if column in ("collective", "pass") else "right", whole=True
            )
        for c in result.collectives:
            comm.add_row(c.kind, c.phase, str(c.analytic_count), str(c.torch_count), units.count(c.analytic_bytes),
                         units.count(c.torch_bytes), "yes" if c.ok else "NO")  # fmt: skip
        parts.append(comm)
    if result.stages:
        stages = FitTable(
            title=f"Pipeline stages (pp {p.pp}): analytic vs module split", title_justify="left"
        )
        for column in ("stage", "analytic", "torch", "ok"):
            stages.add_column(column, justify="right", whole=True)
        for s in result.stages:
            stages.add_row(
                str(s.rank), units.count(s.analytic), units.count(s.torch), "yes" if s.ok else "NO"
            )
        parts.append(stages)
    for note in result.notes:
        parts.append(escape(f"note: {note}"))
    return Group(*parts)


def communication_table(analysis: Any) -> FitTable | None:
    """The collectives of one device per step (analyze --tp/--dp/--pp/--ep), or None on one device."""
    comm = analysis.communication
    if not comm.collectives:
        return None
    p = analysis.workload.parallel
    table = FitTable(
        title=escape(f"Communication per device per {'step' if analysis.workload.mode == 'training' else 'forward'}"
                     f" — tp {p.tp}, pp {p.pp}, dp {p.dp}, zero {p.zero}, ep {p.ep}"),
        title_justify="left", drop=("what", "payload"),
        caption="Ring volumes: all-reduce sends 2(N-1)/N of the payload per device, reduce-scatter and all-gather "
        "(N-1)/N, all-to-all (N-1)/N, a pipeline send all of it.",
    )  # fmt: skip
    for column in ("collective", "group", "pass", "calls", "payload", "sent per device", "what"):
        table.add_column(column, justify="right" if column in ("calls", "payload", "sent per device") else "left",
                         whole=column != "what")  # fmt: skip
    for c in comm.collectives:
        table.add_row(c.kind, f"{c.group} ({c.group_size})", c.phase, str(c.count), units.binary_bytes(c.payload_bytes),
                      units.binary_bytes(c.wire_bytes), c.purpose)  # fmt: skip
    table.add_row("total", "", "", "", "", units.binary_bytes(comm.wire_bytes), "")
    return table


def elsewhere_note(result: ElsewhereReport) -> Text:
    """A node other than node 0: its ranks took part, the report of every rank is on node 0."""
    where = result.where
    ranks = ", ".join(str(r) for r in where.local_ranks)
    plural = "s" if len(where.local_ranks) > 1 else ""
    return Text(f"node {where.node_rank}: rank{plural} {ranks} took part; the report of every rank is on node 0, "
                f"host {where.host} (rank {where.rank}), in that node's output.")  # fmt: skip
