"""Options shared by several commands, target loading, and the error boundary that maps errors to exit codes."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, ParamSpec, TypeVar

import typer

from embedcalc.analysis.budget import Budget, SizeError, check_budget, parse_size
from embedcalc.analysis.report import Analysis
from embedcalc.analysis.workload import Parallelism, Workload
from embedcalc.cli import output
from embedcalc.config.files import INT_BOUND, MAX_INT_DIGITS
from embedcalc.config.loading import LoadedConfig, load_target
from embedcalc.errors import EmbedcalcError, ExitCode, Problem
from embedcalc.render.units import binary_bytes

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


class OptimizerChoice(StrEnum):
    adamw = "adamw"
    sgd = "sgd"
    adafactor = "adafactor"


class RecomputeChoice(StrEnum):
    none = "none"
    selective = "selective"
    full = "full"


def _size_callback(kind: str) -> Callable[[str | None], int | None]:
    def parse(value: str | None) -> int | None:
        if value is None:
            return None
        try:
            return parse_size(value, kind)
        except SizeError as exc:
            raise typer.BadParameter(str(exc)) from None

    return parse


def bounded_int(value: int | None) -> int | None:
    """Option callback: refuse an integer of more than ``MAX_INT_DIGITS`` digits (exit 2), the bound every size
    in a config has too, so that no count derived from the flags can outgrow what is computed exactly and fast."""
    if value is not None and abs(value) >= INT_BOUND:
        raise typer.BadParameter(
            f"at most {MAX_INT_DIGITS} digits (10^{MAX_INT_DIGITS} is beyond any workload)"
        )
    return value


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
BatchOption = Annotated[
    int, typer.Option("--batch-size", "-b", min=1, callback=bounded_int, help="Sequences per batch.")
]
SeqOption = Annotated[
    int,
    typer.Option("--seq-len", "-n", min=1, callback=bounded_int, help="Tokens per sequence (encoder side)."),
]
TgtOption = Annotated[
    int | None,
    typer.Option(
        "--tgt-len",
        min=1,
        callback=bounded_int,
        help="Decoder tokens of an encoder-decoder (default --seq-len).",
    ),
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


OptimizerOption = Annotated[
    OptimizerChoice, typer.Option("--optimizer", help="Optimizer state for training memory.")
]
RecomputeOption = Annotated[
    RecomputeChoice,
    typer.Option(
        "--recompute",
        help="Activation recomputation (Korthikanti et al. 2022): selective drops the n² attention tensors, "
        "full keeps only each layer's input.",
    ),
]
TpOption = Annotated[
    int, typer.Option("--tp", min=1, callback=bounded_int, help="Tensor-parallel degree (Megatron-LM).")
]
EpOption = Annotated[
    int,
    typer.Option(
        "--ep",
        min=1,
        callback=bounded_int,
        help="Expert-parallel degree: the routed experts of each MoE layer spread over this many of the --dp "
        "ranks (Megatron-core); must divide num_experts and --dp.",
    ),
]
PpOption = Annotated[
    int,
    typer.Option(
        "--pp", min=1, callback=bounded_int, help="Pipeline stages (1F1B); memory is the heaviest stage."
    ),
]
DpOption = Annotated[
    int,
    typer.Option("--dp", min=1, callback=bounded_int, help="Data-parallel replicas (ZeRO shards over them)."),
]
ZeroOption = Annotated[
    int, typer.Option("--zero", min=0, max=3, help="ZeRO stage: 1 optimizer, 2 + gradients, 3 + weights.")
]
GenTokensOption = Annotated[
    int,
    typer.Option(
        "--gen-tokens",
        min=0,
        callback=bounded_int,
        help="Inference: tokens generated after the prompt (KV cache).",
    ),
]


def _budget_option(flag: str, kind: str, help: str) -> Any:
    return typer.Option(flag, parser=_size_callback(kind), metavar="SIZE", help=help)


MaxParamsOption = Annotated[
    int | None,
    _budget_option("--max-params", "count", "Exit 5 if the parameter count exceeds SIZE (400M, 1.3B, 2e9)."),
]
MaxMemoryOption = Annotated[
    int | None,
    _budget_option(
        "--max-memory", "bytes", "Exit 5 if per-device memory exceeds SIZE (16GiB, 16GB, 8e9 bytes)."
    ),
]
MaxFlopsOption = Annotated[
    int | None,
    _budget_option(
        "--max-flops",
        "count",
        "Exit 5 if FLOPs (forward; training step with --mode training) exceed SIZE (2e12, 5T).",
    ),
]


def make_workload(
    batch_size: int,
    seq_len: int,
    tgt_len: int | None,
    dtype: DtypeChoice,
    mode: ModeChoice,
    attention: AttentionChoice,
    optimizer: OptimizerChoice = OptimizerChoice.adamw,
    recompute: RecomputeChoice = RecomputeChoice.none,
    parallel: Parallelism | None = None,
    gen_tokens: int = 0,
) -> Workload:
    # Workload refuses a weight-only dtype in training itself (exit 3, one message for every command)
    return Workload(
        batch_size=batch_size,
        seq_len=seq_len,
        tgt_len=tgt_len,
        dtype=dtype.value,
        mode=mode.value,
        attention=attention.value,
        recompute=recompute.value,
        optimizer=optimizer.value,
        gen_tokens=gen_tokens,
        parallel=parallel or Parallelism(),
    )


def budget_problems(budget: Budget, analyses: list[Analysis]) -> list[Problem]:
    """One problem per exceeded limit, naming the flag, the limit, the value and the excess."""
    problems = []
    for a in analyses:
        flops = a.flops.training_step if a.workload.mode == "training" else a.flops.forward
        for v in check_budget(budget, a.params.total, a.memory.total_bytes, flops):
            fmt = binary_bytes if v.flag == "--max-memory" else (lambda x: f"{x:,}")
            text = (
                f"{a.target}: {v.flag} {fmt(v.limit)} exceeded: {fmt(v.value)} is {fmt(v.excess)} "
                f"({v.excess_fraction:.1%}) over"
            )
            problems.append(Problem(f"{a.target}: {v.flag}", text, "over_budget"))
    return problems


def enforce_budget(problems: list[Problem], json_emitted: bool) -> None:
    """Exit 5 after the results were printed, if any limit was exceeded."""
    if problems:
        message = "over budget\n  " + "\n  ".join(p.message for p in problems)
        raise EmbedcalcError(
            message, ExitCode.OVER_BUDGET, problems, "over_budget", json_emitted=json_emitted
        )


def check_plot_file(path: Path) -> None:
    """``--plot FILE`` of any command: the suffix must name a format the plots are written in (png, svg, pdf);
    otherwise a usage error (exit 2) before any work is done."""
    from embedcalc.render.plot import plot_format

    try:
        plot_format(path)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="'--plot'") from None


def load(target: str, overrides: list[str] | None) -> LoadedConfig:
    return load_target(target, overrides or [])


def os_error_message(exc: OSError) -> str:
    """What an I/O error that reached the error edge was about. Input files never get here (they are read by
    :func:`embedcalc.config.files.read_bytes_bounded`, which reports them as invalid input, exit 3): an error that
    names a file is about that file (an output such as --plot), one that names none is about stdout/stderr."""
    reason = exc.strerror or str(exc) or type(exc).__name__
    if exc.filename is not None:
        return f"{exc.filename}: {reason}"
    return f"cannot write output: {reason}"


def handle_errors(command: str, json_flag: str = "format") -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Turn :class:`EmbedcalcError` into ``embedcalc: error: ...`` plus its exit code (and a JSON error envelope
    on stdout when ``--format json``); Ctrl-C into exit 130. ``--debug`` re-raises for the traceback."""

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            try:
                return fn(*args, **kwargs)
            except EmbedcalcError as exc:
                if debugging():
                    raise
                if exc.reported:
                    raise typer.Exit(int(exc.exit_code)) from None
                output.report_error(exc)
                fmt: Any = kwargs.get(json_flag)
                if not exc.json_emitted and fmt is not None and getattr(fmt, "value", fmt) == "json":
                    problems = exc.problems or [Problem("", exc.message, exc.code)]
                    output.emit_json(command, [], problems=problems, status="error")
                raise typer.Exit(int(exc.exit_code)) from None
            except BrokenPipeError:  # `embedcalc ... | head`: the reader left; nothing more to say
                sys.stderr.close()
                raise typer.Exit(int(ExitCode.RUNTIME)) from None
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


__all__ = ["EmbedcalcError", "handle_errors", "load", "make_workload"]


# Hub ids as targets (config/hub.py): given once, before the command, they apply to every hub id it reads.
RevisionOption = Annotated[
    str | None,
    typer.Option("--revision", help="Revision (branch, tag or commit) of hub-id targets (ORG/NAME); default main."),
]
OnlineOption = Annotated[
    bool,
    typer.Option(
        "--online",
        envvar="EMBEDCALC_ONLINE",
        help="Fetch a hub id's config.json with huggingface_hub when it is not in the local cache (the hub extra).",
    ),
]
