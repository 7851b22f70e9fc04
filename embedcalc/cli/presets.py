"""``embedcalc presets`` lists the shipped presets; ``embedcalc presets show NAME`` prints one as YAML."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from embedcalc.cli import output
from embedcalc.cli.common import FormatOption, OutputFormat, handle_errors
from embedcalc.config.presets import preset_names, preset_path
from embedcalc.errors import ConfigError, Problem

app = typer.Typer(help="List the shipped presets, or show one.", no_args_is_help=False)


@app.callback(invoke_without_command=True)
@handle_errors("presets")
def list_presets(ctx: typer.Context, format: FormatOption = OutputFormat.table) -> None:
    """List the shipped presets with their size."""
    if ctx.invoked_subcommand is not None:
        return
    from embedcalc.analysis.params import count_params
    from embedcalc.api.load import load_target

    rows: list[dict[str, Any]] = []
    for name in preset_names():
        config = load_target(name).config
        rows.append(
            {
                "name": name,
                "architecture": config.architecture,
                "params": count_params(config).total,
                "embed_dim": config.embed_dim,
                "num_heads": config.num_heads,
                "num_layers": config.num_layers + config.resolved_decoder_layers,
            }
        )
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
    path = preset_path(name)
    if path is None:
        from embedcalc.config.problems import did_you_mean

        names = preset_names()
        message = f"unknown preset {name!r}{did_you_mean(name, names)}; presets: {', '.join(names)}"
        raise ConfigError(message, [Problem(name, message, "unknown_preset")], "unknown_preset")
    if format is OutputFormat.json:
        from embedcalc.api.load import load_target

        output.emit_json(
            "presets show", [{"name": name, "config": load_target(name).config.model_dump(mode="json")}]
        )
        return
    sys.stdout.write(path.read_text(encoding="utf-8"))
