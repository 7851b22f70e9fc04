"""Attention data-parallel + expert-parallel serving (the layout DeepSeek-V3/R1, Qwen3-MoE and Llama 4 deployments
run: SGLang's ``--enable-dp-attention --ep-size N``, vLLM's ``--data-parallel-size N --enable-expert-parallel``,
TensorRT-LLM's attention DP with MoE EP): N ranks, each with the whole attention (and dense layers, shared experts,
embeddings) and its own requests and KV cache, and num_experts / N of the routed experts; every MoE layer
dispatches each token to the ranks of its top-k experts and combines the results (two all-to-alls).

One rank's step, composed from ``analyze``'s components (:func:`~embedcalc.analysis.time.estimate.estimate_time`,
TP 1) — the time model has no expert-parallel inference of its own, so this is the one place it is composed:

- everything but the routed experts: ``analyze``'s time at the rank's own batch b, less its routed experts;
- the routed experts: ``analyze``'s routed-expert components for (1 + x) · N · b tokens, divided by N: the
  experts' weights spread evenly, and the **busiest rank**'s token-expert pairs, which every rank waits for at
  the combine — x more than the mean (:func:`busiest_rank_excess`);
- the dispatch and combine: :mod:`embedcalc.analysis.comm.volumes`' EP all-to-alls of the rank's b tokens × top_k
  × d, timed over the catalogue's links by :func:`~embedcalc.analysis.time.comm.collectives_s`, for the busiest
  receiver's (1 + x) · b tokens.

**Routing is not balanced.** The load-balancing losses balance experts over a training batch, not one serving
step: TensorRT-LLM measured DeepSeek-R1 at EP 32 (its large-scale EP blog, Table 1) with the busiest rank receiving
2.56× the mean of its pairs, the hottest expert 12× — the same hot experts for hundreds of steps. The model takes
each expert's load in a step as lognormal with coefficient of variation ``moe_expert_load_cv`` (fitted on those
statistics: time_calibration.json), plus the multinomial noise of the step's own top-k draws; a rank's m = E / N
experts sum to a load of CV² = cv² / m + N / pairs (Fenton–Wilkinson: the sum taken as lognormal), and the busiest
of N ranks is the expected maximum of N such draws. Fewer, wider ranks average it out (DeepSeek-V3, 256 experts:
x = 0.07 at EP 2, 0.40 at EP 8, 1.45 at EP 32); expert replication (EPLB) is not modelled (it measured x = 0.11 at
EP 32). Tensor-parallel MoE (every rank a slice of every expert) is not affected: each rank sees every pair.

Memory is ``analyze``'s with ``--dp N --ep N``: experts divided by N, the KV cache of the rank's own requests
(MLA's latent is not replicated, as it is on every TP rank).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from statistics import NormalDist

from embedcalc.analysis.comm.volumes import communication
from embedcalc.analysis.roofline import RooflineEstimate
from embedcalc.analysis.time.comm import collectives_s
from embedcalc.analysis.time.expected import device_constants
from embedcalc.analysis.workload import Parallelism, Workload
from embedcalc.config.resolved import ResolvedShape
from embedcalc.devices.calibration import load_calibration
from embedcalc.devices.catalogue import Device

Estimate = Callable[[Workload], RooflineEstimate]


def has_routed_experts(config: ResolvedShape) -> bool:
    return any(b.ffn is not None and b.ffn.moe for b in config.named_blocks.values())


def num_experts(config: ResolvedShape) -> int | None:
    """The routed experts of the model's MoE layers (the smallest count where they differ)."""
    counts = [b.ffn.num_experts for b in config.named_blocks.values() if b.ffn is not None and b.ffn.moe]
    return min(counts) if counts else None


def top_k(config: ResolvedShape) -> int:
    """Experts each token is routed to (the largest where the MoE layers differ)."""
    return max(b.ffn.top_k for b in config.named_blocks.values() if b.ffn is not None and b.ffn.moe)


_QUANTILES = 256  # points of the expected-maximum integral (midpoint rule in F^N: error < 1% of x here)


def busiest_rank_excess(ranks: int, experts: int, pairs: float, cv: float) -> float:
    """How many more token-expert pairs the busiest of ``ranks`` expert-parallel ranks receives than the mean, as
    a fraction of the mean (module docstring): ``experts`` spread evenly over the ranks, ``pairs`` routed in the
    step, each expert's load lognormal with coefficient of variation ``cv``."""
    if ranks <= 1 or experts <= 0:
        return 0.0
    var = cv * cv * ranks / experts + (ranks / pairs if pairs > 0 else 0.0)
    s2 = math.log1p(var)
    s, mu = math.sqrt(s2), -s2 / 2
    inv = NormalDist().inv_cdf
    # E[max of N iid draws] = ∫ F⁻¹(u) d(u^N) = ∫₀¹ F⁻¹(v^(1/N)) dv, F the rank's lognormal (mean 1)
    points = ((i + 0.5) / _QUANTILES for i in range(_QUANTILES))
    total = sum(math.exp(mu + s * inv(v ** (1 / ranks))) for v in points)
    return max(0.0, total / _QUANTILES - 1.0)


def _experts_s(e: RooflineEstimate, phase: str) -> float:
    return sum(c.time_s for c in e.phases[phase].components if c.key.endswith("/moe/experts"))


def _all_to_all_s(config: ResolvedShape, w: Workload, device: Device, ranks: int, tokens: int) -> float:
    par = Parallelism(tp=1, dp=ranks, ep=ranks)
    moved = replace(w, batch_size=tokens, seq_len=1, gen_tokens=0, parallel=par)
    ep = [c for c in communication(config, moved).collectives if c.group == "ep"]
    return collectives_s(ep, device, par, device_constants(load_calibration().constants, device))


def rank_times(
    config: ResolvedShape, w: Workload, device: Device, ranks: int, estimate: Estimate
) -> tuple[Callable[[int], float], float]:
    """One rank's decode step T_d(b) and prefill T_p of one prompt (module docstring); ``estimate`` is
    ``analyze``'s time call for a workload on ``device``."""
    local = replace(w, parallel=Parallelism())
    experts, k = num_experts(config) or 1, top_k(config)
    cv = load_calibration().constants.moe_expert_load_cv

    def busiest(tokens: int) -> float:
        """The busiest rank's share of the pairs of ``tokens`` tokens per rank, over the mean share."""
        return 1.0 + busiest_rank_excess(ranks, experts, ranks * tokens * k, cv)

    def decode(b: int) -> float:
        own = estimate(replace(local, batch_size=b))
        load = busiest(b)
        every = estimate(replace(local, batch_size=math.ceil(load * ranks * b)))
        mean = own.decode_s_per_token_mean or 0.0
        experts_s = _experts_s(every, "decode") / ranks - _experts_s(own, "decode")
        return mean + experts_s + _all_to_all_s(config, w, device, ranks, math.ceil(load * b))

    # a prompt's prefill, its expert GEMMs as the busiest rank's share of every rank's prompt (one sequence of
    # that many tokens: the routed experts' time depends on the tokens alone)
    load = busiest(w.seq_len)
    one = estimate(replace(local, batch_size=1, gen_tokens=0))
    every = estimate(replace(local, batch_size=1, seq_len=math.ceil(load * ranks * w.seq_len), gen_tokens=0))
    prefill = (one.prefill_s or 0.0) + _experts_s(every, "prefill") / ranks - _experts_s(one, "prefill")
    return decode, prefill + _all_to_all_s(config, w, device, ranks, math.ceil(load * w.seq_len))
