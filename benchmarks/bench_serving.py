"""``plan``'s serving figures against published, measured serving runs (issue 35, item 8).

Every run here is a closed-loop benchmark its publisher measured: NVIDIA's NIM LLM benchmarking guide, 'Performance'
page (NIM 1.8.0, TensorRT-LLM engines, genai-perf/AIPerf clients; https://docs.nvidia.com/nim/benchmarking/llm/latest/
performance.html), its Llama-3.3-70B-Instruct 2 × H100 80GB fp8 TP2 and Llama-3.1-8B-Instruct 1 × H100 80GB fp8
tables: five input/output lengths × eight concurrencies, time to first token, inter-token latency and output
throughput (means). The tables are as transcribed in github.com/zivbeker42/llm-guesstimator, tested_benchmarks/
(commits cf11e66 and 9fa7c3b). The eight figures of ../shared/time/serving_runs.md (70B, 5000 in / 500 out, 1, 5
and 25 users) are marked ``fit`` (the serving model was shaped with them in view); every other figure is
``held-out``: higher loads, past the KV capacity, another model and other lengths.

Each prediction is the ``plan`` row of that layout (the device count as the budget, one replica), i.e. the
continuous-batching scheduler stepped with ``analyze``'s times: TTFT and TPOT means, output tokens/s. Assumed where
the page is silent: fp8 KV cache (ModelOpt FP8 checkpoints carry it), vLLM's default engine limits; KV admission
as TensorRT-LLM's default capacity scheduler (GUARANTEED_NO_EVICT: ``kv_admission="reserve"``), NIM's engine.

Where the optional ``aiconfigurator`` package (NVIDIA's, measured kernel databases) is importable, its prediction of
the same run is printed beside embedcalc's as a peer, and both median errors over the held-out figures it predicts; it
is not a dependency. aiconfigurator 0.12.0 runs offline (its bundled model configs and H100 database; ``pip install
aiconfigurator`` in a virtual environment without torch, then ``pip install -e .`` of this project there).

    python benchmarks/bench_serving.py            # the table and the median errors
    python benchmarks/bench_serving.py --quick    # only the fit rows and one held-out load per table
    python benchmarks/bench_serving.py --max-num-batched-tokens 2048   # a what-if: the engine's token budget per step
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from judge import median_error, tp_row, within, worst

import embedcalc

NIM = "NVIDIA NIM 1.8.0 benchmarking guide, Performance page"

# (model preset, device, devices, input, output, concurrency, TTFT ms, ITL ms, output tokens/s)
NIM_70B = [
    (5000, 500, 1, 406.77, 18.58, 51.67), (5000, 500, 5, 546.7, 21.83, 218.48),
    (5000, 500, 25, 688.69, 38.75, 623.4), (5000, 500, 50, 834.51, 59.73, 814.37),
    (5000, 500, 100, 7996.25, 92.91, 917.26), (5000, 500, 150, 34794.22, 92.86, 920.9),
    (5000, 500, 200, 61680.22, 93.06, 920.54), (5000, 500, 250, 88605.32, 93.2, 920.12),
    (500, 2000, 1, 47.77, 18.91, 52.85), (500, 2000, 5, 126.53, 19.04, 261.83), (500, 2000, 25, 147.63, 21.69, 1149.05),
    (500, 2000, 50, 181.64, 23.97, 2078.43), (500, 2000, 100, 229.77, 29.98, 3322.87),
    (500, 2000, 150, 296.74, 37.85, 3948.26), (500, 2000, 200, 4867.89, 40.72, 4624.14),
    (200, 200, 1, 31.22, 18.8, 53), (200, 200, 5, 88.7, 18.83, 260.67), (200, 200, 25, 138.98, 20.61, 1178.68),
    (200, 200, 50, 156.28, 23.33, 2081.24), (200, 200, 100, 176.8, 29.87, 3263.31),
    (200, 200, 150, 195.51, 37.75, 3883.1), (200, 200, 200, 253.36, 42.95, 4534.54),
    (200, 200, 250, 264.22, 48.16, 5067.05),
    (1000, 1000, 1, 82.46, 18.67, 53.37), (1000, 1000, 5, 145.62, 19.07, 260.48),
    (1000, 1000, 25, 250.49, 22.45, 1102.23), (1000, 1000, 50, 278.62, 25.87, 1912.93),
    (1000, 1000, 100, 334.23, 34.21, 2895.49), (1000, 1000, 150, 428.54, 44.44, 3342.67),
    (1000, 1000, 200, 558.23, 50.66, 3901.74), (1000, 1000, 250, 3499.83, 56.3, 4167.39),
    (20000, 2000, 1, 1833.01, 19.58, 48.8), (20000, 2000, 5, 2910.33, 25.24, 186.8),
    (20000, 2000, 25, 18781.26, 48.26, 415.33), (20000, 2000, 50, 123969.71, 49.22, 418.65),
    (20000, 2000, 100, 333564.85, 49.81, 425.1), (20000, 2000, 150, 543226.4, 50.01, 423.95),
    (20000, 2000, 200, 753417.03, 50.06, 425.74), (20000, 2000, 250, 963222.96, 50.13, 427.06),
]  # fmt: skip
NIM_8B = [
    (200, 200, 1, 10.26, 4.63, 214.56), (200, 200, 5, 16.81, 4.58, 1076.88), (200, 200, 25, 36.34, 5.19, 4678.88),
    (200, 200, 50, 67.41, 5.91, 8018.23), (200, 200, 100, 119.97, 7.57, 12214.97),
    (200, 200, 150, 346.53, 9.81, 12988.89), (200, 200, 200, 465.18, 12.65, 13348.4),
    (200, 200, 250, 605.6, 16.14, 12964.72),
    (500, 2000, 1, 13.84, 4.56, 218.86), (500, 2000, 5, 30.88, 4.81, 1035.85), (500, 2000, 25, 97.07, 5.82, 4263.49),
    (500, 2000, 50, 135.26, 7.06, 7009.01), (500, 2000, 100, 239.92, 9.51, 10379.22),
    (500, 2000, 150, 376.95, 13.34, 11053.75), (500, 2000, 200, 1664.34, 14.96, 12549.74),
    (500, 2000, 250, 6550.46, 16.97, 12268.82),
    (1000, 1000, 1, 19.03, 4.53, 220.1), (1000, 1000, 5, 55.87, 4.8, 1031.3), (1000, 1000, 25, 268.42, 5.84, 4098.01),
    (1000, 1000, 50, 414.87, 7.26, 6514.66), (1000, 1000, 100, 615.16, 10.04, 9392.43),
    (1000, 1000, 150, 885.53, 14.14, 9982.74), (1000, 1000, 200, 1258.79, 16.02, 11553.34),
    (1000, 1000, 250, 1885.04, 19.68, 11527.61),
    (5000, 500, 1, 77.45, 4.62, 209.96), (5000, 500, 5, 279.92, 5.42, 838.03), (5000, 500, 25, 724.14, 9.67, 2251.44),
    (5000, 500, 50, 817.73, 16.47, 2765.71), (5000, 500, 100, 915.15, 29.67, 3180.16),
    (5000, 500, 150, 1080, 43.35, 3301.68), (5000, 500, 200, 4361.35, 50.41, 3378.48),
    (5000, 500, 250, 11717.42, 50.53, 3372),
    (20000, 2000, 1, 403.2, 5.06, 189.96), (20000, 2000, 5, 1141.22, 7.39, 627.76),
    (20000, 2000, 25, 2371.46, 19.35, 1217.04), (20000, 2000, 50, 11071.41, 30.73, 1330.57),
    (20000, 2000, 100, 78187.07, 31.08, 1336.09), (20000, 2000, 150, 145290.54, 31.31, 1337),
    (20000, 2000, 200, 211735.71, 31.46, 1338.24), (20000, 2000, 250, 278580.85, 31.62, 1337.66),
]  # fmt: skip
FIT = {("llama-3.1-70b", 5000, 500, c) for c in (1, 5, 25)}  # ../shared/time/serving_runs.md


@dataclass(frozen=True)
class Case:
    """One published run: a model on ``devices`` × ``device`` (TP over them) at a closed-loop concurrency."""

    model: str
    table: str
    device: str
    devices: int
    prompt: int
    output: int
    concurrency: int
    ttft_s: float
    tpot_s: float
    tokens_per_s: float

    @property
    def role(self) -> str:
        return "fit" if (self.model, self.prompt, self.output, self.concurrency) in FIT else "held-out"

    @property
    def label(self) -> str:
        return f"{self.table} {self.prompt}/{self.output} c{self.concurrency}"


def cases() -> list[Case]:
    out = []
    for model, table, devices, rows in (
        ("llama-3.1-70b", "70B-TP2", 2, NIM_70B),
        ("llama-3.1-8b", "8B-TP1", 1, NIM_8B),
    ):
        for p, g, c, ttft_ms, itl_ms, tps in rows:
            out.append(Case(model, table, "h100-sxm", devices, p, g, c, ttft_ms / 1e3, itl_ms / 1e3, tps))
    return out


def predict(case: Case, budget: int | None = None) -> dict[str, float]:
    """embedcalc's plan row for the run's layout: TP over its devices, one replica; ``budget``: the engine's tokens
    per step (None: the default, TensorRT-LLM's and vLLM's 8192 on an H100)."""
    result = embedcalc.plan(case.model, hardware="h100-sxm", dtype="fp8", kv_dtype="fp8", seq_len=case.prompt,
                            gen_tokens=case.output, concurrency=case.concurrency, max_devices=case.devices,
                            kv_admission="reserve", max_num_batched_tokens=budget)  # fmt: skip
    row = tp_row(result, case.devices)
    t = row.times
    assert t is not None, row.reasons
    return {"ttft_s": t.ttft_s, "tpot_s": t.tpot_s, "tokens_per_s": t.tokens_per_s}


# aiconfigurator's bundled model configs (aiconfigurator_core/model_configs) for the two shapes, so that it runs
# without the hub: Llama-3.3-70B-Instruct has Llama-3.1-70B's shape, the 8B Instruct the 8B's
PEER_MODELS = {
    "llama-3.1-70b": "meta-llama/Meta-Llama-3.1-70B",
    "llama-3.1-8b": "meta-llama/Meta-Llama-3.1-8B",
}


def _peer_estimate() -> Callable[..., Any] | None:
    """aiconfigurator's ``cli_estimate``: ``aiconfigurator.cli.api`` from 0.12 on, ``aiconfigurator.cli`` before."""
    try:
        from aiconfigurator.cli.api import cli_estimate  # type: ignore[import-not-found]
    except ImportError:
        try:
            from aiconfigurator.cli import cli_estimate  # type: ignore[import-not-found]
        except ImportError:
            return None
    return cli_estimate  # type: ignore[no-any-return]


