"""``embedcalc bench TARGET``: build the model on a real device, time it, reconcile with the prediction.

torch is imported only inside the command. Before anything is allocated the analyzer predicts peak memory and
compares it with what is free; a run that cannot fit exits 4 with a batch size and a seq-len that would.
"""

from __future__ import annotations

from dataclasses import replace
from enum import StrEnum
from typing import Annotated, Any

import typer

from embedcalc.analysis.memory import MemoryEstimate, estimate_memory
from embedcalc.analysis.report import Analysis
from embedcalc.analysis.workload import Workload
from embedcalc.cli import output
from embedcalc.cli.analyze import analyze_target
from embedcalc.cli.common import (
    AttentionChoice,
    AttentionOption,
    BatchOption,
    DtypeChoice,
    FormatOption,
    ModeChoice,
    ModeOption,
    OutputFormat,
    RecomputeChoice,
    RecomputeOption,
    SeqOption,
    SetOption,
    TgtOption,
    handle_errors,
    make_workload,
)  # fmt: skip
from embedcalc.cli.torch_env import require_device, require_torch
from embedcalc.config.hardware import datasheet_peak
from embedcalc.errors import EmbedcalcError, ExitCode, Problem, UnsupportedEnvironmentError


class DeviceChoice(StrEnum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


class StrategyChoice(StrEnum):
    ddp = "ddp"
    fsdp = "fsdp"
    tp = "tp"


class BenchDtype(StrEnum):
    float32 = "float32"
    bfloat16 = "bfloat16"
    float16 = "float16"


def run_bytes(memory: MemoryEstimate) -> int:
    """What the timed run should peak at: the estimate without its KV cache (bench runs whole-sequence forwards,
    it does not decode)."""
    return memory.total_bytes - memory.kv_cache_bytes


def predicted_bytes(analysis: Analysis) -> int:
    return run_bytes(analysis.memory)


def _largest_fitting(workload: Workload, config: Any, free: int, field: str) -> int | None:
    """The largest batch_size (or seq_len) at which the prediction fits in ``free`` bytes, by bisection."""

    def fits(value: int) -> bool:
        trial = (
            replace(workload, batch_size=value) if field == "batch_size" else replace(workload, seq_len=value)
        )
        return run_bytes(estimate_memory(config, trial)) <= free

    hi = getattr(workload, field)
    if not fits(1):
        return None
    lo = 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _check_fits(analysis: Analysis, free: int, where: str) -> None:
    need = predicted_bytes(analysis)
    if need <= free:
        return
    from embedcalc.render.units import binary_bytes

    config, w = analysis.config, analysis.workload
    batch = _largest_fitting(w, config, free, "batch_size")
    seq = _largest_fitting(w, config, free, "seq_len")
    hints = []
    if batch:
        hints.append(f"--batch-size {batch}")
    if seq:
        hints.append(f"--seq-len {seq}")
    hint = f"; this would fit: {' or '.join(hints)}" if hints else "; even batch 1 at seq-len 1 does not fit"
    raise UnsupportedEnvironmentError(
        f"{analysis.target}: predicted peak {binary_bytes(need)} ({need:,} bytes) exceeds the "
        f"{binary_bytes(free)} ({free:,} bytes) free on {where}{hint}. --force runs it anyway.",
        code="does_not_fit",
    )


@handle_errors("bench")
def bench_command(
    target: Annotated[
        str | None, typer.Argument(help="Preset name or config file (omit with --peak).")
    ] = None,
    device: Annotated[DeviceChoice, typer.Option("--device", help="Where to run.")] = DeviceChoice.auto,
    dtype: Annotated[
        BenchDtype, typer.Option("--dtype", help="Compute dtype (training: mixed precision).")
    ] = (BenchDtype.float32),
    batch_size: BatchOption = 1,
    seq_len: SeqOption = 128,
    tgt_len: TgtOption = None,
    mode: ModeOption = ModeChoice.inference,
    attention: AttentionOption = AttentionChoice.sdpa,
    warmup: Annotated[int, typer.Option("--warmup", min=0, help="Untimed steps first.")] = 3,
    repeat: Annotated[int, typer.Option("--repeat", min=1, help="Timed steps.")] = 10,
    compile: Annotated[bool, typer.Option("--compile", help="Run through torch.compile.")] = False,
    threads: Annotated[int | None, typer.Option("--threads", min=1, help="torch CPU threads.")] = None,
    recompute: RecomputeOption = RecomputeChoice.none,
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
    torch = require_torch()
    from embedcalc.modeling.timing import free_memory_bytes, measure_matmul_peak

    if threads is not None:
        torch.set_num_threads(threads)
    dev = require_device(device.value)
    if peak:
        if target is not None:
            output.warn(
                [Problem("--peak", f"--peak measures the device only; {target} is ignored", "target_ignored")]
            )
        _report_peak(dev, dtype.value, format)
        return
    if target is None:
        raise typer.BadParameter("TARGET is required unless --peak is given", param_hint="'TARGET'")
    if nproc is not None:
        from embedcalc.cli.bench_distributed import run_distributed

        workload = make_workload(
            batch_size, seq_len, tgt_len, DtypeChoice(dtype.value), mode, attention, recompute=recompute
        )
        run_distributed(target, overrides, workload, nproc=nproc, strategy=strategy.value, device=device.value,
                        warmup=warmup, repeat=repeat, threads=threads, force=force, baseline=baseline,
                        format=format)  # fmt: skip
        return
    if memory_matrix:
        from embedcalc.cli.bench_matrix import run_memory_matrix

        run_memory_matrix(target, overrides, device.value, dtype.value, batch_size, seq_len, tgt_len, threads,
                          force, format)  # fmt: skip
        return
    workload = make_workload(
        batch_size, seq_len, tgt_len, DtypeChoice(dtype.value), mode, attention, recompute=recompute
    )
    # the benchmarked model has no dropout layers, so the prediction is made for dropout 0 (no masks)
    analysis = analyze_target(target, [*(overrides or []), "dropout=0.0"], workload)
    if not force:
        _check_fits(
            analysis, free_memory_bytes(dev), "cuda" if dev.type == "cuda" else "this machine (MemAvailable)"
        )
    run = _run(analysis, dev, workload, warmup, repeat, compile)
    from embedcalc.render.progress import step_progress

    with step_progress(output.stderr, "matmul peak") as on_step:
        measured_peak = measure_matmul_peak(dev, dtype.value, on_step=on_step)
    measurement = _measurement(analysis, run, measured_peak, dev, dtype.value)
    if format is OutputFormat.json:
        result = analysis.as_json() | {"measurement": measurement}
        output.emit_json("bench", [result], workload.as_dict())
        return
    from embedcalc.render.bench import bench_table

    output.stdout.print(bench_table(analysis, measurement))


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


def _measurement(analysis: Analysis, run: Any, peak: Any, dev: Any, dtype: str) -> dict[str, Any]:
    w = analysis.workload
    flops = analysis.flops.training_step if w.mode == "training" else analysis.flops.forward
    median = run.timings.median_s
    decoder_tokens = 0  # an encoder-decoder also processes its target sequence
    if analysis.config.architecture == "encoder-decoder":
        decoder_tokens = w.tgt_len if w.tgt_len is not None else w.seq_len
    tokens = w.batch_size * (w.seq_len + decoder_tokens)
    achieved = flops / median
    spec_flops, spec_source = datasheet_peak(run.device, dtype) if dev.type == "cuda" else (None, None)
    predicted = predicted_bytes(analysis)
    return {
        "device": run.device,
        "threads": run.threads,
        "build_s": run.build_s,
        "median_s": median,
        "p10_s": run.timings.quantile_s(0.1),
        "p90_s": run.timings.quantile_s(0.9),
        "repeat": len(run.timings.seconds),
        "tokens_per_s": tokens / median,
        "sequences_per_s": w.batch_size / median,
        "flops_per_step": flops,
        "achieved_flops_per_s": achieved,
        "peak_flops_per_s": peak.flops_per_s,
        "peak_source": f"measured: best of {peak.repeat} {peak.size}x{peak.size} {peak.dtype} matmuls",
        "utilization": achieved / peak.flops_per_s,
        "spec_peak_flops_per_s": spec_flops,
        "spec_peak_source": spec_source,
        "spec_utilization": achieved / spec_flops if spec_flops else None,
        "peak_memory_bytes": run.peak_memory_bytes,
        "peak_memory_method": run.memory_method,
        "predicted_memory_bytes": predicted,
        "memory_error_pct": 100.0 * (run.peak_memory_bytes - predicted) / predicted if predicted else None,
    }


def _report_peak(dev: Any, dtype: str, format: OutputFormat) -> None:
    from embedcalc.modeling.timing import device_name, measure_matmul_peak
    from embedcalc.render.progress import step_progress

    with step_progress(output.stderr, "matmul peak") as on_step:
        peak = measure_matmul_peak(dev, dtype, on_step=on_step)
    name = device_name(dev)
    spec_flops, spec_source = datasheet_peak(name, dtype) if dev.type == "cuda" else (None, None)
    result = {
        "device": name, "dtype": dtype, "size": peak.size, "peak_flops_per_s": peak.flops_per_s,
        "spec_peak_flops_per_s": spec_flops, "spec_peak_source": spec_source,
    }  # fmt: skip
    from embedcalc.cli.hardware import measure_local

    result |= measure_local(dev, name, dtype, peak)
    if format is OutputFormat.json:
        output.emit_json("bench", [{"target": None, "measurement": result}])
        return
    from embedcalc.render.bench import peak_table
    from embedcalc.render.hardware import local_summary

    output.stdout.print(peak_table(result))
    output.stdout.print(local_summary(result))
