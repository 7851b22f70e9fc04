"""The option groups of the workload most commands share: :class:`WorkloadFlags`, its parallel layout
:class:`ParallelFlags` and the :class:`BudgetFlags` its results are held to (the group machinery and the parsers are
:mod:`embedcalc.cli.options`).

A group's defaults and bounds are those of :class:`~embedcalc.analysis.workload.Workload` and
:class:`~embedcalc.analysis.workload.Parallelism` (read from there, never repeated), and its choices are the
analysis' own ``Literal`` types. Every command builds its workload the same way, :meth:`WorkloadFlags.workload`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Annotated, Any

import typer

from embedcalc.analysis.budget import Budget
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
from embedcalc.cli.options import ALL_DTYPES, bounded_int, dtype_option, length_parser, size_parser

_W = Workload()  # the defaults, once
_P = Parallelism()


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
        help="Inference: the LM head computes the logits of the last position of each sequence (what vLLM and "
        "generate compute) or of all positions (scoring a text): its memory and its prefill time.",
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
            "bf16; mxfp4/nvfp4: 4-bit weights with a scale per 32/16 values on FP4 tensor cores (nvfp4 at the FP4 "
            "peak, mxfp4 with FP8 activations at the FP8 peak; a device without FP4 refuses them), inference "
            "only; int8/int4: weight-only with an fp16 scale and zero per "
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
