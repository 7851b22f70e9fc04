"""``bench --mode generate``: measured generation beside the analytic KV cache and the default time prediction.

Measured (:mod:`embedcalc.modeling.generate`): time to first token (median over timed generations), per-token
decode latency (median, p10, p90 over every decode step of every timed generation) and its growth with KV length
(median of the first and of the last quarter of the steps), decode tokens/s per sequence (1 / median) and for the
batch, peak memory, and the bytes the cache tensors hold. Predicted: the default prediction for the ``local``
device (:func:`embedcalc.analysis.time.estimate.estimate_time`: the expected time of the shipped calibration, its
roofline lower bound in ``lower_bound``): ``ttft_s`` is ``prefill_s``,
the median's counterpart the mean decode step over the generation (KV lengths P+1 … P+G), p90's the last step's,
tokens/s 1 / mean; the KV cache the analytic ``kv_cache_bytes`` (which the measured bytes must equal), and for
recurrent mixers the state the torch tensors hold beside the analytic ``recurrent_state_bytes``; peak memory
the inference estimate (weights + KV cache + peak activations). Error = (measured − predicted) / predicted.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from embedcalc.analysis.memory import kv_cache_bytes
from embedcalc.analysis.report import Analysis
from embedcalc.analysis.roofline import RooflineEstimate
from embedcalc.reconcile.bench import run_bytes
from embedcalc.reconcile.prediction import beside, errors_pct

if TYPE_CHECKING:  # torch loads with the run, not with the analyzer
    from embedcalc.modeling.generate import GenerationRun

KEYS = ("ttft_s", "decode_s_per_token_median", "decode_s_per_token_p90", "decode_tokens_per_s",
        "kv_cache_bytes_measured", "peak_memory_bytes")  # fmt: skip


@dataclass(frozen=True)
class GenerationMeasurement:
    """One measured generation, the prediction for ``local`` beside it, and the error of each number."""

    device: str
    threads: int
    build_s: float
    batch_size: int
    prompt_len: int
    gen_tokens: int
    repeat: int
    ttft_s: float
    decode_s_per_token_median: float
    decode_s_per_token_p10: float
    decode_s_per_token_p90: float
    decode_s_per_token_first_quarter: float
    decode_s_per_token_last_quarter: float
    decode_tokens_per_s: float
    batch_decode_tokens_per_s: float
    kv_cache_bytes_measured: int
    kv_cache_bytes: int
    peak_memory_bytes: int
    peak_memory_method: str
    predicted: dict[str, float | int | None]
    prediction_note: str
    recurrent_state_bytes_measured: int = 0
    recurrent_state_bytes: int = 0

    @property
    def kv_cache_matches(self) -> bool:
        return self.kv_cache_bytes_measured == self.kv_cache_bytes

    @property
    def state_matches(self) -> bool:
        return self.recurrent_state_bytes_measured == self.recurrent_state_bytes

    @property
    def measured(self) -> dict[str, float | int]:
        return {key: getattr(self, key) for key in KEYS}

    @property
    def errors_pct(self) -> dict[str, float | None]:
        return errors_pct(self.measured, self.predicted)

    def to_json(self) -> dict[str, Any]:
        """The ``measurement`` object of ``bench --mode generate --format json``."""
        state = ("recurrent_state_bytes_measured", "recurrent_state_bytes")
        out: dict[str, Any] = {
            key: getattr(self, key) for key in self.__dataclass_fields__ if key not in ("predicted", *state)
        }
        if self.recurrent_state_bytes:  # a model with recurrent mixers: the state beside the KV cache
            out |= {key: getattr(self, key) for key in state} | {
                "recurrent_state_matches": self.state_matches
            }
        growth = self.decode_s_per_token_last_quarter / self.decode_s_per_token_first_quarter
        return (
            out
            | {
                "decode_growth_last_vs_first_quarter": growth,
                "kv_cache_matches": self.kv_cache_matches,
            }
            | beside(self.measured, self.predicted)
        )


def predicted_values(analysis: Analysis, roofline: RooflineEstimate | None) -> dict[str, float | int | None]:
    """The prediction for each measurement key (module docstring); times None without a roofline."""
    mean = roofline.decode_s_per_token_mean if roofline is not None else None
    kv = kv_cache_bytes(analysis.config, analysis.workload)
    return {
        "ttft_s": roofline.phases["prefill"].time_s if roofline is not None else None,
        "decode_s_per_token_median": mean,
        "decode_s_per_token_p90": roofline.decode_s_per_token if roofline is not None else None,
        "decode_tokens_per_s": 1.0 / mean if mean else None,
        "kv_cache_bytes_measured": kv,
        "peak_memory_bytes": run_bytes(analysis.memory, decodes=True),
    }


def generation_measurement(
    analysis: Analysis, run: GenerationRun, roofline: RooflineEstimate | None, note: str
) -> GenerationMeasurement:
    """Reconcile a measured generation of ``analysis.config`` with the analytic KV cache and ``roofline``."""
    from embedcalc.modeling.timing import quantile

    w = analysis.workload
    steps = [s for generation in run.decode_s for s in generation]
    if not steps:
        raise ValueError("generation measured no decode steps: --gen-tokens must be at least 1")
    quarter = max(1, w.gen_tokens // 4)
    first = [s for generation in run.decode_s for s in generation[:quarter]]
    last = [s for generation in run.decode_s for s in generation[-quarter:]]
    median = statistics.median(steps)
    return GenerationMeasurement(
        device=run.device, threads=run.threads, build_s=run.build_s, batch_size=w.batch_size,
        prompt_len=run.prompt_len, gen_tokens=w.gen_tokens, repeat=len(run.ttft_s),
        ttft_s=statistics.median(run.ttft_s),
        decode_s_per_token_median=median,
        decode_s_per_token_p10=quantile(steps, 0.1),
        decode_s_per_token_p90=quantile(steps, 0.9),
        decode_s_per_token_first_quarter=statistics.median(first),
        decode_s_per_token_last_quarter=statistics.median(last),
        decode_tokens_per_s=1.0 / median,
        batch_decode_tokens_per_s=w.batch_size / median,
        kv_cache_bytes_measured=run.kv_cache_bytes,
        kv_cache_bytes=kv_cache_bytes(analysis.config, w),
        peak_memory_bytes=run.peak_memory_bytes,
        peak_memory_method=run.memory_method,
        predicted=predicted_values(analysis, roofline),
        prediction_note=note,
        recurrent_state_bytes_measured=run.state_bytes,
        recurrent_state_bytes=analysis.memory.recurrent_state_bytes,
    )  # fmt: skip
