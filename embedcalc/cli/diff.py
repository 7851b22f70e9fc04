"""``embedcalc diff A B``: every weight tensor of two models, kept / resized / reshaped / new / dropped (DESIGN.md §12).

Builds both models in torch on the meta device (no memory): exit 4 without torch, 3 if either config is invalid.
``--set`` applies to B, so ``diff llama-2-7b llama-2-7b --set num_kv_heads=8`` is the GQA conversion.
"""

from __future__ import annotations

from typing import Annotated

import typer

from embedcalc.cli import output
from embedcalc.cli.common import FormatOption, OutputFormat, SetOption, handle_errors


@handle_errors("diff")
def diff_command(
    a: Annotated[str, typer.Argument(help="The pretrained model: preset name or config file.")],
    b: Annotated[
        str, typer.Argument(help="The model to fine-tune: preset name or config file (--set applies).")
    ],
    overrides: SetOption = None,
    format: FormatOption = OutputFormat.table,
) -> None:
    """Which weights of A load into B unchanged, which change shape, which are new or dropped.

    Every tensor of both torch models by name (the names a checkpoint of embedcalc's model has), grouped by
    component, with the parameters B can load from A's checkpoint and those it must initialise, and a note on
    each common change (embed_dim, num_heads, layers, GQA, vocabulary, positions). --set overrides B only.
    """
    from embedcalc.api.diff import diff_targets

    report = diff_targets(a, b, overrides)
    output.warn(report.warnings_a, report.a.target)
    output.warn(report.warnings_b, report.b.target)
    diff = report.diff
    if format is OutputFormat.json:
        output.emit_json("diff", [diff.to_json()])
        return
    from embedcalc.render.diff import render_diff

    output.stdout.print(render_diff(diff))
