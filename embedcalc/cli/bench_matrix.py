"""``embedcalc bench TARGET --memory-matrix``: predicted vs measured training-step memory per setting.

Each --attention × --recompute combination runs as its own ``embedcalc bench --mode training --repeat 1``
process, so that one run's peak cannot hide in another's (on the CPU the measure is the growth of the process's
peak resident set size, which only ever grows within a process).
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from embedcalc.cli import output
from embedcalc.cli.common import OutputFormat
from embedcalc.errors import EmbedcalcError, ExitCode
from embedcalc.reconcile.bench import MemoryMatrix, MemoryMatrixRow

ATTENTIONS = ("sdpa", "eager")
RECOMPUTES = ("none", "selective", "full")


def _one(args: list[str]) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "embedcalc", "bench", *args], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        last = proc.stderr.strip().splitlines()[-1:] or ["(no message)"]
        raise EmbedcalcError(
            f"bench {' '.join(args)} failed (exit {proc.returncode}): {last[0]}", ExitCode(proc.returncode)
            if proc.returncode in ExitCode._value2member_map_ else ExitCode.RUNTIME, code="bench_failed",
        )  # fmt: skip
    result: dict[str, Any] = json.loads(proc.stdout)["results"][0]
    return result


def run_memory_matrix(
    target: str, overrides: list[str] | None, device: str, dtype: str, batch_size: int, seq_len: int,
    tgt_len: int | None, threads: int | None, force: bool, format: OutputFormat,
) -> None:  # fmt: skip
    """Run every setting, then print one table (or JSON) of predicted vs measured peak memory."""
    base = [target, "--mode", "training", "--device", device, "--dtype", dtype, "--batch-size", str(batch_size),
            "--seq-len", str(seq_len), "--repeat", "1", "--warmup", "1", "--format", "json"]  # fmt: skip
    if tgt_len is not None:
        base += ["--tgt-len", str(tgt_len)]
    if threads is not None:
        base += ["--threads", str(threads)]
    if force:
        base.append("--force")
    for item in overrides or []:
        base += ["--set", item]
    rows = []
    from embedcalc.render.progress import step_progress

    combos = [(a, r) for a in ATTENTIONS for r in RECOMPUTES]
    with step_progress(output.stderr, f"{target} memory matrix") as on_step:
        for i, (attention, recompute) in enumerate(combos):
            measured = _one([*base, "--attention", attention, "--recompute", recompute])["measurement"]
            rows.append(MemoryMatrixRow.from_measurement(attention, recompute, measured))
            on_step("settings", i + 1, len(combos))
    matrix = MemoryMatrix(target, tuple(rows))
    if format is OutputFormat.json:
        output.emit_json("bench", [matrix.to_json()])
        return
    from embedcalc.render.bench import memory_matrix_table

    output.stdout.print(memory_matrix_table(matrix))
