"""Ours vs measured on this machine, side by side, one run: what ``analyze --hardware local`` predicts for a model's
time to first token, decode step and forward beside what ``embedcalc bench`` measures for them (DESIGN.md §10,
issue 35 item 7).

Each round (``--rounds``) measures this machine afresh as ``embedcalc bench --peak`` does (unless ``--no-peak``:
then the cached ``local`` device is used), then for every model and batch size runs ``bench --mode generate``
(time to first token = the prefill of ``--seq-len`` tokens, the median decode step over ``--gen-tokens`` steps)
and ``bench`` (one forward of ``--seq-len`` tokens), and predicts the same three from the ``local`` device just
measured: as the time model does (with local's measured GEMV rate where it has one) and, beside it, with the GEMV
rate left out (decode GEMVs at the calibration's memory fraction of the STREAM bandwidth: the model before the
rate was measured). The machine is shared, so each number is the median over the rounds, with the spread
(min-max) of the measured/predicted ratio; the load average is printed with every round.

The second model is a Llama-like shape small enough for a CPU (llama-3.1-8b's family with --set: 6 layers,
width 1024, 16 heads, 4 KV heads, FFN 2816, vocab 32000), so the comparison is not gpt2's alone.

    XDG_CACHE_HOME=/tmp/mycache python benchmarks/bench_local.py [--rounds 3] [--repeat 3] [--gen-tokens 16]
        [--seq-len 128] [--batch 1 4] [--models gpt2 llama-small] [--no-peak] [--json out.json]

It runs with an embedcalc that predates the GEMV rate too (the "without" column is then the only one).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from dataclasses import replace
from typing import Any

from embedcalc.analysis.time.estimate import TimeRequest, estimate_time
from embedcalc.analysis.workload import Workload
from embedcalc.api.bench import RunOptions, bench_target, measure_peak, measured_analysis
from embedcalc.api.generate import bench_generation
from embedcalc.api.load import load_target
from embedcalc.api.timing import local_launches
from embedcalc.devices.catalogue import LOCAL
from embedcalc.devices.resolve import load_device

MODELS: dict[str, tuple[str, list[str]]] = {
    "gpt2": ("gpt2", []),
    "llama-small": ("llama-3.1-8b", ["num_layers=6", "embed_dim=1024", "num_heads=16", "num_kv_heads=4",
                                     "ffn_dim=2816", "vocab_size=32000", "name=llama-small"]),
}  # fmt: skip
QUANTITIES = ("ttft_s", "decode_s", "forward_s")


def predictions(target: str, overrides: list[str], run: Workload) -> dict[str, dict[str, float]]:
    """TTFT (prefill), mean decode step and forward from the cached ``local`` device: ``with`` its GEMV rate (as
    the time model reads it) and ``without`` it."""
    device = load_device(LOCAL)
    analysis = measured_analysis(load_target(target, overrides), run)
    variants = {"with": device}
    if getattr(device, "gemv_bytes_per_s", None):
        variants["without"] = device.model_copy(update={"gemv_bytes_per_s": {}})
    else:
        variants = {"without": device}
    out = {}
    # bench's forward (model(ids)) computes every position's logits, generate's prefill the last position's
    scoring = replace(analysis.workload, logits="all")
    for name, dev in variants.items():
        times = {}
        for w in (analysis.workload, scoring):
            request = TimeRequest(device=dev, launches=local_launches(analysis.config, w, dev))
            times[w.logits] = estimate_time(analysis.config, w, request, analysis.memory.model_state_bytes)
        est = times[analysis.workload.logits]
        out[name] = {"ttft_s": est.phases["prefill"].time_s, "decode_s": est.decode_s_per_token_mean,
                     "forward_s": times["all"].phases["prefill"].time_s}  # fmt: skip
    return out


def measure(target: str, overrides: list[str], run: Workload, options: RunOptions) -> dict[str, float]:
    """TTFT and the median decode step (``bench --mode generate``), and the median forward (``bench``)."""
    gen = bench_generation(target, overrides, run, options).measurement
    forward = bench_target(target, overrides, replace(run, gen_tokens=0), options).measurement
    return {"ttft_s": gen.ttft_s, "decode_s": gen.decode_s_per_token_median, "forward_s": forward.median_s}


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=3, help="timed generations / forwards per bench")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--gen-tokens", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument(
        "--no-peak", action="store_true", help="use the cached local device; do not measure it"
    )
    parser.add_argument("--json", default=None, help="write every round's numbers here")
    args = parser.parse_args()
    options = RunOptions(device="cpu", warmup=args.warmup, repeat=args.repeat, threads=args.threads)
    cases = [(m, b) for m in args.models for b in args.batch]
    rows: dict[tuple[str, int], list[dict[str, Any]]] = {case: [] for case in cases}
    for r in range(args.rounds):
        if not args.no_peak:
            peak = measure_peak("fp32", options)
            gemv = getattr(peak.local, "gemv_bytes_per_s", None)
            print(f"round {r + 1}: bench --peak: {peak.peak_flops_per_s / 1e9:,.1f} GFLOP/s, STREAM "
                  f"{peak.local.memory_bandwidth_bytes_per_s / 1e9:,.2f} GB/s, GEMV "
                  f"{'-' if gemv is None else f'{gemv / 1e9:,.2f} GB/s'}, load {os.getloadavg()[0]:.1f}",
                  flush=True)  # fmt: skip
        for model, batch in cases:
            target, overrides = MODELS[model]
            run = Workload(batch_size=batch, seq_len=args.seq_len, gen_tokens=args.gen_tokens, dtype="fp32",
                           dtype_source="flag")  # fmt: skip
            measured = measure(target, overrides, run, options)
            predicted = predictions(target, overrides, run)
            rows[(model, batch)].append({"measured": measured, "predicted": predicted,
                                         "load": os.getloadavg()[0]})  # fmt: skip
            shown = ", ".join(f"{q} {_ms(v)} ms" for q, v in measured.items())
            print(f"  {model} b{batch}: measured {shown} (load {os.getloadavg()[0]:.1f})", flush=True)
    print()
    print("median over rounds, ms; ratio = measured / predicted (median, min-max)")
    header = f"{'model':<12} {'b':>2} {'quantity':<10} {'measured':>10} {'with GEMV':>10} {'ratio':>18} "
    print(header + f"{'without':>10} {'ratio':>18}")
    for (model, batch), runs in rows.items():
        for q in QUANTITIES:
            line = (
                f"{model:<12} {batch:>2} {q:<10} {_ms(statistics.median(x['measured'][q] for x in runs)):>10}"
            )
            for variant in ("with", "without"):
                if variant not in runs[0]["predicted"]:
                    line += f" {'-':>10} {'-':>18}"
                    continue
                ratios = [x["measured"][q] / x["predicted"][variant][q] for x in runs]
                pred = statistics.median(x["predicted"][variant][q] for x in runs)
                spread = f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"
                line += f" {_ms(pred):>10} {spread:>18}"
            print(line)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(
                [{"model": m, "batch": b, "rounds": runs} for (m, b), runs in rows.items()], out, indent=1
            )


if __name__ == "__main__":
    main()
