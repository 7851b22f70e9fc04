"""A serving engine's scheduling limits and what one simulation of it measures: the settings and the result types
of the continuous-batching scheduler (:mod:`embedcalc.analysis.plan.scheduler`), whose docstring states the model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from embedcalc.analysis.plan.steps import HOST_STEP_S, KvAdmission

# vLLM's defaults for the OpenAI server (vllm/engine/arg_utils.py, EngineArgs.get_batch_defaults, vLLM 0.10):
# devices of >= 70 GiB other than the A100 get the larger budget (PR #17885), the others the smaller one
LARGE_DEVICE_BYTES = 70 * 2**30
LARGE_MAX_NUM_SEQS, LARGE_MAX_BATCHED_TOKENS = 1024, 8192
SMALL_MAX_NUM_SEQS, SMALL_MAX_BATCHED_TOKENS = 256, 2048


@dataclass(frozen=True)
class Engine:
    """The engine's scheduling limits (vLLM's names)."""

    max_num_seqs: int = SMALL_MAX_NUM_SEQS
    max_num_batched_tokens: int = SMALL_MAX_BATCHED_TOKENS
    block_tokens: int = 16
    kv_admission: KvAdmission = "on-demand"
    host_step_s: float = HOST_STEP_S  # the engine's host work per step (steps module docstring)

    def to_json(self) -> dict[str, Any]:
        return {"max_num_seqs": self.max_num_seqs, "max_num_batched_tokens": self.max_num_batched_tokens,
                "block_tokens": self.block_tokens, "kv_admission": self.kv_admission,
                "host_step_s": self.host_step_s}  # fmt: skip


def default_engine(device_bytes: int, device_name: str) -> Engine:
    """vLLM's defaults on a device (constants above): 1024 sequences and 8192 tokens per step on devices of
    70 GiB or more other than the A100, 256 and 2048 elsewhere."""
    if device_bytes >= LARGE_DEVICE_BYTES and not device_name.startswith("a100"):
        return Engine(LARGE_MAX_NUM_SEQS, LARGE_MAX_BATCHED_TOKENS)
    return Engine(SMALL_MAX_NUM_SEQS, SMALL_MAX_BATCHED_TOKENS)


@dataclass(frozen=True)
class Spread:
    """Mean and percentiles of one figure over the measured requests."""

    mean: float
    p50: float
    p90: float
    p99: float

    @classmethod
    def of(cls, values: list[float]) -> Spread:
        if not values:
            return cls(0.0, 0.0, 0.0, 0.0)
        p50, p90, p99 = (float(v) for v in np.percentile(values, [50, 90, 99]))
        return cls(float(np.mean(values)), p50, p90, p99)

    def to_json(self) -> dict[str, float]:
        return {"mean": self.mean, "p50": self.p50, "p90": self.p90, "p99": self.p99}


@dataclass(frozen=True)
class Load:
    """What the scheduler measured (module docstring)."""

    ttft: Spread
    tpot: Spread
    e2e: Spread
    tokens_per_s: float
    requests_per_s: float
    mean_running: float  # sequences decoding per step, time-weighted
    mean_kv_wait_s: float  # arrival to admission (the queue for a KV slot or a sequence slot)
    preemptions: int
    measured: int
    sustained: bool = True
    steps: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"ttft_s": self.ttft.to_json(), "tpot_s": self.tpot.to_json(), "e2e_s": self.e2e.to_json(),
                "tokens_per_s": self.tokens_per_s, "requests_per_s": self.requests_per_s,
                "mean_running": self.mean_running, "mean_queue_s": self.mean_kv_wait_s,
                "preemptions": self.preemptions, "measured_requests": self.measured, "sustained": self.sustained,
                "engine_steps": self.steps}  # fmt: skip
