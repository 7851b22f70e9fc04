"""``embedcalc heads EMBED_DIM``: every valid num_heads with its head_dim, marking the usual choices.

The listing and its note are :func:`embedcalc.api.heads.heads` (bounded for any EMBED_DIM of at most
``MAX_INT_DIGITS`` digits). A table shows at most ``MAX_TABLE_ROWS`` of them (JSON all).
"""

from __future__ import annotations

from typing import Annotated

import typer

from embedcalc.cli import output
from embedcalc.cli.common import FormatOption, OutputFormat, handle_errors
from embedcalc.cli.options import bounded_int

MAX_TABLE_ROWS = 100  # a table of thousands of rows is unreadable and slow to draw; JSON holds them all


def _note(text: str) -> None:
    output.stderr.print(f"embedcalc: note: {text}", soft_wrap=True, markup=False, highlight=False)


@handle_errors("heads")
def heads_command(
    embed_dim: Annotated[
        int, typer.Argument(min=1, callback=bounded_int, help="Model width (embed_dim, d_model).")
    ],
    format: FormatOption = OutputFormat.table,
) -> None:
    """Every num_heads that divides EMBED_DIM, with head_dim, tensor-core alignment and the FlashAttention limit."""
    from embedcalc.api.heads import heads

    report = heads(embed_dim)
    if report.note is not None:
        _note(report.note)
    if format is OutputFormat.json:
        output.emit_json("heads", [report.to_json()])
        return
    from embedcalc.render.config_tables import heads_table

    choices = report.listing.choices
    shown = choices[:MAX_TABLE_ROWS]
    output.stdout.print(heads_table(embed_dim, shown))
    if len(shown) < len(choices):
        _note(
            f"the table shows the smallest {len(shown)} of the {len(choices):,} listed; "
            "--format json has them all"
        )
