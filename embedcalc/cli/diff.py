"""``embedcalc diff A B``: every weight tensor of two models, kept / reshaped / new / dropped (DESIGN.md §12).

Builds both models in torch on the meta device (no memory): exit 4 without torch, 3 if either config is invalid.
``--set`` applies to B, so ``diff llama-2-7b llama-2-7b --set num_kv_heads=8`` is the GQA conversion.
"""

from __future__ import annotations

from typing import Annotated

import typer

from embedcalc.cli import output
from embedcalc.cli.common import FormatOption, OutputFormat, SetOption, handle_errors, load
from embedcalc.cli.torch_env import require_torch


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
    require_torch()
    from embedcalc.config.checks import config_warnings
    from embedcalc.reconcile.diff import diff_models

    loaded_a, loaded_b = load(a, None), load(b, overrides)
    for loaded in (loaded_a, loaded_b):
        published = loaded.source != "file"  # a preset or a Hugging Face file: no vocabulary-padding advice
        output.warn(config_warnings(loaded.config, loaded.user_keys, published), loaded.target)
    label_b = b if not overrides else f"{b} --set " + " --set ".join(overrides)
    diff = diff_models(a, loaded_a.config, label_b, loaded_b.config)
    if format is OutputFormat.json:
        output.emit_json("diff", [diff.as_json()])
        return
    from embedcalc.render.diff import render_diff

    output.stdout.print(render_diff(diff))
