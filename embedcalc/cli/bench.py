"""``embedcalc bench TARGET``: build the model on a real device, time it, reconcile with the prediction.

torch is imported only inside the command. Before anything is allocated the analyzer predicts peak memory and
compares it with what is free; a run that cannot fit exits 4 with a batch size and a seq-len that would.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import typer

from embedcalc.api.torch_env import require_torch
from embedcalc.cli import output
from embedcalc.cli.common import FormatOption, OutputFormat, SetOption, analyze_target, handle_errors
from embedcalc.cli.options import WorkloadFlags, flags, only
from embedcalc.cli.torch_env import require_device
from embedcalc.config.dtypes import ALIASES, BENCH_DTYPES, DTYPES, DtypeError, canonical_dtype, dtype_choices
from embedcalc.errors import EmbedcalcError, ExitCode, Problem

if TYPE_CHECKING:
    from embedcalc.analysis.report import Analysis
    from embedcalc.analysis.workload import Workload


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


BenchModeOption = Annotated[
    BenchModeChoice,
    typer.Option(
        "--mode",
        help="inference: one forward; training: fwd+bwd+AdamW; generate: prefill --seq-len, then decode "
        "--gen-tokens tokens greedily with a static KV cache.",
    ),
]


def _bench_dtype(value: str) -> str:
    """--dtype of bench: fp32, bf16 or fp16 (or their long names); fp8 and the weight-only formats need kernels the
    torch model does not use, so they are predicted by analyze, not measured (exit 2 with the fix)."""
    try:
        return canonical_dtype(value, BENCH_DTYPES)
    except DtypeError:
        name = canonical_dtype(value) if value in (*DTYPES, *ALIASES) else value
        fix = f"use {dtype_choices(BENCH_DTYPES)}"
        if name in DTYPES:
            fix = (f"predict {name} with `embedcalc analyze TARGET --dtype {name} --hardware NAME`, and bench "
                   "with --dtype fp32 (the CPU) or bf16")  # fmt: skip
        raise typer.BadParameter(
            f"{value!r}: bench measures the torch model in {', '.join(BENCH_DTYPES)}, which has no {name} "
            f"kernels; {fix}"
        ) from None


def _check_fits(analysis: Analysis, free: int, where: str) -> None:
    from embedcalc.reconcile.bench import check_fits
    from embedcalc.render.units import binary_bytes

    check_fits(analysis, free, where, binary_bytes)


@handle_errors("bench")
@flags
def bench_command(
    target: Annotated[
        str | None, typer.Argument(help="Preset name or config file (omit with --peak).")
    ] = None,
    device: Annotated[DeviceChoice, typer.Option("--device", help="Where to run.")] = DeviceChoice.auto,
    dtype: Annotated[
        str,
        typer.Option(
            "--dtype", parser=_bench_dtype, metavar="|".join(BENCH_DTYPES),
            help="Compute dtype (training: mixed precision); fp32 unless given, on the CPU as on a GPU.",
        ),
    ] = "fp32",
    *,
    run: Annotated[
        WorkloadFlags, only("batch_size", "seq_len", "tgt_len", "attention", "recompute", "gen_tokens")
    ],
    mode: BenchModeOption = BenchModeChoice.inference,
    warmup: Annotated[int, typer.Option("--warmup", min=0, help="Untimed steps first.")] = 3,
    repeat: Annotated[int, typer.Option("--repeat", min=1, help="Timed steps.")] = 10,
    compile: Annotated[bool, typer.Option("--compile", help="Run through torch.compile.")] = False,
    threads: Annotated[int | None, typer.Option("--threads", min=1, help="torch CPU threads.")] = None,
    memory_matrix: Annotated[
        bool,
        typer.Option(
            "--memory-matrix",
            help="Training: measure one step's peak memory for every --attention × --recompute setting, each in "
            "a fresh process, beside the prediction.",
        ),
    ] = False,
    peak: Annotated[bool, typer.Option("--peak", help="Only measure the device's matmul peak.")] = False,
    nproc: Annotated[
        int | None,
        typer.Option(
            "--nproc", min=1, help="Run on this many processes under torchrun (gloo on CPU, NCCL on CUDA)."
        ),
    ] = None,
    strategy: Annotated[
        StrategyChoice, typer.Option("--strategy", help="With --nproc: DDP, FSDP2 (ZeRO-3) or tensor parallel.")
    ] = StrategyChoice.ddp,
    baseline: Annotated[
        bool,
        typer.Option("--baseline/--no-baseline", help="With --nproc: also run one process for scaling efficiency."),
    ] = True,
    force: Annotated[
        bool, typer.Option("--force", help="Run even if predicted memory exceeds free.")
    ] = False,
    overrides: SetOption = None,
    format: FormatOption = OutputFormat.table,
) -> None:
    """Time real forward passes (or training steps) and reconcile them with the analytic prediction.

    Reports median/p10/p90 latency, tokens/s, sequences/s, achieved FLOP/s (analytic FLOPs / median time),
    utilisation against the device's measured matmul peak (and the datasheet peak for known GPUs), and peak
    memory measured beside predicted.
    """
    require_torch()
    from embedcalc.modeling.timing import free_memory_bytes, measure_matmul_peak, set_threads

    set_threads(threads)
    dev = require_device(device.value)
    if peak:
        if target is not None:
            output.warn(
                [Problem("--peak", f"--peak measures the device only; {target} is ignored", "target_ignored")]
            )
        _report_peak(dev, dtype, format)
        return
    if target is None:
        raise typer.BadParameter("TARGET is required unless --peak is given", param_hint="'TARGET'")
    if mode is BenchModeChoice.generate:
        from embedcalc.cli.bench_generate import run_generate

        workload = run.workload(dtype=dtype, mode="inference")
        run_generate(target, overrides, workload, dev, warmup=warmup, repeat=repeat, compile=compile, force=force,
                     format=format)  # fmt: skip
        return
    # inference or training: one forward or step of --seq-len tokens (--gen-tokens is generate's)
    workload = run.workload(dtype=dtype, mode=mode.value, gen_tokens=0)
    if nproc is not None:
        from embedcalc.cli.bench_distributed import run_distributed

        run_distributed(target, overrides, workload, nproc=nproc, strategy=strategy.value, device=device.value,
                        warmup=warmup, repeat=repeat, threads=threads, force=force, baseline=baseline,
                        format=format)  # fmt: skip
        return
    if memory_matrix:
        from embedcalc.cli.bench_matrix import run_memory_matrix

        run_memory_matrix(target, overrides, device.value, dtype, run.batch_size, run.seq_len, run.tgt_len,
                          threads, force, format)  # fmt: skip
        return
    # the benchmarked model has no dropout layers, so the prediction is made for dropout 0 (no masks)
    analysis = analyze_target(target, [*(overrides or []), "dropout=0.0"], workload)
    if not force:
        _check_fits(
            analysis, free_memory_bytes(dev), "cuda" if dev.type == "cuda" else "this machine (MemAvailable)"
        )
    timed = _run(analysis, dev, workload, warmup, repeat, compile)
    from embedcalc.render.progress import step_progress

    with step_progress(output.stderr, "matmul peak") as on_step:
        measured_peak = measure_matmul_peak(dev, dtype, on_step=on_step)
    from embedcalc.reconcile.bench import BenchResult, measurement

    result = BenchResult(analysis, measurement(analysis, timed, measured_peak, dev.type == "cuda", dtype))
    if format is OutputFormat.json:
        output.emit_json("bench", [result.to_json()], workload.as_dict())
        return
    from embedcalc.render.bench import bench_table

    output.stdout.print(bench_table(result))


def _run(analysis: Analysis, dev: Any, workload: Workload, warmup: int, repeat: int, compile: bool) -> Any:
    from embedcalc.modeling.benchmark import BenchSettings, run_benchmark
    from embedcalc.render.progress import step_progress

    settings = BenchSettings(
        batch_size=workload.batch_size, seq_len=workload.seq_len, tgt_len=workload.tgt_len, dtype=workload.dtype,
        mode=workload.mode, attention=workload.attention, compile=compile, warmup=warmup, repeat=repeat,
        recompute=workload.recompute,
    )  # fmt: skip
    try:
        with step_progress(output.stderr, analysis.target) as on_step:
            return run_benchmark(analysis.config, settings, dev, on_step)
    except MemoryError as exc:
        raise EmbedcalcError(
            f"out of memory on {dev}: {exc}", ExitCode.RUNTIME, code="out_of_memory"
        ) from None
    except (
        RuntimeError
    ) as exc:  # torch raises RuntimeError (and its OutOfMemoryError subclass) for device faults
        raise EmbedcalcError(
            f"the benchmark failed on {dev}: {exc}", ExitCode.RUNTIME, code="bench_failed"
        ) from None


def _report_peak(dev: Any, dtype: str, format: OutputFormat) -> None:
    from embedcalc.cli.hardware import measure_local
    from embedcalc.modeling.timing import device_name, measure_matmul_peak
    from embedcalc.reconcile.peak import peak_result
    from embedcalc.render.progress import step_progress

    with step_progress(output.stderr, "matmul peak") as on_step:
        peak = measure_matmul_peak(dev, dtype, on_step=on_step)
    name = device_name(dev)
    result = peak_result(name, dtype, peak, dev.type == "cuda", measure_local(dev, name, dtype, peak))
    if format is OutputFormat.json:
        output.emit_json("bench", [result.to_json()])
        return
    from embedcalc.render.bench import peak_table
    from embedcalc.render.hardware import local_summary

    output.stdout.print(peak_table(result))
    output.stdout.print(local_summary(result))
