"""The options several commands share, each defined once, grouped as objects: the workload, the parallel layout,
the budget (and, in :mod:`embedcalc.cli.hardware_options`, the time options).

A group is a frozen dataclass whose fields carry their ``typer.Option``; its defaults and bounds are those of
:class:`~embedcalc.analysis.workload.Workload` and :class:`~embedcalc.analysis.workload.Parallelism` (read from
there, never repeated), and its choices are the analysis' own ``Literal`` types. A command takes a whole group
as one parameter, or some of its fields::

    @flags
    def analyze_command(target: str, run: WorkloadFlags, layout: ParallelFlags, ...): ...
    def explain_command(target: str, run: Annotated[WorkloadFlags, only("batch_size", "seq_len")], ...): ...

and :func:`flags` spreads each group into its options for typer, and gathers them back into the object before
the command runs. Every command then builds its workload the same way, :meth:`WorkloadFlags.workload`.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar, get_args, get_origin, get_type_hints

import typer

from embedcalc.analysis.budget import Budget, SizeError, parse_length, parse_size
from embedcalc.analysis.workload import (
    AttentionImpl,
    Logits,
    Mode,
    Optimizer,
    Parallelism,
    Recompute,
    Workload,
    field_bounds,
)  # fmt: skip
from embedcalc.config.dtypes import DTYPES, DtypeError, canonical_dtype, dtype_choices
from embedcalc.config.limits import INT_BOUND, MAX_INT_DIGITS

F = TypeVar("F", bound=Callable[..., Any])

_W = Workload()  # the defaults, once
_P = Parallelism()


def bounded_int(value: int | None) -> int | None:
    """Option callback: refuse an integer of more than ``MAX_INT_DIGITS`` digits (exit 2), the bound every size
    in a config has too, so that no count derived from the flags can outgrow what is computed exactly and fast."""
    if value is not None and abs(value) >= INT_BOUND:
        raise typer.BadParameter(
            f"at most {MAX_INT_DIGITS} digits (10^{MAX_INT_DIGITS} is beyond any workload)"
        )
    return value


def _int_option(cls: type, name: str, *flags: str, help: str) -> Any:
    """An integer option with the bounds of field ``name`` of ``cls``."""
    low, high = field_bounds(cls, name)
    return typer.Option(*flags, min=low, max=high, callback=bounded_int, help=help)


def _length_option(cls: type, name: str, *flags: str, help: str) -> Any:
    """A token-length option with the bounds of field ``name`` of ``cls``, taking vLLM's suffixes (``8k`` =
    8,000, ``8K`` = 8,192; :func:`embedcalc.analysis.budget.parse_length`)."""
    low, high = field_bounds(cls, name)
    return typer.Option(*flags, parser=length_parser(low, high), metavar="TOKENS",
                        help=f"{help} Suffixes as vLLM reads them: 8k = 8,000, 8K = 8,192.")  # fmt: skip


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


def _budget_option(flag: str, kind: str, help: str) -> Any:
    return typer.Option(flag, parser=size_parser(kind), metavar="SIZE", help=help)


BatchOption = Annotated[
    int, _int_option(Workload, "batch_size", "--batch-size", "-b", help="Sequences per batch.")
]
SeqOption = Annotated[
    int, _length_option(Workload, "seq_len", "--seq-len", "-n", help="Tokens per sequence (encoder side).")
]
TgtOption = Annotated[
    int | None,
    _length_option(
        Workload, "tgt_len", "--tgt-len", help="Decoder tokens of an encoder-decoder (default --seq-len)."
    ),
]
GenTokensOption = Annotated[
    int,
    _length_option(
        Workload,
        "gen_tokens",
        "--gen-tokens",
        help="Inference: tokens generated after the prompt (KV cache).",
    ),
]
AttentionOption = Annotated[
    AttentionImpl,
    typer.Option(
        "--attention", help="Memory model of attention: eager keeps batch×heads×n² scores, sdpa does not."
    ),
]
RecomputeOption = Annotated[
    Recompute,
    typer.Option(
        "--recompute",
        help="Activation recomputation (Korthikanti et al. 2022): selective drops the n² attention tensors, "
        "full keeps only each layer's input.",
    ),
]

LogitsOption = Annotated[
    Logits,
    typer.Option(
        "--logits",
        help="Inference memory: LM-head logits of the last position of each sequence (what vLLM and generate "
        "compute) or of all positions (scoring a text).",
    ),
]


@dataclass(frozen=True)
class WorkloadFlags:
    """--batch-size, --seq-len, --tgt-len, --dtype, --quant-group-size, --mode, --attention, --optimizer,
    --recompute, --gen-tokens, --logits."""

    batch_size: BatchOption = _W.batch_size
    seq_len: SeqOption = _W.seq_len
    tgt_len: TgtOption = _W.tgt_len
    dtype: Annotated[
        str | None,
        dtype_option(
            "Default: the model's own (a preset's published dtype, a config's dtype, torch_dtype or "
            "quantization_config), else fp32. fp8: linear-layer GEMMs at the FP8 peak, weights 1 byte, the rest "
            "bf16; mxfp4/nvfp4: 4-bit weights with a scale per 32/16 values at the FP4 peak (a device without "
            "FP4 refuses them), inference only; int8/int4: weight-only with an fp16 scale and zero per "
            "--quant-group-size inputs, inference only. analyze --dtype all: every dtype in one table (weights, "
            "largest layer, inference and training memory)."
        ),
    ] = None
    quant_group_size: Annotated[
        int,
        _int_option(
            Workload, "quant_group_size", "--quant-group-size",
            help="int8/int4: input values per fp16 scale and zero point (GPTQ/AWQ group size).",
        ),
    ] = _W.quant_group_size  # fmt: skip
    mode: Annotated[Mode, typer.Option("--mode", help="inference: one forward; training: fwd+bwd+AdamW.")] = (
        _W.mode
    )
    attention: AttentionOption = _W.attention
    optimizer: Annotated[
        Optimizer, typer.Option("--optimizer", help="Optimizer state for training memory.")
    ] = _W.optimizer
    recompute: RecomputeOption = _W.recompute
    gen_tokens: GenTokensOption = _W.gen_tokens
    logits: LogitsOption = _W.logits

    def workload(self, layout: ParallelFlags | None = None, **fixed: Any) -> Workload:
        """The workload these flags describe, on ``layout`` (one device without), with ``fixed`` fields set by the
        command itself (e.g. bench's dtype). Without --dtype the dtype is left to the model (``dtype_source``
        default); with it, it is the flag's. Workload refuses what no command can run (int8 training: exit 3)."""
        values = dataclasses.asdict(self)
        if values["dtype"] == ALL_DTYPES:
            from embedcalc.api.workload import usage

            raise usage(
                "--dtype all: only `analyze` shows every dtype in one table; give one dtype here", "--dtype"
            )
        if values["dtype"] is None:
            del values["dtype"]
        else:
            values["dtype_source"] = "flag"
        values |= fixed
        return Workload(**values, parallel=layout.parallelism() if layout is not None else Parallelism())


