"""How long does `embedcalc plan` take over the whole catalogue for one model? (issue 21: under a second.)

In process, after one warm-up call (imports, the catalogue's YAML parsed once per call as the command does), times
:func:`embedcalc.plan` ``--rounds`` times for each model and prints the median and the slowest round, the number
of layouts evaluated, and whether the median is within the target. Serving at the issue's workload (2048-token
prompts, 256 output tokens, 32 in flight); ``--training`` adds the training search (1T tokens, 30 d deadline, up
to ``--max-devices`` devices). ``--cli`` also times the command as a fresh process (``python -m embedcalc plan
MODEL ... --format json``: start-up, imports and the catalogue's YAML included). A benchmark, not a test: machine
load moves the numbers (the load average is printed with them).

    python benchmarks/bench_plan.py [--rounds 5] [--models llama-3.1-8b,llama-3.1-70b] [--training] [--cli]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import embedcalc

TARGET_S = 1.0


def timed(call: Callable[[], Any], rounds: int) -> tuple[list[float], Any]:
    times, result = [], None
    for _ in range(rounds):
        start = time.perf_counter()
        result = call()
        times.append(time.perf_counter() - start)
    return times, result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--models", default="llama-3.1-8b,llama-3.1-70b,mixtral-8x7b,deepseek-v3")
    parser.add_argument("--training", action="store_true", help="also time the training search")
    parser.add_argument("--max-devices", type=int, default=1024, help="training: devices at most")
    parser.add_argument("--cli", action="store_true", help="also time `embedcalc plan` as a fresh process")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    embedcalc.plan("gpt2", hardware=["h100-sxm"])  # warm-up: imports
    print(f"{'model':<16} {'mode':<9} {'layouts':>7} {'median':>9} {'slowest':>9}  within {TARGET_S:g} s")
    for model in args.models.split(","):
        config = embedcalc.load(model)
        runs: list[tuple[str, Callable[[], Any]]] = [
            ("serving", lambda c=config: embedcalc.plan(c, seq_len=2048, gen_tokens=256, concurrency=32))
        ]
        if args.training:
            runs.append(("training", lambda c=config: embedcalc.plan(
                c, mode="training", train_tokens=10**12, deadline_s=30 * 86400, max_devices=args.max_devices,
            )))  # fmt: skip
        if args.cli:
            argv = [sys.executable, "-m", "embedcalc", "plan", model, "--seq-len", "2048", "--gen-tokens", "256",
                    "--concurrency", "32", "--format", "json"]  # fmt: skip
            runs.append(("cli", lambda a=argv: subprocess.run(a, check=False, capture_output=True)))
        for mode, call in runs:
            times, result = timed(call, args.rounds)
            median = statistics.median(times)
            verdict = "yes" if median < TARGET_S else "NO"
            layouts = len(result.rows) if hasattr(result, "rows") else "-"
            print(f"{model:<16} {mode:<9} {layouts:>7} {median:>8.3f}s {max(times):>8.3f}s  {verdict}")


if __name__ == "__main__":
    main()
