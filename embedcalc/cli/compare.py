"""``embedcalc compare TARGET TARGET...``: the same numbers side by side, one column per target."""

from __future__ import annotations

import csv
import io
import sys
from typing import Annotated

import typer

from embedcalc.cli import output
from embedcalc.cli.analyze import analyze_target
from embedcalc.cli.common import (
    AttentionChoice,
    AttentionOption,
    BatchOption,
    CompareFormat,
    DtypeChoice,
    DtypeOption,
    ModeChoice,
    ModeOption,
    SeqOption,
    SetOption,
    TgtOption,
    handle_errors,
    make_workload,
)
from embedcalc.errors import ConfigError, Problem


@handle_errors("compare")
def compare_command(
    targets: Annotated[list[str], typer.Argument(help="Two or more preset names or config files.")],
    batch_size: BatchOption = 1,
    seq_len: SeqOption = 128,
    tgt_len: TgtOption = None,
    dtype: DtypeOption = DtypeChoice.float32,
    mode: ModeOption = ModeChoice.inference,
    attention: AttentionOption = AttentionChoice.sdpa,
    overrides: SetOption = None,
    format: Annotated[
        CompareFormat, typer.Option("--format", "-f", help="Output format.")
    ] = CompareFormat.table,
) -> None:
    """Params, FLOPs and memory of several configs side by side (--set applies to every target)."""
    workload = make_workload(batch_size, seq_len, tgt_len, dtype, mode, attention)
    analyses = []
    problems: list[Problem] = []
    messages = []
    for target in targets:
        try:
            analyses.append(analyze_target(target, overrides, workload))
        except ConfigError as exc:
            problems += [Problem(f"{target}: {p.path}", p.message, p.code) for p in exc.problems]
            messages.append(exc.message)
    if problems:
        raise ConfigError("\n".join(messages), problems)
    if format is CompareFormat.json:
        output.emit_json("compare", [a.as_json() for a in analyses], workload.as_dict())
        return
    from embedcalc.render.tables import compare_rows, compare_table

    if format is CompareFormat.table:
        output.stdout.print(compare_table(analyses))
        return
    rows = compare_rows(analyses)
    header = ["quantity", *(a.target for a in analyses)]
    if format is CompareFormat.csv:
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(header)
        for label, _, raw in rows:
            writer.writerow([label.strip(), *("" if v is None else v for v in raw)])
        sys.stdout.write(buffer.getvalue())
        return
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" + "---:|" * len(analyses)]
    lines += ["| " + " | ".join([label.strip(), *cells]) + " |" for label, cells, _ in rows]
    sys.stdout.write("\n".join(lines) + "\n")
