"""The machinery of option groups, and the option parsers and callbacks the commands share.

The options several commands share are each defined once, grouped as objects: the workload, the parallel layout and
the budget in :mod:`embedcalc.cli.workload_options`, the time options in :mod:`embedcalc.cli.hardware_options`, the
fine-tuning and serving options in :mod:`embedcalc.cli.finetune_options` and :mod:`embedcalc.cli.serving_options`.
A group is a frozen dataclass whose fields carry their ``typer.Option``. A command takes a whole group as one
parameter, or some of its fields::

    @flags
    def analyze_command(target: str, run: WorkloadFlags, layout: ParallelFlags, ...): ...
    def explain_command(target: str, run: Annotated[WorkloadFlags, only("batch_size", "seq_len")], ...): ...

and :func:`flags` spreads each group into its options for typer, and gathers them back into the object before
the command runs.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar, get_args, get_origin, get_type_hints

import typer

from embedcalc.analysis.budget import SizeError, parse_length, parse_size
from embedcalc.config.dtypes import DTYPES, DtypeError, canonical_dtype, dtype_choices
from embedcalc.config.limits import INT_BOUND, MAX_INT_DIGITS

F = TypeVar("F", bound=Callable[..., Any])


def bounded_int(value: int | None) -> int | None:
    """Option callback: refuse an integer of more than ``MAX_INT_DIGITS`` digits (exit 2), the bound every size
    in a config has too, so that no count derived from the flags can outgrow what is computed exactly and fast."""
    if value is not None and abs(value) >= INT_BOUND:
        raise typer.BadParameter(
            f"at most {MAX_INT_DIGITS} digits (10^{MAX_INT_DIGITS} is beyond any workload)"
        )
    return value


def length_parser(low: int, high: int | None = None) -> Callable[[str | int], int]:
    """Option parser: a token length (``4096``, ``8k``, ``128K``) within ``[low, high]``; exit 2 otherwise."""

    def parse(value: str | int) -> int:
        if isinstance(value, int):  # a default, already a number
            return value
        try:
            number = parse_length(value)
        except SizeError as exc:
            raise typer.BadParameter(str(exc)) from None
        bounded_int(number)
        if number < low or (high is not None and number > high):
            upper = f" and at most {high:,}" if high is not None else ""
            given = f"{value} ({number:,} tokens)" if value.strip() != str(number) else value.strip()
            raise typer.BadParameter(f"{given}: must be at least {low:,}{upper}")
        return number

    return parse


def size_parser(kind: str) -> Callable[[str | None], int | None]:
    def parse(value: str | None) -> int | None:
        if value is None:
            return None
        try:
            return parse_size(value, kind)
        except SizeError as exc:
            raise typer.BadParameter(str(exc)) from None

    return parse


ALL_DTYPES = "all"  # analyze --dtype all: every dtype in one table (api/dtypes.py)


def dtype_parser(choices: tuple[str, ...] = DTYPES, every: bool = False) -> Callable[[str], str]:
    """Option parser: a dtype by its short name or an alias (``bfloat16``) -> the short name (with ``every``, also
    ``all``); exit 2 otherwise."""

    def parse(value: str) -> str:
        if every and value.strip().lower() == ALL_DTYPES:
            return ALL_DTYPES
        try:
            return canonical_dtype(value, choices)
        except DtypeError as exc:
            raise typer.BadParameter(str(exc)) from None

    return parse


def dtype_metavar(choices: tuple[str, ...] = DTYPES) -> str:
    return "|".join(choices)


def dtype_option(default_help: str) -> Any:
    """The ``--dtype`` option of the analytic commands: the shared vocabulary, parser and metavar; the caller
    states its default."""
    return typer.Option(
        "--dtype",
        parser=dtype_parser(every=True),
        metavar=dtype_metavar(),
        help=f"{dtype_choices(sep=' | ')}. {default_help}",
    )


@dataclass(frozen=True)
class Only:
    """``Annotated[Group, only(...)]``: the command takes just these fields of the group (the rest keep their
    defaults)."""

    names: tuple[str, ...]


def only(*names: str) -> Only:
    return Only(names)


def cli_field(default: Any, option: Any, convert: Callable[[Any], Any]) -> Any:
    """A group field whose command-line option has another type than the field: typer parses ``option`` (an
    ``Annotated`` type with its ``typer.Option``) and ``convert`` turns what it parsed into the field's value (e.g.
    a repeatable option read into one value, so that a repetition can be refused rather than silently dropped)."""
    return dataclasses.field(default=default, metadata={"cli": option, "from_cli": convert})


def _from_cli(f: dataclasses.Field[Any], value: Any) -> Any:
    return f.metadata["from_cli"](value) if "from_cli" in f.metadata else value


def _group(hint: Any) -> tuple[type | None, tuple[str, ...] | None]:
    """The option group a parameter's annotation names, and the fields it takes (None: all)."""
    names = None
    if get_origin(hint) is Annotated:
        hint, *extras = get_args(hint)
        names = next((e.names for e in extras if isinstance(e, Only)), None)
    if (
        isinstance(hint, type)
        and dataclasses.is_dataclass(hint)
        and hint.__module__.startswith("embedcalc.cli")
    ):
        fields = [f.name for f in dataclasses.fields(hint)]
        unknown = set(names or ()) - set(fields)
        if unknown:
            raise TypeError(f"{hint.__name__} has no option field {sorted(unknown)}")
        return hint, tuple(n for n in fields if names is None or n in names)
    return None, None


