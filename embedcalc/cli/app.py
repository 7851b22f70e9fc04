"""The ``embedcalc`` Typer application: registers one module per command and owns the process exit."""

from __future__ import annotations

from typing import Annotated

import typer

from embedcalc import __version__
from embedcalc.cli import analyze, bench, check, compare, heads, presets, schema, sweep, verify
from embedcalc.cli.common import DEBUG

app = typer.Typer(
    name="embedcalc",
    help="Configurator and cost calculator for Transformer models: validate a shape, count its parameters, "
    "FLOPs and memory exactly, compare shapes, and time the real model in PyTorch.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"embedcalc {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    debug: Annotated[
        bool, typer.Option("--debug", help="Show tracebacks instead of one-line errors.")
    ] = False,
    version: Annotated[
        bool | None,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit."),
    ] = None,
) -> None:
    """embedcalc: Transformer shapes, costs and benchmarks."""
    DEBUG["enabled"] = debug


app.command("check")(check.check_command)
app.command("analyze")(analyze.analyze_command)
app.command("compare")(compare.compare_command)
app.add_typer(presets.app, name="presets")
app.command("heads")(heads.heads_command)
app.command("schema")(schema.schema_command)
app.command("sweep")(sweep.sweep_command)
app.command("verify")(verify.verify_command)
app.command("bench")(bench.bench_command)


def main() -> None:
    """Console-script entry point."""
    app(prog_name="embedcalc")
