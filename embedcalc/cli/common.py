"""Options shared by several commands, target loading, and the error boundary that maps errors to exit codes."""

from __future__ import annotations

import functools
from collections.abc import Callable
from enum import StrEnum
from typing import Annotated, Any, ParamSpec, TypeVar

import typer

from embedcalc.analysis.workload import Workload
from embedcalc.cli import output
from embedcalc.config.loading import LoadedConfig, load_target
from embedcalc.errors import ConfigError, EmbedcalcError, ExitCode, Problem

P = ParamSpec("P")
R = TypeVar("R")

DEBUG = {"enabled": False}


class OutputFormat(StrEnum):
    table = "table"
    json = "json"


class CompareFormat(StrEnum):
    table = "table"
    json = "json"
    csv = "csv"
    markdown = "markdown"


class DtypeChoice(StrEnum):
    float32 = "float32"
    bfloat16 = "bfloat16"
    float16 = "float16"
    int8 = "int8"
    int4 = "int4"


class ModeChoice(StrEnum):
    inference = "inference"
    training = "training"


class AttentionChoice(StrEnum):
    sdpa = "sdpa"
    eager = "eager"


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
BatchOption = Annotated[int, typer.Option("--batch-size", "-b", min=1, help="Sequences per batch.")]
SeqOption = Annotated[int, typer.Option("--seq-len", "-n", min=1, help="Tokens per sequence (encoder side).")]
TgtOption = Annotated[
    int | None,
    typer.Option("--tgt-len", min=1, help="Decoder tokens of an encoder-decoder (default --seq-len)."),
]
DtypeOption = Annotated[
    DtypeChoice,
    typer.Option(
        "--dtype",
        help="Weights/activations dtype; int8/int4 are weight-only (activations float16), inference only.",
    ),
]
ModeOption = Annotated[
    ModeChoice, typer.Option("--mode", help="inference: one forward; training: fwd+bwd+AdamW.")
]
AttentionOption = Annotated[
    AttentionChoice,
    typer.Option(
        "--attention", help="Memory model of attention: eager keeps batch×heads×n² scores, sdpa does not."
    ),
]


def make_workload(
    batch_size: int,
    seq_len: int,
    tgt_len: int | None,
    dtype: DtypeChoice,
    mode: ModeChoice,
    attention: AttentionChoice,
) -> Workload:
    if mode is ModeChoice.training and dtype.value in ("int8", "int4"):
        raise typer.BadParameter(
            f"{dtype.value} is a weight-only inference format; train in float32, bfloat16 or float16",
            param_hint="'--dtype'",
        )
    return Workload(
        batch_size=batch_size,
        seq_len=seq_len,
        tgt_len=tgt_len,
        dtype=dtype.value,
        mode=mode.value,
        attention=attention.value,
    )


def load(target: str, overrides: list[str] | None) -> LoadedConfig:
    return load_target(target, overrides or [])


def fail(problems: list[Problem], message: str) -> ConfigError:
    return ConfigError(message, problems)


def handle_errors(command: str, json_flag: str = "format") -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Turn :class:`EmbedcalcError` into ``embedcalc: error: ...`` plus its exit code (and a JSON error envelope
    on stdout when ``--format json``); Ctrl-C into exit 130. ``--debug`` re-raises for the traceback."""

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            try:
                return fn(*args, **kwargs)
            except EmbedcalcError as exc:
                if DEBUG["enabled"]:
                    raise
                output.report_error(exc)
                fmt: Any = kwargs.get(json_flag)
                if fmt is not None and getattr(fmt, "value", fmt) == "json":
                    problems = exc.problems or [Problem("", exc.message, exc.code)]
                    output.emit_json(command, [], problems=problems, status="error")
                raise typer.Exit(int(exc.exit_code)) from None
            except KeyboardInterrupt:
                if DEBUG["enabled"]:
                    raise
                output.stderr.print("embedcalc: interrupted")
                raise typer.Exit(int(ExitCode.INTERRUPTED)) from None

        return wrapper

    return decorate


__all__ = ["EmbedcalcError", "handle_errors", "load", "make_workload"]
