"""Points per second of the vectorised sweep grid against the per-config path, and the issue's 100k-point CLI run.

In one run, on the issue's grid (bert-base, --embed-dim 384:12288:+384 --num-layers 1:96:+1 --seq-len 64:16384:x2
--batch-size 1,2,4,8: 110,592 points):

1. the grid path: ``sweep_target`` (validity + numpy evaluation) over every point, int64 and forced Python-int;
2. the per-config path: ``evaluate_point`` (pydantic validation + ``analyze()`` for inference and training) on a
   random sample of points, extrapolated to points/s; the sample's values are checked against the grid;
3. the CSV rendering of the whole grid in-process;
4. the full command as a fresh process, ``embedcalc sweep ... --format csv > /dev/null`` (target: under 5 s).

    python benchmarks/bench_sweep.py [--sample 2000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import io
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from embedcalc.analysis.sweep import evaluate_point, parse_axis, sweep_target
from embedcalc.analysis.workload import Workload
from embedcalc.api.sweep import sweep_base as load_base
from embedcalc.cli.sweep import write_csv

TARGET = "bert-base"
FLAGS = {
    "embed_dim": ("--embed-dim", "384:12288:+384"),
    "num_layers": ("--num-layers", "1:96:+1"),
    "seq_len": ("--seq-len", "64:16384:x2"),
    "batch_size": ("--batch-size", "1,2,4,8"),
}
AXES = {axis: parse_axis(text) for axis, (_, text) in FLAGS.items()}
CLI = [sys.executable, "-m", "embedcalc", "sweep", TARGET, *(a for flag in FLAGS.values() for a in flag)]


def best_of(rounds: int, fn: Callable[[], Any]) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(rounds):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return min(times), result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sample", type=int, default=2000, help="points evaluated on the per-config path")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    workload = Workload()

    base = load_base(TARGET)
    grid_s, result = best_of(args.rounds, lambda: sweep_target(base, AXES, workload))
    size = result.size
    slow_grid_s, _ = best_of(1, lambda: sweep_target(base, AXES, workload, force_python_ints=True))
    csv_s, _ = best_of(args.rounds, lambda: write_csv(result, io.StringIO()))

    rng = random.Random(0)
    sample = rng.sample(range(size), min(args.sample, size))
    points = [{a: result.axes[a][result.index[a][i]] for a in result.axes} for i in sample]
    start = time.perf_counter()
    reference = [evaluate_point(base, p, workload) for p in points]
    per_config_s = time.perf_counter() - start
    mismatches = 0
    for i, ref in zip(sample, reference, strict=True):
        if "problems" in ref:
            mismatches += bool(result.valid[i])
            continue
        assert result.grid is not None
        mismatches += any(int(result.grid[k][i]) != v for k, v in ref.items() if k != "crossover_seq_len")

    cli_times = []
    for _ in range(args.rounds):
        start = time.perf_counter()
        subprocess.run(
            [*CLI, "--format", "csv"], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        cli_times.append(time.perf_counter() - start)

    print(f"grid: {size:,} points ({int(result.valid.sum()):,} valid), {TARGET} " + " ".join(CLI[5:]))
    print(f"  grid path, int64       {grid_s * 1e3:9.1f} ms  {size / grid_s:>14,.0f} points/s")
    print(f"  grid path, Python ints {slow_grid_s * 1e3:9.1f} ms  {size / slow_grid_s:>14,.0f} points/s")
    per_point = per_config_s / len(points)
    print(
        f"  per-config path        {per_point * 1e6:9.1f} µs/point {1 / per_point:>10,.0f} points/s "
        f"({len(points):,} sampled points; {size * per_point:.1f} s for the whole grid)"
    )
    print(f"  speed-up (int64 grid / per-config): {(size / grid_s) * per_point:,.0f}x")
    print(f"  sampled points that differ from the grid: {mismatches}")
    print(f"  CSV rendering in-process: {csv_s * 1e3:.0f} ms")
    print(
        f"  `embedcalc sweep ... --format csv > /dev/null` as a fresh process: median "
        f"{statistics.median(cli_times):.2f} s, best {min(cli_times):.2f} s (target < 5 s)"
    )
    if mismatches:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
