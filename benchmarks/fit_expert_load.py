"""Where ``moe_expert_load_cv`` comes from (``embedcalc/devices/time_calibration.json``): the routing statistics
TensorRT-LLM measured on DeepSeek-R1, reproduced by a lognormal per-expert load.

Source: NVIDIA TensorRT-LLM, "Scaling Expert Parallelism in TensorRT-LLM (Part 1)",
``docs/source/blogs/tech_blog/blog4_Scaling_Expert_Parallelism_in_TensorRT-LLM.md`` (github.com/NVIDIA/TensorRT-LLM
at 1d263f1), Table 1, "No EPLB (8 per-rank slots and EP 32)": DeepSeek-R1 (256 routed experts, top 8) on 32 GB200s,
a machine-translation dataset, each figure the average over layers and iterations of that step's statistic —
per rank: mean 1024 pairs, standard deviation 491.6, imbalance ratio (max − mean) / mean 1.564; per expert: mean
128, standard deviation 164.1, imbalance ratio 10.948.

The model (:func:`embedcalc.analysis.plan.expert_parallel.busiest_rank_excess`): in one step each expert's load
is a lognormal share of mean 1 and coefficient of variation ``cv`` (expert popularity), and the step's pairs are
drawn from those shares (multinomial noise, here Poisson). This script draws 20,000 such steps of 256 experts at
128 pairs per expert, places 8 consecutive experts on each of 32 ranks, computes the four statistics as the blog
defines them, and picks the ``cv`` whose statistics are nearest the measured ones (least squares in log ratio).
It then prints ``busiest_rank_excess``'s closed form beside the Monte Carlo at other expert-parallel degrees.

    python benchmarks/fit_expert_load.py
"""

from __future__ import annotations

import math

import numpy as np

from embedcalc.analysis.plan.expert_parallel import busiest_rank_excess
from embedcalc.devices.calibration import load_calibration

EXPERTS, RANKS, PER_EXPERT, STEPS = 256, 32, 128, 20_000
# expert std / mean, expert (max - mean) / mean, rank std / mean, rank (max - mean) / mean (Table 1)
MEASURED = np.array([164.1 / 128, 10.948, 491.6 / 1024, 1.564])


def draws(cv: float, experts: int, per_expert: float, seed: int = 0) -> np.ndarray:
    """``STEPS`` steps of per-expert pair counts: lognormal shares (mean 1, CV ``cv``), Poisson counts."""
    rng = np.random.default_rng(seed)
    s = math.sqrt(math.log1p(cv * cv))
    shares = rng.lognormal(-s * s / 2, s, size=(STEPS, experts))
    return rng.poisson(shares * per_expert).astype(float)


def excess(loads: np.ndarray) -> float:
    """Mean over steps of (max - mean) / mean."""
    mean = loads.mean(axis=1)
    return float(((loads.max(axis=1) - mean) / mean).mean())


def statistics(cv: float) -> np.ndarray:
    experts = draws(cv, EXPERTS, PER_EXPERT)
    ranks = experts.reshape(STEPS, RANKS, EXPERTS // RANKS).sum(axis=2)
    spread = [float((x.std(axis=1) / x.mean(axis=1)).mean()) for x in (experts, ranks)]
    return np.array([spread[0], excess(experts), spread[1], excess(ranks)])


def main() -> None:
    grid = np.round(np.arange(1.20, 1.66, 0.02), 2)
    errors = {}
    for cv in grid:
        got = statistics(float(cv))
        errors[float(cv)] = float(np.sqrt((np.log(got / MEASURED) ** 2).mean()))
    best = min(errors, key=errors.__getitem__)
    got = statistics(best)
    print("measured (TensorRT-LLM, DeepSeek-R1, EP 32): " + ", ".join(f"{x:.3f}" for x in MEASURED))
    print(
        f"best cv {best:.2f}: " + ", ".join(f"{x:.3f}" for x in got) + f" (rms log error {errors[best]:.3f})"
    )
    print(f"shipped moe_expert_load_cv: {load_calibration().constants.moe_expert_load_cv:g}")
    cv = load_calibration().constants.moe_expert_load_cv
    print("busiest rank's excess, closed form vs Monte Carlo (8 pairs per expert):")
    for experts in (256, 128, 16):
        for ranks in (2, 4, 8, 16, 32):
            if experts % ranks:
                continue
            pairs = 8.0 * experts
            loads = draws(cv, experts, pairs / experts, seed=1)
            mc = excess(loads.reshape(STEPS, ranks, experts // ranks).sum(axis=2))
            model = busiest_rank_excess(ranks, experts, pairs, cv)
            print(f"  {experts:>3} experts, EP {ranks:>2}: {model:.3f} vs {mc:.3f}")


if __name__ == "__main__":
    main()