def _aiconfigurator() -> Callable[[Case], dict[str, float] | None] | None:
    """aiconfigurator's prediction of a case (``cli_estimate``: aggregated in-flight batching with the TensorRT-LLM
    backend, a batch of the case's concurrency, fp8 GEMMs and KV cache, its measured H100 SXM database), when the
    package is importable: a peer, never a dependency. TTFT and TPOT are its means; throughput its output tokens/s."""
    estimate = _peer_estimate()
    if estimate is None:
        return None

    def peer(case: Case) -> dict[str, float] | None:
        try:
            got: Any = estimate(PEER_MODELS[case.model], "h100_sxm", mode="agg", backend_name="trtllm",
                                isl=case.prompt, osl=case.output, batch_size=case.concurrency,
                                tp_size=case.devices, gemm_quant_mode="fp8", kvcache_quant_mode="fp8")  # fmt: skip
            raw = got.raw
            ttft, tpot = float(raw["ttft"]) / 1e3, float(raw["tpot"]) / 1e3
            tokens = float(raw["tokens/s"])
        except (
            Exception
        ):  # the peer is optional: a release whose API differs, or a case it cannot run, is blank
            return None
        return {"ttft_s": ttft, "tpot_s": tpot, "tokens_per_s": tokens}

    return peer


