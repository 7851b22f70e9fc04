"""Start-up shortcuts into the dependencies' lazy work, for the CLI process (issue 22 item 6).

Three things the libraries would do on every run that a run of ``embedcalc`` does not need, each exact (the
answer is the library's own) and each guarded by tests/cli/test_app.py, since two reach into private modules:

- typer (0.29) builds a pydantic TypeAdapter for every parameter of the command being run;
  :class:`_DeferredCoercion` builds one only when a value reaches the parameter (:func:`defer_coercion`, used by
  the application's command and group classes), and none for text given to a ``str`` parameter or a valid choice
  (:func:`_plain_coercion`), so ``analyze PRESET --format json`` builds no adapter and never loads pydantic's
  model machinery. Off on a typer without ``typer._coercion``.
- pydantic imports its plugin loader on the first validator, and the loader imports importlib.metadata, only to
  answer "no plugins" when PYDANTIC_DISABLE_PLUGINS says so: :class:`_PluginsOff` answers the same without it.
- the collector's first threshold, :data:`GC_THRESHOLD`, keeps it from scanning the start-up's long-lived objects.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
import types
from typing import TYPE_CHECKING, Any

import typer.core

try:  # typer >= 0.29 coerces through its own runtime parameters (older typer: click types, nothing to defer)
    from typer._click.core import ParameterSource
    from typer._coercion import RuntimeParam, TypeDescriptor, build_runtime_param
    from typer._param_types import choice_coercion_annotation, coerce_cli_choice

    _TYPER_COERCION = True
except ImportError:  # pragma: no cover - typer < 0.29
    _TYPER_COERCION = False

if TYPE_CHECKING or _TYPER_COERCION:

    class _DeferredCoercion(RuntimeParam):
        """A parameter's coercion, built only when a value reaches it. typer (0.29) builds a pydantic TypeAdapter
        for every parameter of the command being run, about 0.3 ms each, the first one loading pydantic's schema
        machinery, even for a parameter left at its default.

        Exact, not approximate: a missing value is typer's own :meth:`RuntimeParam.coerce` (None or ``()``, which
        never touches the adapter); the default, when the value is the default, is returned as it is, which is
        what typer's coercion returns for every default of every command (tests/cli/test_app.py coerces each one
        through typer's adapter and checks the identity); any other value goes to typer's own adapter, built on
        that first use."""

        def _coerce_value(self, value: Any, param: typer.core._TyperParameter, ctx: Any) -> Any:
            if value is param.default and ctx.get_parameter_source(param.name) is ParameterSource.DEFAULT:
                return value
            plain = _plain_coercion(param.type_descriptor, value, ctx)
            if plain is not _NOT_PLAIN:
                return plain
            param._runtime_param = real = build_runtime_param(param.type_descriptor)
            return real._coerce_value(value, param=param, ctx=ctx)

    _NOT_PLAIN = object()

    def _plain_coercion(descriptor: TypeDescriptor, value: Any, ctx: Any) -> Any:
        """What typer's adapter returns for a text value of a ``str`` parameter (the text itself: its before-
        validator returns ``str(value)``, pydantic's str validation the same) or a valid value of a choice
        (typer's own :func:`coerce_cli_choice`, the adapter's one validator, over Any), computed without the
        adapter, whose first build loads pydantic's model machinery; :data:`_NOT_PLAIN` for anything else,
        including an invalid choice, which the adapter then refuses with its own message."""
        info = descriptor.parameter_info
        if descriptor.file_annotation is not None or info.parser is not None:
            return _NOT_PLAIN
        if descriptor.annotation is str:
            return value if type(value) is str else _NOT_PLAIN
        choices = choice_coercion_annotation(descriptor.annotation, info)
        if choices is None:
            return _NOT_PLAIN
        try:
            return coerce_cli_choice(value, choices=choices[0], case_sensitive=choices[1], ctx=ctx)
        except ValueError:
            return _NOT_PLAIN


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
    of --help's too (an option click makes on first use); its --help drawn for narrow terminals."""

    def __init__(self, *args: Any, **attrs: Any) -> None:
        super().__init__(*args, **attrs)
        defer_coercion(self)

    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)  # type: ignore[misc]
        _defer(option)
        return option

    def format_help(self, ctx: Any, formatter: Any) -> None:
        """typer's help, readable at 80 columns (:mod:`embedcalc.cli.help_width`, loaded only here)."""
        from embedcalc.cli.help_width import readable_help

        with readable_help(getattr(self, "params", ())):
            super().format_help(ctx, formatter)  # type: ignore[misc]


class DeferringCommand(_Deferring, typer.core.TyperCommand):
    """A command of the application (:class:`_Deferring`)."""


class DeferringGroup(_Deferring, typer.core.TyperGroup):
    """The application's root group (:class:`_Deferring`); each invocation first clamps $COLUMNS."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        clamp_columns_env()
        return super().main(*args, **kwargs)


def clamp_columns_env() -> None:
    """$COLUMNS as every console of the process reads it, typer's help and usage panels included (they build their
    own rich consoles, which read the variable): a width above MAX_COLUMNS is MAX_COLUMNS (docs/commands: "taken as
    10,000"; 10^5 made a 5 MB help, 10^20 an OverflowError), and a value str.isdigit() accepts but int() does not
    ("²") is dropped, as if unset."""
    from embedcalc.config.limits import MAX_COLUMNS

    text = os.environ.get("COLUMNS")
    if text is None:
        return
    stripped = text.strip()
    if not (stripped.isascii() and stripped.isdigit()):
        if stripped.isdigit():  # a non-ASCII digit: rich would int() it and fail
            del os.environ["COLUMNS"]
        return
    if len(stripped) > len(str(MAX_COLUMNS)) or int(stripped) > MAX_COLUMNS:
        os.environ["COLUMNS"] = str(MAX_COLUMNS)


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
        return importlib.machinery.ModuleSpec(name, loader, origin="embedcalc.cli.startup (plugins off)")

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
