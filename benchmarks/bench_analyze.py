"""How fast is `embedcalc analyze bert-large --format json` next to its own dependencies and next to counting with
torch?

Runs the commands as fresh processes in paired rounds on the same machine (the baseline and `analyze` back to
back, their order alternating from round to round, so a change in machine load hits both alike), and prints per
round and in median: the wall time of each, `analyze` minus the baseline `python -c 'import typer, pydantic,
yaml, rich'` (embedcalc's own import and work: the start-up target of issue 22, within 0.1 s), `analyze` over that
baseline as a ratio (the number to quote: load on a shared machine moves both), and how many times slower the
torch route (build BertModel on the meta device + FlopCounterMode) is.

    python benchmarks/bench_analyze.py [--rounds 9] [--no-torch] [--importtime] [--callgrind]

``--importtime`` also prints the 15 slowest imports of one `analyze` run (``python -X importtime``), the list to
cut from when the difference grows. ``--callgrind`` also counts the instructions of one run of each under valgrind's
callgrind: a number the machine's load does not move, to compare two trees on a shared machine. Compare two trees
by running it with ``PYTHONPATH=<tree>``.

Each round also runs `analyze` once instrumented (:data:`PHASES`) and splits its CPU time (user + system of that
process, which the load of a shared machine moves far less than wall time; each phase is also given as a multiple
of the first, which the load moves less still) into four phases: the dependencies' import (the baseline's own
work); embedcalc's entry point (``embedcalc.cli.app``, and what ``main`` sets first: the stand-in for pydantic's
plugin loader, the collector's threshold); the rest of embedcalc's own import on the path (the `analyze` command
module and the API it calls); and the run (typer's parse, load, analysis, JSON). pydantic's model machinery,
which ``import pydantic`` defers to the first model class or TypeAdapter, is no phase: the preset's path builds
neither (a shipped preset is its record, embedcalc/config/record_base.py; typer's adapters, embedcalc/cli/startup.py),
and the instrumented process says so on its last line if that changes.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

TARGET_S = 0.1  # over the dependencies' own import (issue 22; issue 14's 0.2 s was over a bare interpreter)

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

# One instrumented `analyze` process: CPU seconds at each phase boundary (see the module docstring), on stderr.
PHASES = """
import gc, os, sys, time
marks = [time.process_time()]
import typer, pydantic, yaml, rich
marks.append(time.process_time())
import embedcalc.cli.app
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")  # what main() does first
embedcalc.cli.startup.skip_plugin_discovery()
gc.set_threshold(embedcalc.cli.startup.GC_THRESHOLD, *gc.get_threshold()[1:])
marks.append(time.process_time())
import embedcalc.cli.analyze, embedcalc.api.analyze
marks.append(time.process_time())
sys.argv = ["embedcalc", *sys.argv[1:]]
try:
    embedcalc.cli.app.main()
except SystemExit:
    pass
marks.append(time.process_time())
print(*(b - a for a, b in zip(marks, marks[1:])), file=sys.stderr)
print("pydantic.main" in sys.modules, file=sys.stderr)
"""
PHASE_NAMES = ("dependencies' import", "the entry point (embedcalc.cli.app)",
               "embedcalc's own import (analyze, the API)", "the run (parse, load, analysis, JSON)")  # fmt: skip
OWN = (1, 2)  # the phases that are embedcalc's own import

DEPS = "import typer, pydantic, yaml, rich"
ANALYZE = "embedcalc analyze bert-large"
TORCH = "torch meta + FlopCounterMode"
ANALYZE_ARGS = ["-m", "embedcalc", "analyze", "bert-large", "--format", "json"]


def wall(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def phases() -> tuple[list[float], bool]:
    """CPU seconds of each of :data:`PHASE_NAMES` in one instrumented `analyze` process, and whether it loaded
    pydantic's model machinery."""
    proc = subprocess.run(
        [sys.executable, "-c", PHASES, *ANALYZE_ARGS[2:]], capture_output=True, text=True, check=True
    )
    *seconds, machinery = proc.stderr.split()[-len(PHASE_NAMES) - 1 :]
    return [float(x) for x in seconds], machinery == "True"


