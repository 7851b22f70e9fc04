"""The serving queue model of ``plan``: steady-state TTFT, TPOT and throughput of one layout under continuous
batching, from its prefill time and its decode-step time at each batch (both the time model's).

**Serving under continuous batching** (Yu et al. 2022, Orca; Kwon et al. 2023, vLLM): a request is a prefill of
its P prompt tokens (time T_p: ``analyze``'s ``prefill_s`` at batch 1) and G decode steps (the cache then holds
P + G tokens, as the memory model counts). Each engine step is either a prefill or one decode step of every
running sequence (vLLM's scheduler without chunked prefill: waiting prefills go first). A decode step of B
sequences whose positions are spread over their generation takes T_d(B) = ``analyze``'s
``decode_s_per_token_mean`` at batch B (the mean over KV lengths P+1 … P+G).

- ``--concurrency C`` (closed loop: a finished request is replaced at once, C always in flight): the engine
  spends T_p per request on prefill and G·T_d(C)/C on its share of decode steps, so requests finish at
  X = C / (C·T_p + G·T_d(C)) per second; output throughput is G·X, a request's latency C/X (Little's law).
  C/G requests finish per decode step on average; when that is more than one, their prefills queue at the step
  boundary and the mean wait is (C/G − 1)/2 prefills: TTFT = T_p·(1 + max(0, C/G − 1)/2). TPOT (time per output
  token after the first) = (latency − TTFT)/G: the decode step plus the other requests' prefills it waits through.
- ``--rate R`` requests/s (open loop, Poisson arrivals): the running batch N is the smallest integer with
  N·(1 − R·T_p) ≥ R·G·T_d(N) (the engine is busy with R·T_p of prefill and R·G·T_d(N)/N of decode per
  second); throughput is R·G; TTFT = T_p + T_d(N)/2 (an arrival waits out the step in progress) + R·T_p²/(2(1 −
  R·T_p)) (the M/D/1 queue of prefills); TPOT = T_d(N)/(1 − R·T_p). A rate the layout cannot sustain (R·T_p ≥ 1,
  or N beyond the sequences that fit) is a reason of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ServingTimes:
    """Steady-state serving figures of one layout (module docstring)."""

    concurrency: float  # sequences in flight (mean running batch for a rate)
    batch: int  # the decode batch timed
    prefill_s: float  # T_p, one prompt
    decode_step_s: float  # T_d(batch)
    ttft_s: float
    tpot_s: float
    tokens_per_s: float  # output tokens per second, all requests
    requests_per_s: float
    latency_s: float  # one request, arrival to last token

    def to_json(self) -> dict[str, Any]:
        return {
            "concurrency": self.concurrency, "batch": self.batch, "prefill_s": self.prefill_s,
            "decode_step_s": self.decode_step_s, "ttft_s": self.ttft_s, "tpot_s": self.tpot_s,
            "tokens_per_s": self.tokens_per_s, "requests_per_s": self.requests_per_s, "latency_s": self.latency_s,
        }  # fmt: skip


def closed_loop(prefill_s: float, decode_step_s: float, concurrency: int, gen_tokens: int) -> ServingTimes:
    """``concurrency`` requests always in flight, each a prefill and ``gen_tokens`` decode steps (docstring)."""
    c, g = concurrency, max(gen_tokens, 1)
    latency = c * prefill_s + g * decode_step_s
    rate = c / latency
    ttft = prefill_s * (1 + max(0.0, c / g - 1) / 2)
    tpot = max(latency - ttft, 0.0) / g
    return ServingTimes(c, c, prefill_s, decode_step_s, ttft, tpot, g * rate, rate, latency)


def open_loop(
    prefill_s: float, step: Callable[[int], float], rate: float, gen_tokens: int, most: int
) -> ServingTimes | None:
    """Poisson arrivals at ``rate`` requests/s (docstring); ``step(n)`` is T_d(n); None when the layout cannot
    keep up with at most ``most`` sequences in flight."""
    g, busy = max(gen_tokens, 1), rate * prefill_s
    if busy >= 1 or most < 1:
        return None

    def enough(n: int) -> bool:
        return n * (1 - busy) >= rate * g * step(n)

    if not enough(most):
        return None
    lo, hi = 1, most
    while lo < hi:  # the smallest batch that keeps up (enough is monotone: T_d grows slower than n)
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if enough(mid) else (mid + 1, hi)
    t_d = step(lo)
    ttft = prefill_s + t_d / 2 + rate * prefill_s**2 / (2 * (1 - busy))
    tpot = t_d / (1 - busy)
    running = rate * (ttft + g * tpot)  # Little's law over the whole request
    return ServingTimes(running, lo, prefill_s, t_d, ttft, tpot, rate * g, rate, ttft + g * tpot)
