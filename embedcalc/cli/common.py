"""The output-format and --set options, the budget's exit, and the error boundary that maps errors to exit codes
(the workload, parallel and budget options are option groups in :mod:`embedcalc.cli.workload_options`)."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, ParamSpec, TypeVar

import typer

from embedcalc.cli import output
from embedcalc.errors import EmbedcalcError, ExitCode, Problem

P = ParamSpec("P")
R = TypeVar("R")

DEBUG_ENV = "EMBEDCALC_DEBUG"  # --debug sets it; EMBEDCALC_DEBUG=1 in the environment does the same


def debugging() -> bool:
    """Whether tracebacks were asked for (``--debug`` or ``EMBEDCALC_DEBUG=1``)."""
    return os.environ.get(DEBUG_ENV, "") not in ("", "0")


class OutputFormat(StrEnum):
    table = "table"
    json = "json"


class CompareFormat(StrEnum):
    table = "table"
    json = "json"
    csv = "csv"
    markdown = "markdown"


SetOption = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        "-s",
        metavar="KEY=VALUE",
        help="Override a config field, e.g. --set num_heads=16 (repeatable; aliases such as n_head work).",
    ),
]
FormatOption = Annotated[OutputFormat, typer.Option("--format", "-f", help="Output format.")]


def enforce_budget(problems: list[Problem], json_emitted: bool) -> None:
    """Exit 5 after the results were printed, if any limit was exceeded."""
    if problems:
        message = "over budget\n  " + "\n  ".join(p.message for p in problems)
        raise EmbedcalcError(
            message, ExitCode.OVER_BUDGET, problems, "over_budget", json_emitted=json_emitted
        )


def plot_option(help: str) -> Any:
    """``--plot FILE`` (a file, checked by :func:`check_plot_file` before any work)."""
    return typer.Option("--plot", metavar="FILE", dir_okay=False, help=help)


def check_plot_file(path: Path) -> None:
    """``--plot FILE`` of any command: the suffix must name a format the plots are written in (png, svg, pdf);
    otherwise a usage error (exit 2) before any work is done."""
    from embedcalc.render.plot import plot_format

    try:
        plot_format(path)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="'--plot'") from None


def os_error_message(exc: OSError) -> str:
    """What an I/O error that reached the error edge was about. Input files never get here (they are read by
    :func:`embedcalc.sources.reading.read_bytes_bounded`, which reports them as invalid input, exit 3): an error that
    names a file is about that file (an output such as --plot), one that names none is about stdout/stderr."""
    reason = exc.strerror or str(exc) or type(exc).__name__
    if exc.filename is not None:
        return f"{exc.filename}: {reason}"
    return f"cannot write output: {reason}"


def silence_stdout() -> None:
    """After a broken pipe: point stdout at /dev/null, so that nothing more (the interpreter's final flush
    included) fails writing to the reader that left."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    # no descriptor (an in-process runner's buffer): nothing to do
    except (
        OSError,
        ValueError,
        AttributeError,
    ):
        pass


def handle_errors(command: str, json_flag: str = "format") -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Turn :class:`EmbedcalcError` into ``embedcalc: error: ...`` plus its exit code (and a JSON error envelope
    on stdout when ``--format json``); Ctrl-C into exit 130. ``--debug`` re-raises for the traceback."""

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            try:
                result = fn(*args, **kwargs)
                sys.stdout.flush()  # the output is complete (or the pipe found broken) before the command returns
                return result
            except EmbedcalcError as exc:
                if debugging():
                    raise
                if exc.reported:
                    raise typer.Exit(int(exc.exit_code)) from None
                _name_the_flag(exc, fn)
                output.report_error(exc)
                fmt: Any = kwargs.get(json_flag)
                if not exc.json_emitted and fmt is not None and getattr(fmt, "value", fmt) == "json":
                    problems = exc.problems or [Problem("", exc.message, exc.code)]
                    output.emit_json(command, [], problems=problems, status="error")
                raise typer.Exit(int(exc.exit_code)) from None
            except BrokenPipeError:  # `embedcalc ... | head`: the reader left; not a failure (cli.app.main)
                silence_stdout()
                raise typer.Exit(int(ExitCode.OK)) from None
            except OSError as exc:
                if debugging():
                    raise
                output.report_error(EmbedcalcError(os_error_message(exc)))
                raise typer.Exit(int(ExitCode.RUNTIME)) from None
            except KeyboardInterrupt:
                if debugging():
                    raise
                output.stderr.print("embedcalc: interrupted")
                raise typer.Exit(int(ExitCode.INTERRUPTED)) from None

        return wrapper

    return decorate


def _name_the_flag(exc: EmbedcalcError, command: Callable[..., Any]) -> None:
    """A bad argument the Python API names by its parameter (``deadline_s 5e-324 must be ...``,
    ``price_per_hour[l4] 1e+308 is not ...``) is named, on the command line, by the flag that fed it
    (``--deadline``, ``--price-per-hour``): the option of ``command`` whose parameter has that name. Only a
    message that starts with the name is changed; the problem's path (in JSON) keeps the API's name."""
    if exc.exit_code != ExitCode.USAGE or not exc.problems:
        return
    flags = _long_flags(command)

    def named(message: str, path: str) -> str:
        name = path.split("[", 1)[0]
        flag = flags.get(name)
        rest = message[len(name) :]
        if flag is None or not message.startswith(name) or rest[:1].isalnum() or rest[:1] == "_":
            return message
        return flag + rest

    exc.message = named(exc.message, exc.problems[0].path)
    exc.problems = [Problem(p.path, named(p.message, p.path), p.code) for p in exc.problems]


def _long_flags(command: Callable[..., Any]) -> dict[str, str]:
    """Parameter name -> its long flag, from the ``typer.Option`` declarations of ``command``'s annotations."""
    import typing

    from typer.models import OptionInfo

    try:
        hints = typing.get_type_hints(command, include_extras=True)
    except (NameError, TypeError):  # an annotation that does not resolve: no flag is named, the message stays
        return {}
    flags = {}
    for name, hint in hints.items():
        for info in getattr(hint, "__metadata__", ()):
            if isinstance(info, OptionInfo):  # under Annotated, typer takes a first "--name" as a declaration
                declared = (info.default, *(info.param_decls or ()))
                long = [d for d in declared if isinstance(d, str) and d.startswith("--")]
                if long:
                    flags[name] = max(long, key=len)
    return flags


__all__ = ["EmbedcalcError", "handle_errors"]


# Hub ids as targets (sources/hub.py): given once, before the command, they apply to every hub id it reads.
RevisionOption = Annotated[
    str | None,
    typer.Option(
        "--revision", help="Revision (branch, tag or commit) of hub-id targets (ORG/NAME); default main."
    ),
]
OnlineOption = Annotated[
    bool,
    typer.Option(
        "--online",
        envvar="EMBEDCALC_ONLINE",
        help="Fetch a hub id's config.json with huggingface_hub when it is not in the local cache (the hub extra).",
    ),
]
