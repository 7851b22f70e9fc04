"""``bench --memory-matrix``: predicted vs measured training-step memory for every ``--attention`` ×
``--recompute`` setting.

Each setting runs in its own Python process (``python -m embedcalc.api.memory_matrix``, the request as JSON on
stdin, the measurement as JSON on stdout), so that one run's peak cannot hide in another's: on the CPU the measure
is the growth of the process's peak resident set size, which only ever grows within a process.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from embedcalc.analysis.workload import Workload
from embedcalc.api.bench import RunOptions, bench_target
from embedcalc.api.workload import workload_of
from embedcalc.errors import EmbedcalcError, ExitCode

if TYPE_CHECKING:
    from embedcalc.reconcile.bench import MemoryMatrix

ATTENTIONS = ("sdpa", "eager")
RECOMPUTES = ("none", "selective", "full")

__all__ = ["ATTENTIONS", "RECOMPUTES", "bench_memory_matrix"]


def bench_memory_matrix(
    target: str, overrides: Sequence[str] | None, run: Workload, options: RunOptions
) -> MemoryMatrix:
    """One training step of ``run`` per setting, each with one warm-up step, in a fresh process; one row each."""
    from embedcalc.reconcile.bench import MemoryMatrix, MemoryMatrixRow

    base = replace(run, mode="training", gen_tokens=0)
    combos = [(a, r) for a in ATTENTIONS for r in RECOMPUTES]
    rows = []
    with options.progress(f"{target} memory matrix") as on_step:
        for i, (attention, recompute) in enumerate(combos):
            setting = replace(base, attention=attention, recompute=recompute)  # type: ignore[arg-type]
            measured = _in_fresh_process(target, overrides, setting, options)
            rows.append(MemoryMatrixRow.from_measurement(attention, recompute, measured))
            on_step("settings", i + 1, len(combos))
    return MemoryMatrix(target, tuple(rows))


def _in_fresh_process(
    target: str, overrides: Sequence[str] | None, run: Workload, options: RunOptions
) -> dict[str, Any]:
    """The ``measurement`` object of one bench in a new interpreter; its error, with its exit code, re-raised."""
    request = {"target": target, "overrides": list(overrides or []), "workload": run.as_dict(),
               "device": options.device, "threads": options.threads, "force": options.force}  # fmt: skip
    proc = subprocess.run([sys.executable, "-m", "embedcalc.api.memory_matrix"], input=json.dumps(request),
                          capture_output=True, text=True, check=False)  # fmt: skip
    try:
        answer: dict[str, Any] = json.loads(proc.stdout)
    except json.JSONDecodeError:
        last = proc.stderr.strip().splitlines()[-1:] or ["(no message)"]
        answer = {"error": last[0]}
    if proc.returncode == 0 and "measurement" in answer:
        measurement: dict[str, Any] = answer["measurement"]
        return measurement
    code = proc.returncode if proc.returncode in ExitCode._value2member_map_ else ExitCode.RUNTIME
    setting = f"--attention {run.attention} --recompute {run.recompute}"
    raise EmbedcalcError(f"bench {target} {setting} failed (exit {proc.returncode}): {answer.get('error')}",
                         ExitCode(code), code="bench_failed")  # fmt: skip


def _child() -> int:
    """One setting, as :func:`_in_fresh_process` asks for it."""
    request = json.loads(sys.stdin.read())
    options = RunOptions(
        request["device"], warmup=1, repeat=1, threads=request["threads"], force=request["force"]
    )
    try:
        result = bench_target(
            request["target"], request["overrides"], workload_of(None, request["workload"]), options
        )
    except EmbedcalcError as exc:
        sys.stdout.write(json.dumps({"error": exc.message}))
        return int(exc.exit_code)
    sys.stdout.write(json.dumps({"measurement": result.measurement.to_json()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(_child())
