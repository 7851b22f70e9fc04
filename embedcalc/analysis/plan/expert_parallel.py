"""Attention data-parallel + expert-parallel serving (the layout DeepSeek-V3/R1, Qwen3-MoE and Llama 4 deployments
run: SGLang's ``--enable-dp-attention --ep-size N``, vLLM's ``--data-parallel-size N --enable-expert-parallel``,
TensorRT-LLM's attention DP with MoE EP): N ranks, each with the whole attention (and dense layers, shared experts,
embeddings) and its own requests and KV cache, and num_experts / N of the routed experts; every MoE layer
dispatches each token to the ranks of its top-k experts and combines the results (two all-to-alls).

One rank's step, composed from ``analyze``'s components (:func:`~embedcalc.analysis.time.estimate.estimate_time`,
TP 1) — the time model has no expert-parallel inference of its own, so this is the one place it is composed:

- everything but the routed experts: ``analyze``'s time at the rank's own batch b, less its routed experts;
- the routed experts: ``analyze``'s routed-expert components for the N · b tokens of all ranks, divided by N
  (the experts' weights and FLOPs spread evenly: balanced routing, as the load-balancing losses and EPLB aim for);
- the dispatch and combine: :mod:`embedcalc.analysis.comm.volumes`' EP all-to-alls of the rank's b tokens × top_k
  × d, timed over the catalogue's links by :func:`~embedcalc.analysis.time.comm.collectives_s`.

Memory is ``analyze``'s with ``--dp N --ep N``: experts divided by N, the KV cache of the rank's own requests
(MLA's latent is not replicated, as it is on every TP rank).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

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

    def decode(b: int) -> float:
        own = estimate(replace(local, batch_size=b))
        every = estimate(replace(local, batch_size=ranks * b))
        mean = own.decode_s_per_token_mean or 0.0
        experts = _experts_s(every, "decode") / ranks - _experts_s(own, "decode")
        return mean + experts + _all_to_all_s(config, w, device, ranks, b)

    one = estimate(replace(local, batch_size=1, gen_tokens=0))
    every = estimate(replace(local, batch_size=ranks, gen_tokens=0))
    prefill = (one.prefill_s or 0.0) + _experts_s(every, "prefill") / ranks - _experts_s(one, "prefill")
    return decode, prefill + _all_to_all_s(config, w, device, ranks, w.seq_len)