METRICS = (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("tokens_per_s", "tokens/s"))


def _median_error(ratios: list[float]) -> str:
    return f"{100 * median_error(ratios):.1f}%"


def _peer_summary(paired: dict[str, list[tuple[float, float]]]) -> None:
    """embedcalc beside aiconfigurator on the held-out figures both predicted: median |error| and within 1.5×."""
    pairs = [p for v in paired.values() for p in v]
    mine, theirs = [m for m, _ in pairs], [t for _, t in pairs]
    parts = ", ".join(f"{name} {_median_error([m for m, _ in v])} vs {_median_error([t for _, t in v])}"
                      for name, v in paired.items())  # fmt: skip
    print(f"    peer: {len(pairs)} held-out figures both predict: median |error| embedcalc {_median_error(mine)} vs "
          f"aiconfigurator {_median_error(theirs)} ({parts}); within 1.5x: "
          f"{within(mine)} vs {within(theirs)}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fit rows and the c50/c250 held-out rows only")
    parser.add_argument("--max-num-batched-tokens", type=int, default=None, metavar="N",
                        help="the engine's token budget per step instead of the default (NIM does not publish "
                        "its engine's)")  # fmt: skip
    args = parser.parse_args()
    selected = [c for c in cases() if not args.quick or c.role == "fit" or c.concurrency in (50, 250)]
    peer = _aiconfigurator()
    print(f"Source: {NIM}; embedcalc plan rows (scheduler + time model). aiconfigurator: "
          f"{'installed' if peer else 'not installed (pip install aiconfigurator to compare)'}")  # fmt: skip
    print(f"{'run':<24} {'role':<8} {'metric':<9} {'published':>11} {'predicted':>11} {'ratio':>7}"
          + (f" {'aiconfig':>11}" if peer else ""))  # fmt: skip
    errors: dict[tuple[str, str], list[float]] = {}
    paired: dict[
        str, list[tuple[float, float]]
    ] = {}  # held-out figures both predicted: (embedcalc's, the peer's) ratio
    ratios: list[float] = []
    ratios_of: dict[str, list[float]] = {}
    started = time.perf_counter()
    for case in selected:
        got = predict(case, args.max_num_batched_tokens)
        other = peer(case) if peer else None
        for key, name in METRICS:
            published = getattr(case, key)
            r = got[key] / published
            ratios.append(r)
            ratios_of.setdefault(case.role, []).append(r)
            errors.setdefault((case.role, name), []).append(abs(r - 1))
            errors.setdefault((case.role, "all"), []).append(abs(r - 1))
            if other is not None and case.role == "held-out":
                paired.setdefault(name, []).append((r, other[key] / published))
            shown = f"{published:>11.4g} {got[key]:>11.4g} {r:>7.3f}"
            print(f"{case.label:<24} {case.role:<8} {name:<9} {shown}"
                  + (f" {other[key]:>11.4g}" if other else ("" if not peer else f" {'—':>11}")))  # fmt: skip
    elapsed = time.perf_counter() - started
    for role in ("fit", "held-out"):
        parts = [f"{name} {100 * statistics.median(errors[(role, name)]):.1f}%" for _, name in METRICS
                 if (role, name) in errors]  # fmt: skip
        if (role, "all") in errors:
            print(f"{role:>8}: median |error| {100 * statistics.median(errors[(role, 'all')]):.1f}% "
                  f"({', '.join(parts)}); worst {worst(ratios_of[role]):.2f}x; {len(errors[(role, 'all')])} "
                  "figures")  # fmt: skip
    if paired:
        _peer_summary(paired)
    print(f"within 1.5x: {within(ratios)} of {len(ratios)}; {len(selected)} runs planned in {elapsed:.1f} s")


if __name__ == "__main__":
    main()