@dataclass(frozen=True)
class ParallelFlags:
    """--tp, --ep, --pp, --pp-virtual, --dp, --cp, --zero (Megatron-LM / ZeRO conventions; see Parallelism)."""

    tp: Annotated[
        int, _int_option(Parallelism, "tp", "--tp", help="Tensor-parallel degree (Megatron-LM).")
    ] = _P.tp
    ep: Annotated[
        int,
        _int_option(
            Parallelism, "ep", "--ep",
            help="Expert-parallel degree: the routed experts of each MoE layer spread over this many of the --dp "
            "ranks (Megatron-core); must divide num_experts and --dp.",
        ),
    ] = _P.ep  # fmt: skip
    pp: Annotated[
        int,
        _int_option(Parallelism, "pp", "--pp", help="Pipeline stages (1F1B); memory is the heaviest stage."),
    ] = _P.pp
    pp_virtual: Annotated[
        int,
        _int_option(
            Parallelism, "pp_virtual", "--pp-virtual",
            help="Training: model chunks per pipeline rank (Megatron-LM's interleaved 1F1B): the bubble is "
            "(pp - 1) / (v · micro-batches), at v times the stage-boundary sends; needs --pp > 1, blocks divisible "
            "by pp · v, micro-batches a multiple of pp.",
        ),
    ] = _P.pp_virtual  # fmt: skip
    dp: Annotated[
        int,
        _int_option(Parallelism, "dp", "--dp", help="Data-parallel replicas (ZeRO shards over them)."),
    ] = _P.dp
    cp: Annotated[
        int,
        _int_option(
            Parallelism, "cp", "--cp",
            help="Training: context-parallel degree (Megatron-core): each sequence split over this many ranks, "
            "keys and values passed round a ring; --seq-len a multiple of 2·cp, a decoder of full causal attention.",
        ),
    ] = _P.cp  # fmt: skip
    zero: Annotated[
        int,
        _int_option(
            Parallelism, "zero", "--zero", help="ZeRO stage: 1 optimizer, 2 + gradients, 3 + weights."
        ),
    ] = _P.zero

    def parallelism(self) -> Parallelism:
        return Parallelism(**dataclasses.asdict(self))


@dataclass(frozen=True)
class BudgetFlags:
    """--max-params, --max-memory, --max-flops: exit 5 when a result exceeds one."""

    max_params: Annotated[
        int | None,
        _budget_option(
            "--max-params", "count", "Exit 5 if the parameter count exceeds SIZE (400M, 1.3B, 2e9)."
        ),
    ] = None
    max_memory: Annotated[
        int | None,
        _budget_option(
            "--max-memory", "bytes", "Exit 5 if per-device memory exceeds SIZE (16GiB, 16GB, 8e9 bytes)."
        ),
    ] = None
    max_flops: Annotated[
        int | None,
        _budget_option(
            "--max-flops",
            "count",
            "Exit 5 if FLOPs (forward; training step with --mode training) exceed SIZE (2e12, 5T).",
        ),
    ] = None

    def budget(self) -> Budget:
        return Budget(self.max_params, self.max_memory, self.max_flops)


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