def defaulted(*names: str) -> list[str]:
    """Which of the current command's options ``names`` (parameter names: ``seq_len``) nobody gave: left at their
    defaults (click's parameter source), as headers say so; all of them outside a command."""
    try:  # typer >= 0.29 runs its own copy of click
        from typer._click.core import ParameterSource
        from typer._click.globals import get_current_context
    except ImportError:  # pragma: no cover - older typer runs click itself
        from click import get_current_context  # type: ignore[no-redef]
        from click.core import ParameterSource  # type: ignore[assignment]

    ctx = get_current_context(silent=True)
    if ctx is None:
        return list(names)
    return [n for n in names if ctx.get_parameter_source(n) in (None, ParameterSource.DEFAULT)]


def flags(command: F) -> F:
    """Spread every option-group parameter of ``command`` into its fields, for typer; gather them back into the
    group object before ``command`` runs. Parameters that are not groups pass through unchanged."""
    hints = get_type_hints(command, include_extras=True)
    parameters: list[inspect.Parameter] = []
    groups: dict[str, tuple[type, tuple[str, ...]]] = {}
    for p in inspect.signature(command).parameters.values():
        cls, names = _group(hints[p.name])
        if cls is None or names is None:
            # keyword-only, all of them (typer passes keywords): a group's fields may then follow any parameter
            parameters.append(p.replace(kind=inspect.Parameter.KEYWORD_ONLY, annotation=hints[p.name]))
            continue
        groups[p.name] = (cls, names)
        field_hints = get_type_hints(cls, include_extras=True)
        by_name = {f.name: f for f in dataclasses.fields(cls)}
        parameters += [
            inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=by_name[n].default,
                              annotation=by_name[n].metadata.get("cli", field_hints[n]))
            for n in names
        ]  # fmt: skip

    @functools.wraps(command)
    def gathered(**kwargs: Any) -> Any:
        for name, (cls, names) in groups.items():
            by_name = {f.name: f for f in dataclasses.fields(cls)}
            kwargs[name] = cls(**{n: _from_cli(by_name[n], kwargs.pop(n)) for n in names})
        return command(**kwargs)

    gathered.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    gathered.__annotations__ = {p.name: p.annotation for p in parameters}
    return gathered  # type: ignore[return-value]
