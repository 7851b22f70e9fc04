"""``embedcalc bench TARGET --mode generate``: prefill + greedy decode with a static KV cache, reconciled with the
analytic KV cache and the roofline prediction for ``local`` (measured first, by ``bench --peak``'s code path, when
this machine has not been measured yet)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from embedcalc.analysis.roofline import RooflineEstimate
from embedcalc.analysis.roofline_time import TimeRequest, estimate_time
from embedcalc.analysis.workload import Workload
from embedcalc.cli import output
from embedcalc.cli.common import OutputFormat, analyze_target
from embedcalc.config.hardware import LOCAL, load_device
from embedcalc.errors import EmbedcalcError, ExitCode, Problem, UnsupportedEnvironmentError
from embedcalc.reconcile.bench import check_fits
from embedcalc.reconcile.generation import generation_measurement


def _local_roofline(analysis: Any, dev: Any, dtype: str) -> tuple[RooflineEstimate | None, str]:
    """The roofline for ``local`` and a note on where its numbers came from (or why there is none)."""
    from embedcalc.modeling.timing import device_name, measure_matmul_peak
    from embedcalc.render.progress import step_progress

    note = "roofline for local (efficiency 1: a lower bound)"
    try:
        device = load_device(LOCAL)
    except UnsupportedEnvironmentError:
        from embedcalc.cli.hardware import measure_local

        with step_progress(output.stderr, "matmul peak") as on_step:
            peak = measure_matmul_peak(dev, dtype, on_step=on_step)
        measure_local(dev, device_name(dev), dtype, peak)
        device = load_device(LOCAL)
        note += "; local was not measured yet and was measured now (bench --peak)"
    try:
        return estimate_time(analysis.config, analysis.workload, TimeRequest(device=device)), note
    except EmbedcalcError as exc:  # e.g. no measured peak for this dtype on local
        return None, f"no prediction: {exc.message}; run `embedcalc bench --peak --dtype {dtype}`"


def run_generate(
    target: str, overrides: list[str] | None, workload: Workload, dev: Any, *, warmup: int, repeat: int,
    compile: bool, force: bool, format: OutputFormat,
) -> None:  # fmt: skip
    """Measure one generation setting and print its table or JSON (``measurement`` per DESIGN.md §10)."""
    from embedcalc.modeling.generate import GenerateSettings, run_generation
    from embedcalc.modeling.timing import free_memory_bytes
    from embedcalc.render.progress import step_progress
    from embedcalc.render.units import binary_bytes

    if workload.gen_tokens < 1:
        raise EmbedcalcError("--mode generate needs --gen-tokens N (N >= 1)", ExitCode.USAGE,
                             [Problem("--gen-tokens", "must be at least 1 with --mode generate", "gen_tokens")],
                             "gen_tokens")  # fmt: skip
    workload = replace(workload, mode="inference")
    analysis = analyze_target(target, [*(overrides or []), "dropout=0.0"], workload)
    if analysis.config.architecture == "encoder":
        problem = Problem("--mode", "generate needs a decoder or an encoder-decoder", "encoder_cannot_generate")
        raise EmbedcalcError(f"{analysis.target} is an encoder: it has no decoder to generate with",
                             ExitCode.USAGE, [problem], "encoder_cannot_generate")  # fmt: skip
    if not force:
        where = "cuda" if dev.type == "cuda" else "this machine (MemAvailable)"
        check_fits(analysis, free_memory_bytes(dev), where, binary_bytes)
    settings = GenerateSettings(
        batch_size=workload.batch_size, seq_len=workload.seq_len, tgt_len=workload.tgt_len,
        gen_tokens=workload.gen_tokens, dtype=workload.dtype, attention=workload.attention, compile=compile,
        warmup=warmup, repeat=repeat,
    )  # fmt: skip
    try:
        with step_progress(output.stderr, f"{analysis.target} generate") as on_step:
            run = run_generation(analysis.config, settings, dev, on_step)
    except (RuntimeError, ValueError, MemoryError) as exc:
        raise EmbedcalcError(f"generation failed on {dev}: {exc}", ExitCode.RUNTIME, code="bench_failed") from None
    roofline, note = _local_roofline(analysis, dev, workload.dtype)
    measurement = generation_measurement(analysis, run, roofline, note)
    if format is OutputFormat.json:
        result = analysis.as_json() | {"measurement": measurement.as_json()}
        output.emit_json("bench", [result], workload.as_dict())
        return
    from embedcalc.render.generation import generation_table

    output.stdout.print(generation_table(analysis, measurement))
