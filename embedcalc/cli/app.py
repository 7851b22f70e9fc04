"""The ``embedcalc`` Typer application: registers one module per command and owns the process exit.

Start-up matters (`analyze` should cost little more than the interpreter): ``main`` imports only the module of
the command being run; ``--help`` and anything unrecognised get the full application, built by :func:`build_app`.
"""

from __future__ import annotations

import gc
import importlib
import importlib.machinery
import importlib.util
import io
import os
import sys
import types
from typing import TYPE_CHECKING, Annotated, Any

import typer
import typer.core

try:  # typer >= 0.29 coerces through its own runtime parameters (older typer: click types, nothing to defer)
    from typer._click.core import ParameterSource
    from typer._coercion import RuntimeParam, build_runtime_param

    _TYPER_COERCION = True
except ImportError:  # pragma: no cover - typer < 0.29
    _TYPER_COERCION = False

from embedcalc import __version__
from embedcalc.cli.common import DEBUG_ENV, OnlineOption, RevisionOption, silence_stdout
from embedcalc.config import hub
from embedcalc.errors import ExitCode

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


if TYPE_CHECKING or _TYPER_COERCION:

    class _DeferredCoercion(RuntimeParam):
        """A parameter's coercion, built only when a value reaches it. typer (0.29) builds a pydantic TypeAdapter
        for every parameter of the command being run, about 0.3 ms each, the first one loading pydantic's schema
        machinery, even for a parameter left at its default.

        Exact, not approximate: a missing value is typer's own :meth:`RuntimeParam.coerce` (None or ``()``, which
        never touches the adapter); the default, when the value is the default, is returned as it is, which is
        what typer's coercion returns for every default of every command (tests/cli/test_cli.py coerces each one
        through typer's adapter and checks the identity); any other value goes to typer's own adapter, built on
        that first use."""

        def _coerce_value(self, value: Any, param: typer.core._TyperParameter, ctx: Any) -> Any:
            if value is param.default and ctx.get_parameter_source(param.name) is ParameterSource.DEFAULT:
                return value
            param._runtime_param = real = build_runtime_param(param.type_descriptor)
            return real._coerce_value(value, param=param, ctx=ctx)


def _defer(param: Any) -> None:
    if _TYPER_COERCION and isinstance(param, typer.core._TyperParameter) and param._runtime_param is None:
        descriptor = param.type_descriptor
        param._runtime_param = _DeferredCoercion(descriptor.parameter_info, descriptor.annotation)


def defer_coercion(command: Any) -> None:
    """Give every parameter of ``command`` and of its subcommands a :class:`_DeferredCoercion`."""
    for param in getattr(command, "params", ()):
        _defer(param)
    for sub in getattr(command, "commands", {}).values():
        defer_coercion(sub)


class _Deferring:
    """Mixin of a typer command or group: the coercion of its parameters (and of its subcommands') deferred, and
    of --help's too (an option click makes on first use)."""

    def __init__(self, *args: Any, **attrs: Any) -> None:
        super().__init__(*args, **attrs)
        defer_coercion(self)

    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)  # type: ignore[misc]
        _defer(option)
        return option


class _Command(_Deferring, typer.core.TyperCommand):
    """A command of the application (:class:`_Deferring`)."""


class _Group(_Deferring, typer.core.TyperGroup):
    """The application's root group (:class:`_Deferring`)."""


def build_app(only: str | None = None) -> typer.Typer:
    """The application with every command, or with just ``only`` (same behaviour, less to import)."""
    app = typer.Typer(
        name="embedcalc",
        cls=_Group,
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
            app.command(name, cls=_Command)(target)
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


_PLUGIN_LOADER = "pydantic.plugin._loader"
# the values of PYDANTIC_DISABLE_PLUGINS that pydantic's loader reads as "no plugins"
_PLUGINS_OFF = ("__all__", "1", "true")


def _plugins_off() -> bool:
    return os.environ.get("PYDANTIC_DISABLE_PLUGINS") in _PLUGINS_OFF


def _real_plugin_loader() -> types.ModuleType:
    """pydantic's own plugin loader, imported (from its file, past :class:`_PluginsOff`) in place of the stand-in."""
    import pydantic.plugin

    spec = importlib.machinery.PathFinder.find_spec(_PLUGIN_LOADER, list(pydantic.plugin.__path__))
    assert spec is not None and spec.loader is not None, _PLUGIN_LOADER
    module = importlib.util.module_from_spec(spec)
    sys.modules[_PLUGIN_LOADER] = module
    spec.loader.exec_module(module)
    return module


class _PluginsOff:
    """Import hook (a ``sys.meta_path`` finder and its loader) for pydantic's plugin loader while
    PYDANTIC_DISABLE_PLUGINS says there are no plugins. pydantic imports that loader on the first validator it
    builds, and the loader imports importlib.metadata (email, zipfile, csv with it: about 20 ms) at its top, only
    for ``get_plugins`` to return ``()`` under that variable. The stand-in's ``get_plugins`` returns the same;
    the moment the variable says otherwise, or anything else of the module is asked for, the real loader is
    imported and answers (tests/cli/test_app.py)."""

    @staticmethod
    def find_spec(name: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name != _PLUGIN_LOADER or not _plugins_off():
            return None
        loader: Any = _PluginsOff
        return importlib.machinery.ModuleSpec(name, loader, origin="embedcalc.cli.app (plugins off)")

    @staticmethod
    def create_module(spec: importlib.machinery.ModuleSpec) -> None:
        return None  # the default module

    @staticmethod
    def exec_module(module: types.ModuleType) -> None:
        def get_plugins() -> Any:
            return () if _plugins_off() else _real_plugin_loader().get_plugins()

        def __getattr__(name: str) -> Any:
            if name.startswith("__"):  # what the import system asks of a module (__path__, ...)
                raise AttributeError(name)
            return getattr(_real_plugin_loader(), name)

        module.get_plugins = get_plugins  # type: ignore[attr-defined]
        module.__getattr__ = __getattr__  # type: ignore[method-assign]


def skip_plugin_discovery() -> None:
    """Install :class:`_PluginsOff` (once)."""
    if _PluginsOff not in sys.meta_path:
        sys.meta_path.insert(0, _PluginsOff)


# The objects a command's start-up creates (typer's parameters, pydantic's schemas and validators, the classes of
# the path: about 40,000 for `analyze PRESET`) live until the process exits, and few of them are garbage; at
# CPython's default threshold of 700 net allocations the collector ran 27 times over them (about 10 ms of CPU,
# 5% of the start-up). With this threshold it does not run during the start-up, and in a long command it still
# collects, every 50,000 net allocations (a bound of a few MB on uncollected cycles).
GC_THRESHOLD = 50_000


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
