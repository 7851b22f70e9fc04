"""``bench --mode generate``: prefill + greedy decode with a static KV cache, reconciled with the analytic KV cache
and the default prediction for ``local`` (:func:`embedcalc.api.bench.local_estimate`: measured first, as
``bench --peak`` measures it, when this machine has not been measured yet)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from embedcalc.analysis.workload import Workload
from embedcalc.api.bench import (
    RunOptions,
    local_estimate,
    measured_analysis,
    refuse_unless_fits,
    run_settings,
)
from embedcalc.api.load import load_target
from embedcalc.errors import EmbedcalcError, ExitCode, Problem

if TYPE_CHECKING:
    from embedcalc.analysis.report import Analysis
    from embedcalc.reconcile.generation import GenerationMeasurement

__all__ = ["GenerationReport", "bench_generation"]


@dataclass(frozen=True)
class GenerationReport:
    """The analysis of the generating workload and the measured generation beside its prediction."""

    analysis: Analysis
    measurement: GenerationMeasurement

    def to_json(self) -> dict[str, Any]:
        """The ``results[]`` entry of ``embedcalc bench --mode generate --format json``."""
        return self.analysis.to_json() | {"measurement": self.measurement.to_json()}


def bench_generation(
    target: str, overrides: Sequence[str] | None, run: Workload, options: RunOptions
) -> GenerationReport:
    """Measure one generation setting: ``run.gen_tokens`` tokens after a prompt of ``run.seq_len`` (DESIGN.md §10)."""
    from embedcalc.modeling.generate import GenerateSettings, run_generation
    from embedcalc.reconcile.generation import generation_measurement

    if run.gen_tokens < 1:
        raise EmbedcalcError("--mode generate needs --gen-tokens N (N >= 1)", ExitCode.USAGE,
                             [Problem("--gen-tokens", "must be at least 1 with --mode generate", "gen_tokens")],
                             "gen_tokens")  # fmt: skip
    dev = options.resolve()
    run = replace(run, mode="inference")
    analysis = measured_analysis(load_target(target, overrides), run)
    if analysis.config.architecture == "encoder":
        problem = Problem(
            "--mode", "generate needs a decoder or an encoder-decoder", "encoder_cannot_generate"
        )
        raise EmbedcalcError(f"{analysis.target} is an encoder: it has no decoder to generate with",
                             ExitCode.USAGE, [problem], "encoder_cannot_generate")  # fmt: skip
    refuse_unless_fits(analysis, dev, options, decodes=True)  # the cache is allocated before the prompt
    settings = run_settings(GenerateSettings, run, options)
    try:
        with options.progress(f"{analysis.target} generate") as on_step:
            measured = run_generation(analysis.config, settings, dev, on_step)
    except (RuntimeError, ValueError, MemoryError) as exc:
        raise EmbedcalcError(
            f"generation failed on {dev}: {exc}", ExitCode.RUNTIME, code="bench_failed"
        ) from None
    roofline, note = local_estimate(analysis, dev, options)
    return GenerationReport(analysis, generation_measurement(analysis, measured, roofline, note))