def slowest_imports(count: int = 15) -> list[str]:
    """The ``count`` imports with the largest cumulative time in one `analyze` run."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", *ANALYZE_ARGS], capture_output=True, text=True, check=True
    )
    rows = [line for line in proc.stderr.splitlines() if line.startswith("import time:") and "|" in line]
    timed = [row for row in rows if row.split("|")[1].strip().isdigit()]
    return sorted(timed, key=lambda row: int(row.split("|")[1]))[-count:]


def instructions(cmd: list[str]) -> int:
    """Instructions one run of ``cmd`` executes, counted by valgrind's callgrind (deterministic under load)."""
    import re
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/out", *cmd],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
    match = re.search(r"Collected : (\d+)", proc.stderr)
    if match is None:
        raise RuntimeError(f"no instruction count in callgrind's output: {proc.stderr[-500:]}")
    return int(match[1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument(
        "--no-torch", action="store_true", help="Skip the torch route (faster; no torch needed)."
    )
    parser.add_argument(
        "--importtime", action="store_true", help="Also list the slowest imports of `analyze`."
    )
    parser.add_argument(
        "--callgrind", action="store_true", help="Also count instructions under valgrind (needs valgrind)."
    )
    args = parser.parse_args()
    commands = {DEPS: [sys.executable, "-c", "import typer, pydantic, yaml, rich"],
                ANALYZE: [sys.executable, *ANALYZE_ARGS]}  # fmt: skip
    if not args.no_torch:
        commands[TORCH] = [sys.executable, "-c", TORCH_ROUTE]
    # byte-compile the package as `pip install` does for a wheel: with PYTHONDONTWRITEBYTECODE set (as on these
    # machines) an editable checkout would otherwise be recompiled from source on every start
    package = subprocess.run(
        [sys.executable, "-c", "import embedcalc; print(embedcalc.__file__)"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(Path(package).parent)], check=True)
    print(f"embedcalc from {Path(package).parent}; {os.cpu_count()} CPUs; load {os.getloadavg()[0]:.2f}")
    for cmd in commands.values():  # warm the OS file cache
        wall(cmd)
    names = list(commands)
    rows = []
    cpu = []
    loaded_machinery = False
    print(
        f"{'round':>5} "
        + " ".join(f"{n:>29}" for n in names)
        + f" {'analyze - deps':>15} {'analyze/deps':>13}"
    )
    for i in range(args.rounds):
        order = names if i % 2 == 0 else [names[1], names[0], *names[2:]]
        times = {n: wall(commands[n]) for n in order}
        rows.append(times)
        split, machinery = phases()
        cpu.append(split)
        loaded_machinery = loaded_machinery or machinery
        over = times[ANALYZE] - times[DEPS]
        print(
            f"{i + 1:>5} " + " ".join(f"{times[n]:>28.3f}s" for n in names)
            + f" {over:>14.3f}s {times[ANALYZE] / times[DEPS]:>12.2f}x"
        )  # fmt: skip
    med = {n: statistics.median(r[n] for r in rows) for n in names}
    over = statistics.median(r[ANALYZE] - r[DEPS] for r in rows)
    ratio = statistics.median(r[ANALYZE] / r[DEPS] for r in rows)
    print(f"{'med':>5} " + " ".join(f"{med[n]:>28.3f}s" for n in names) + f" {over:>14.3f}s {ratio:>12.2f}x")
    verdict = "within" if over <= TARGET_S else "over"
    print(
        f"analyze - its dependencies' import (median of paired rounds): {over:.3f} s, {verdict} the "
        f"{TARGET_S:.1f} s target; analyze / dependencies: {ratio:.2f}x"
    )
    split = [statistics.median(r[k] for r in cpu) for k in range(len(PHASE_NAMES))]
    print(f"CPU time of one `analyze` process, median of {len(cpu)} (phases of the module docstring):")
    for name, seconds in zip(PHASE_NAMES, split, strict=True):
        print(f"  {name:<56} {seconds * 1000:7.1f} ms {seconds / split[0]:5.2f}x the dependencies' import")
    own = sum(split[k] for k in OWN)
    print(
        f"  over the dependencies' import: {sum(split[1:]) * 1000:.1f} ms, of which embedcalc's own import "
        f"{own * 1000:.1f} ms"
    )
    if loaded_machinery:
        print("  note: the instrumented run loaded pydantic's model machinery (pydantic.main): something on the path "
              "now builds a model or a TypeAdapter")  # fmt: skip
    if TORCH in med:
        torch_ratio = statistics.median(r[TORCH] / r[ANALYZE] for r in rows)
        print(f"the torch route is {torch_ratio:.1f}x slower than analyze")
    if args.callgrind:
        deps, analyze = instructions(commands[DEPS]), instructions(commands[ANALYZE])
        print(
            f"instructions (callgrind): dependencies {deps / 1e6:,.1f} M, analyze {analyze / 1e6:,.1f} M, "
            f"analyze - deps {(analyze - deps) / 1e6:,.1f} M, analyze / deps {analyze / deps:.2f}x"
        )
    if args.importtime:
        print("slowest imports of one `analyze` run (self us | cumulative us | module):")
        for row in slowest_imports():
            print("  " + row.removeprefix("import time:").strip())


if __name__ == "__main__":
    main()
