"""How fast is `embedcalc analyze bert-large` next to a bare interpreter and next to counting with torch?

Runs three commands as fresh processes, alternating, for several rounds on the same machine, and prints per round
and in median: the wall time of each, `analyze` minus the bare interpreter (the target: within 0.3 s), and the
ratio of the torch route (build BertModel on the meta device + FlopCounterMode) to `analyze`.

    python benchmarks/bench_analyze.py [--rounds 7]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import embedcalc

TORCH_ROUTE = """
import torch
from torch.utils.flop_counter import FlopCounterMode
from transformers import BertConfig, BertModel
cfg = BertConfig(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096,
                 attn_implementation="eager")
with torch.device("meta"):
    model = BertModel(cfg)
    ids = torch.zeros(1, 128, dtype=torch.long)
params = sum(p.numel() for p in model.parameters())
with FlopCounterMode(display=False) as counter:
    model(ids)
print(params, counter.get_total_flops())
"""

COMMANDS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "embedcalc analyze bert-large": [
        sys.executable,
        "-m",
        "embedcalc",
        "analyze",
        "bert-large",
        "--format",
        "json",
    ],
    "torch meta + FlopCounterMode": [sys.executable, "-c", TORCH_ROUTE],
}


def wall(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    # byte-compile the package as `pip install` does for a wheel: with PYTHONDONTWRITEBYTECODE set (as on these
    # machines) an editable checkout would otherwise be recompiled from source on every start
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(Path(embedcalc.__file__).parent)], check=True
    )
    for cmd in COMMANDS.values():  # warm the OS file cache
        wall(cmd)
    names = list(COMMANDS)
    rows = []
    print(
        f"{'round':>5} "
        + " ".join(f"{n:>30}" for n in names)
        + f" {'analyze - bare':>15} {'torch/analyze':>14}"
    )
    for i in range(args.rounds):
        times = {n: wall(COMMANDS[n]) for n in names}
        over = times[names[1]] - times[names[0]]
        ratio = times[names[2]] / times[names[1]]
        rows.append((times, over, ratio))
        print(
            f"{i + 1:>5} "
            + " ".join(f"{times[n]:>29.3f}s" for n in names)
            + f" {over:>14.3f}s {ratio:>13.1f}x"
        )
    med = {n: statistics.median(r[0][n] for r in rows) for n in names}
    over = statistics.median(r[1] for r in rows)
    ratio = statistics.median(r[2] for r in rows)
    print(f"{'med':>5} " + " ".join(f"{med[n]:>29.3f}s" for n in names) + f" {over:>14.3f}s {ratio:>13.1f}x")
    print(
        f"analyze overhead over a bare interpreter: {over:.3f} s (target <= 0.300 s); "
        f"the torch route is {ratio:.1f}x slower than analyze"
    )


if __name__ == "__main__":
    main()
