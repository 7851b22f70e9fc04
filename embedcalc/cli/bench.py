"""``embedcalc bench TARGET``: build the model on a real device, time it, reconcile with the prediction.

One command, five runs, each one API call (:mod:`embedcalc.api.bench` and its siblings): the matmul peak
(``--peak``), generation (``--mode generate``), torchrun ranks (``--nproc``), the memory matrix
(``--memory-matrix``) and the plain timed forward or training step. torch is imported only by the API, inside the
command; a run predicted not to fit in free memory exits 4 with a batch size and a seq-len that would.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import typer

from embedcalc.cli import output
from embedcalc.cli.common import FormatOption, OutputFormat, SetOption, handle_errors
from embedcalc.cli.finetune_options import FinetuneFlags
from embedcalc.cli.options import flags, only
from embedcalc.cli.workload_options import WorkloadFlags
from embedcalc.config.dtypes import BENCH_DTYPES, DTYPES, DtypeError, canonical_dtype, dtype_choices
from embedcalc.config.limits import DEFAULT_RDZV_TIMEOUT_S
from embedcalc.errors import Problem

if TYPE_CHECKING:
    from embedcalc.analysis.workload import Workload
    from embedcalc.api.bench import RunOptions
    from embedcalc.api.distributed import Nodes
    from embedcalc.api.finetune import FinetuneOptions


class DeviceChoice(StrEnum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


class StrategyChoice(StrEnum):
    ddp = "ddp"
    fsdp = "fsdp"
    tp = "tp"


class BenchModeChoice(StrEnum):
    """bench's --mode: analyze's two plus ``generate`` (prefill + decode with a KV cache)."""

    inference = "inference"
    training = "training"
    generate = "generate"


def _bench_dtype(value: str) -> str:
    """--dtype of bench: fp32, bf16 or fp16 (or their long names); fp8 and the weight-only formats need kernels the
    torch model does not use, so they are predicted by analyze, not measured (exit 2 with the fix)."""
    try:
        return canonical_dtype(value, BENCH_DTYPES)
    except DtypeError:
        try:
            name = canonical_dtype(value)
        except DtypeError:
            name = value
        fix = f"use {dtype_choices(BENCH_DTYPES)}"
        if name in DTYPES:
            fix = (f"predict {name} with `embedcalc analyze TARGET --dtype {name} --hardware NAME`, and bench "
                   "with --dtype fp32 (the CPU) or bf16")  # fmt: skip
        raise typer.BadParameter(
            f"{value!r}: bench measures the torch model in {', '.join(BENCH_DTYPES)}, which has no {name} "
            f"kernels; {fix}"
        ) from None


BenchModeOption = Annotated[
    BenchModeChoice,
    typer.Option(
        "--mode",
        help="inference: one forward; training: fwd+bwd+AdamW; generate: prefill --seq-len, then decode "
        "--gen-tokens tokens greedily with a static KV cache.",
    ),
]
DeviceOption = Annotated[DeviceChoice, typer.Option("--device", help="Where to run.")]
BenchDtypeOption = Annotated[
    str,
    typer.Option(
        "--dtype", parser=_bench_dtype, metavar="|".join(BENCH_DTYPES),
        help="Compute dtype (training: mixed precision); fp32 unless given, on the CPU as on a GPU.",
    ),
]  # fmt: skip
BenchRunFlags = Annotated[
    WorkloadFlags, only("batch_size", "seq_len", "tgt_len", "attention", "recompute", "gen_tokens")
]
MatrixOption = Annotated[
    bool,
    typer.Option(
        "--memory-matrix",
        help="Training: measure one step's peak memory for every --attention × --recompute setting, each in "
        "a fresh process, beside the prediction.",
    ),
]
PeakOption = Annotated[
    bool,
    typer.Option(
        "--peak",
        help="Only measure the device (matmul peak, memory bandwidth, per-kernel overhead; with --nproc N the "
        "all-reduce between N processes) and cache it as --hardware local.",
    ),
]
ForceOption = Annotated[bool, typer.Option("--force", help="Run even if predicted memory exceeds free.")]
TargetArgument = Annotated[str | None, typer.Argument(help="Preset name or config file (omit with --peak).")]


@dataclass(frozen=True)
class StepFlags:
    """--warmup, --repeat, --compile, --threads: how the steps run."""

    warmup: Annotated[int, typer.Option("--warmup", min=0, help="Untimed steps first.")] = 3
    repeat: Annotated[int, typer.Option("--repeat", min=1, help="Timed steps.")] = 10
    compile: Annotated[bool, typer.Option("--compile", help="Run through torch.compile.")] = False
    threads: Annotated[int | None, typer.Option("--threads", min=1, help="torch CPU threads.")] = None

    def options(self, device: DeviceChoice, force: bool) -> RunOptions:
        from embedcalc.api.bench import RunOptions

        return RunOptions(device.value, self.warmup, self.repeat, self.compile, self.threads, force,
                          output.progress, _note)  # fmt: skip


@dataclass(frozen=True)
class RankFlags:
    """--nproc, --strategy, --baseline, and the nodes (--nnodes, --node-rank, --rdzv-endpoint, --rdzv-timeout):
    the run under torchrun."""

    nproc: Annotated[
        int | None,
        typer.Option(
            "--nproc", min=1, help="Run on this many processes under torchrun (gloo on CPU, NCCL on CUDA)."
        ),
    ] = None
    strategy: Annotated[
        StrategyChoice,
        typer.Option("--strategy", help="With --nproc: DDP, FSDP2 (ZeRO-3) or tensor parallel."),
    ] = StrategyChoice.ddp
    baseline: Annotated[
        bool,
        typer.Option(
            "--baseline/--no-baseline", help="With --nproc: also run one process for scaling efficiency."
        ),
    ] = True
    nnodes: Annotated[
        int,
        typer.Option("--nnodes", min=1, max=1024, help="With --nproc: nodes in the run (torchrun's c10d "
                     "rendezvous); run the same command on each, --nproc ranks per node."),
    ] = 1  # fmt: skip
    node_rank: Annotated[
        int,
        typer.Option("--node-rank", min=0, max=1023, help="This node's rank, 0 to --nnodes - 1, one per node; "
                     "node 0 hosts the rendezvous and prints the report of every rank."),
    ] = 0  # fmt: skip
    rdzv_endpoint: Annotated[
        str | None,
        typer.Option("--rdzv-endpoint", metavar="HOST:PORT", help="Node 0's address for the rendezvous, the same "
                     "on every node (port default 29400); needed with --nnodes > 1."),
    ] = None  # fmt: skip
    rdzv_timeout: Annotated[
        int,
        typer.Option("--rdzv-timeout", min=1, max=86400, help="Seconds a node waits for all --nnodes to join "
                     "(and for node 0's store) before it gives up, exit 4."),
    ] = DEFAULT_RDZV_TIMEOUT_S  # fmt: skip

    def nodes(self) -> Nodes | None:
        """The nodes of the run (None: one node on its own); exit 2 for node flags without --nproc."""
        from embedcalc.api.distributed import Nodes

        given = [f for f, on in (("--nnodes", self.nnodes != 1), ("--node-rank", self.node_rank != 0),
                                 ("--rdzv-endpoint", self.rdzv_endpoint is not None)) if on]  # fmt: skip
        if self.nproc is None:
            if given:
                verb = "goes" if len(given) == 1 else "go"
                raise typer.BadParameter(
                    f"{' and '.join(given)} {verb} only with --nproc N", param_hint=given[0]
                )
            return None
        return Nodes(self.nnodes, self.node_rank, self.rdzv_endpoint, self.rdzv_timeout)


def _note(line: str) -> None:
    output.stderr.print(f"embedcalc: {line}")


@handle_errors("bench")
@flags
def bench_command(
    target: TargetArgument = None,
    device: DeviceOption = DeviceChoice.auto,
    dtype: BenchDtypeOption = "fp32",
    *,
    run: BenchRunFlags,
    mode: BenchModeOption = BenchModeChoice.inference,
    steps: StepFlags,
    memory_matrix: MatrixOption = False,
    peak: PeakOption = False,
    ranks: RankFlags,
    tune: FinetuneFlags,
    force: ForceOption = False,
    overrides: SetOption = None,
    format: FormatOption = OutputFormat.table,
) -> None:
    """Time real forward passes (or training steps) and reconcile them with the analytic prediction.

    Reports median/p10/p90 latency, tokens/s, sequences/s, achieved FLOP/s (analytic FLOPs / median time),
    utilisation against the device's measured matmul peak (and the datasheet peak for known GPUs), and peak
    memory measured beside predicted.
    """
    from embedcalc.api.torch_env import require_torch

    nodes = ranks.nodes()
    require_torch()
    options = steps.options(device, force)
    _check_target(target, peak)
    # inference or training: one forward or step of --seq-len tokens (--gen-tokens is generate's)
    generate = mode is BenchModeChoice.generate
    workload = run.workload(dtype=dtype, mode="inference" if generate else mode.value,
                            gen_tokens=run.gen_tokens if generate else 0)  # fmt: skip
    result = _measure(
        target,
        overrides,
        workload,
        generate,
        memory_matrix,
        peak,
        ranks,
        nodes,
        dtype,
        options,
        tune.options(),
    )
    _render(result, format, workload)


def _check_target(target: str | None, peak: bool) -> None:
    """A TARGET with --peak is ignored (warned); none without it is a usage error."""
    if peak and target is not None:
        output.warn(
            [Problem("--peak", f"--peak measures the device only; {target} is ignored", "target_ignored")]
        )
    if not peak and target is None:
        raise typer.BadParameter("TARGET is required unless --peak is given", param_hint="'TARGET'")


def _measure(
    target: str | None, overrides: list[str] | None, workload: Workload, generate: bool, memory_matrix: bool,
    peak: bool, ranks: RankFlags, nodes: Nodes | None, dtype: str, options: RunOptions,
    finetune: FinetuneOptions | None = None,
) -> Any:  # fmt: skip
    """The one API call the flags ask for."""
    if peak or target is None:
        from embedcalc.api.bench import measure_peak

        return measure_peak(dtype, options, ranks.nproc)
    if generate:
        from embedcalc.api.generate import bench_generation

        return bench_generation(target, overrides, workload, options)
    if ranks.nproc is not None:
        from embedcalc.api.distributed import bench_ranks

        return bench_ranks(target, overrides, workload, ranks.nproc, ranks.strategy.value, ranks.baseline, options,
                           nodes)  # fmt: skip
    if memory_matrix:
        from embedcalc.api.memory_matrix import bench_memory_matrix

        return bench_memory_matrix(target, overrides, workload, options)
    from embedcalc.api.bench import bench_target

    return bench_target(target, overrides, workload, options, finetune)


def _render(result: Any, format: OutputFormat, workload: Workload) -> None:
    """Warnings, then the JSON envelope or the tables of whichever result the run returned."""
    analysis = getattr(result, "analysis", None)
    if analysis is not None:
        output.warn(analysis.warnings, analysis.target)
    if format is OutputFormat.json:
        output.emit_json(
            "bench", [result.to_json()], analysis.workload.as_dict() if analysis is not None else None
        )
        return
    from embedcalc.render import bench, distributed, generation, hardware

    tables: dict[str, Callable[[], list[Any]]] = {
        "PeakResult": lambda: [bench.peak_table(result), hardware.local_summary(result)],
        "GenerationReport": lambda: [generation.generation_table(result.analysis, result.measurement)],
        "DistributedReport": lambda: [distributed.distributed_table(result.result)],
        "ElsewhereReport": lambda: [distributed.elsewhere_note(result)],
        "MemoryMatrix": lambda: [bench.memory_matrix_table(result)],
        "BenchResult": lambda: [bench.bench_table(result)],
    }
    for table in tables[type(result).__name__]():
        output.stdout.print(table)
