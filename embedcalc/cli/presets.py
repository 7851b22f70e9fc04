"""``embedcalc presets`` lists the shipped presets; ``embedcalc presets show NAME`` prints one as YAML."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from embedcalc.cli import output
from embedcalc.cli.common import FormatOption, OutputFormat, handle_errors

app = typer.Typer(help="List the shipped presets, or show one.", no_args_is_help=False)


@app.callback(invoke_without_command=True)
@handle_errors("presets")
def list_presets(ctx: typer.Context, format: FormatOption = OutputFormat.table) -> None:
    """List the shipped presets with their size."""
    if ctx.invoked_subcommand is not None:
        return
    from embedcalc.api.catalogue import preset_rows

    rows = preset_rows()
    if format is OutputFormat.json:
        output.emit_json("presets", rows)
        return
    from embedcalc.render.config_tables import presets_table

    output.stdout.print(presets_table(rows))


@app.command("show")
@handle_errors("presets show")
def show_preset(
    name: Annotated[str, typer.Argument(help="Preset name.")],
    format: FormatOption = OutputFormat.table,
) -> None:
    """Print one preset as YAML (with its sources), or as JSON with --format json."""
    from embedcalc.api.catalogue import preset_file

    path = preset_file(name)
    if format is OutputFormat.json:
        from embedcalc.api.load import load_target

        output.emit_json(
            "presets show", [{"name": name, "config": load_target(name).config.model_dump(mode="json")}]
        )
        return
    sys.stdout.write(path.read_text(encoding="utf-8"))
