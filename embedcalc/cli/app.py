"""The ``embedcalc`` Typer application: registers one module per command and owns the process exit.

Start-up matters (`analyze` should cost little more than the interpreter): ``main`` imports only the module of
the command being run; ``--help`` and anything unrecognised get the full application, built by :func:`build_app`.
"""

from __future__ import annotations

import gc
import importlib
import io
import os
import sys
from typing import Annotated

import typer

from embedcalc import __version__
from embedcalc.cli.common import DEBUG_ENV, OnlineOption, RevisionOption, silence_stdout
from embedcalc.cli.startup import GC_THRESHOLD, DeferringCommand, DeferringGroup, skip_plugin_discovery
from embedcalc.errors import ExitCode
from embedcalc.sources import hub

# command name -> (module, attribute); a Typer attribute is a sub-application (presets list / show)
COMMANDS: dict[str, tuple[str, str]] = {
    "check": ("embedcalc.cli.check", "check_command"),
    "analyze": ("embedcalc.cli.analyze", "analyze_command"),
    "compare": ("embedcalc.cli.compare", "compare_command"),
    "presets": ("embedcalc.cli.presets", "app"),
    "heads": ("embedcalc.cli.heads", "heads_command"),
    "schema": ("embedcalc.cli.schema", "schema_command"),
    "verify": ("embedcalc.cli.verify", "verify_command"),
    "bench": ("embedcalc.cli.bench", "bench_command"),
    "sweep": ("embedcalc.cli.sweep", "sweep_command"),
    "explain": ("embedcalc.cli.explain", "explain_command"),
    "diff": ("embedcalc.cli.diff", "diff_command"),
    "hardware": ("embedcalc.cli.hardware", "app"),
    "plan": ("embedcalc.cli.plan", "plan_command"),
}
ROOT_FLAGS = frozenset({"--debug"})


def _version(value: bool) -> None:
    if value:
        typer.echo(f"embedcalc {__version__}")
        raise typer.Exit()


def root(
    debug: Annotated[
        bool, typer.Option("--debug", help="Show tracebacks instead of one-line errors.")
    ] = False,
    version: Annotated[
        bool | None,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit."),
    ] = None,
    revision: RevisionOption = None,
    online: OnlineOption = False,
) -> None:
    """embedcalc: Transformer shapes, costs and benchmarks."""
    if debug:
        os.environ[DEBUG_ENV] = "1"
    if revision is not None and (why := hub.revision_problem(revision)) is not None:
        raise typer.BadParameter(f"{revision[:80]!r} {why}", param_hint="'--revision'")
    hub.configure(revision, online)


def build_app(only: str | None = None) -> typer.Typer:
    """The application with every command, or with just ``only`` (same behaviour, less to import)."""
    app = typer.Typer(
        name="embedcalc",
        cls=DeferringGroup,
        help="Configurator and cost calculator for Transformer models: validate a shape, count its parameters, "
        "FLOPs and memory exactly, compare shapes, and time the real model in PyTorch.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode="markdown",
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    app.callback()(root)
    for name, (module_name, attribute) in COMMANDS.items():
        if only is not None and name != only:
            continue
        target = getattr(importlib.import_module(module_name), attribute)
        if isinstance(target, typer.Typer):
            app.add_typer(target, name=name)
        else:
            app.command(name, cls=DeferringCommand)(target)
    return app


def _command_name(argv: list[str]) -> str | None:
    """The subcommand in ``argv`` if it is known and nothing asks for the top-level help."""
    for arg in argv:
        if arg in ("-h", "--help", "--version"):
            return None
        if arg in ROOT_FLAGS:
            continue
        return arg if arg in COMMANDS else None
    return None


def _prepare_streams() -> None:
    """Make the process's streams writable whatever the shell gave it (issue 24): a closed stderr (``2>&-``) is
    replaced by /dev/null; a closed stdout (``>&-``) is an output error, exit 1, said on stderr; a stream whose
    encoding is not UTF (``LC_ALL=C PYTHONUTF8=0``) writes ``?`` for what it cannot encode (rich draws its boxes in
    ASCII there) instead of dying of UnicodeEncodeError."""
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 - the process's stderr until exit
    if sys.stdout is None:
        sys.stderr.write("embedcalc: error: cannot write output: stdout is closed\n")
        raise SystemExit(int(ExitCode.RUNTIME))
    for stream in (sys.stdout, sys.stderr):
        encoding = (getattr(stream, "encoding", None) or "").lower().replace("_", "-")
        if not encoding.startswith("utf") and isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="replace")


def main() -> None:
    """Console-script entry point. A reader that leaves early (``embedcalc ... | head``) is not a failure: exit 0
    and nothing on stderr, whether the output still sat in our buffer or was already in the pipe (the one answer
    that does not depend on the pipe's buffer size); any other exit code of the command is kept.

    pydantic's plugin discovery (a scan of every installed distribution's entry points when the first model class
    is built, tens of ms of start-up) is off for the command, unless PYDANTIC_DISABLE_PLUGINS says otherwise: the
    CLI validates its own configs and has no plugin to serve (and with it off, pydantic's plugin loader is not
    even imported: :class:`_PluginsOff`). The collector's first threshold is :data:`GC_THRESHOLD`."""
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    skip_plugin_discovery()
    gc.set_threshold(GC_THRESHOLD, *gc.get_threshold()[1:])
    _prepare_streams()
    before = _stdout_identity()
    code: int | str | None = 0
    try:
        build_app(_command_name(sys.argv[1:]))(prog_name="embedcalc")
    except SystemExit as exc:
        code = exc.code
    try:
        sys.stdout.flush()  # here, not at interpreter exit, where a broken pipe is "Exception ignored", exit 120
    except BrokenPipeError:
        silence_stdout()
    if code == 1 and before != _stdout_identity() == _devnull_identity():
        code = 0  # typer's help (its own rich console) met the broken pipe: rich moved stdout onto /dev/null
    raise SystemExit(code)


def _stdout_identity() -> tuple[int, int] | None:
    try:
        info = os.fstat(sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        return None
    return info.st_dev, info.st_ino


def _devnull_identity() -> tuple[int, int] | None:
    try:
        info = os.stat(os.devnull)
    except OSError:
        return None
    return info.st_dev, info.st_ino


def __getattr__(name: str) -> typer.Typer:
    """``embedcalc.cli.app.app``: the full application (for tests and tools), built on first use."""
    if name == "app":
        return build_app()
    raise AttributeError(name)
