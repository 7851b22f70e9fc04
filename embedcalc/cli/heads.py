"""``embedcalc heads EMBED_DIM``: every valid num_heads with its head_dim, marking the usual choices."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

import typer

from embedcalc.analysis.heads import head_choices
from embedcalc.cli import output
from embedcalc.cli.common import FormatOption, OutputFormat, handle_errors


@handle_errors("heads")
def heads_command(
    embed_dim: Annotated[int, typer.Argument(min=1, help="Model width (embed_dim, d_model).")],
    format: FormatOption = OutputFormat.table,
) -> None:
    """Every num_heads that divides EMBED_DIM, with head_dim, tensor-core alignment and the FlashAttention limit."""
    choices = head_choices(embed_dim)
    if format is OutputFormat.json:
        output.emit_json("heads", [{"embed_dim": embed_dim, "choices": [asdict(c) for c in choices]}])
        return
    from embedcalc.render.tables import heads_table

    output.stdout.print(heads_table(embed_dim, choices))
