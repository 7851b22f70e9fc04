"""``embedcalc sweep TARGET --seq-len ... --measure``: measured attention vs rest time beside the prediction.

The prediction is the FLOP split (attention-score FLOPs vs everything else) and the closed-form crossover n*;
the measurement times real forward passes with and without the attention core (embedcalc.modeling.measure).
"""

from __future__ import annotations

from typing import Any

import typer

from embedcalc.analysis.flops import forward_flops
from embedcalc.analysis.report import Analysis
from embedcalc.analysis.workload import Workload
from embedcalc.cli import output
from embedcalc.cli.analyze import analyze_target
from embedcalc.cli.torch_env import require_device, require_torch

METHOD = (
    "each seq_len: median of alternating forward passes with and without the attention core (Q·Kᵀ, softmax, ·V "
    "replaced by a pass-through); attention = full − without, rest = without"
)


def run_measure(
    target: str, overrides: list[str] | None, axes: dict[str, tuple[int, ...]], workload: Workload,
    device: str, repeat: int,
) -> dict[str, Any]:  # fmt: skip
    """Measure every --seq-len point (other axes must be single-valued); print a table; return the JSON part."""
    others = [a for a, v in axes.items() if a != "seq_len" and len(v) > 1]
    if "seq_len" not in axes or others:
        raise typer.BadParameter(
            "--measure times one model over --seq-len: give --seq-len values and at most one value for "
            f"{', '.join(others) or 'the other axes'}",
            param_hint="'--measure'",
        )
    require_torch()
    from embedcalc.modeling.timing import set_threads

    dev = require_device(device)  # before any work: cuda without CUDA is exit 4, as in bench
    from embedcalc.modeling.measure import measure_attention_split, measured_crossover
    from embedcalc.render.progress import step_progress

    fixed = [f"{a}={v[0]}" for a, v in axes.items() if a not in ("seq_len", "batch_size")]
    batch = axes.get("batch_size", (workload.batch_size,))[0]
    seq_lens = sorted(axes["seq_len"])
    base = Workload(
        batch_size=batch, seq_len=max(seq_lens), dtype=workload.dtype, attention=workload.attention
    )
    analysis: Analysis = analyze_target(target, [*(overrides or []), *fixed, "dropout=0.0"], base)
    dtype = workload.dtype if workload.dtype in ("float32", "bfloat16", "float16") else "float32"
    with step_progress(output.stderr, f"{target} attention split") as on_step:
        points = measure_attention_split(
            analysis.config, seq_lens, batch, dtype, workload.attention, dev, repeat=repeat, on_step=on_step
        )
    rows = []
    for p in points:
        flops = forward_flops(analysis.config, Workload(batch_size=batch, seq_len=p.seq_len))
        rows.append({
            "seq_len": p.seq_len, "full_s": p.full_s, "attention_s": p.attention_s, "rest_s": p.without_core_s,
            "measured_attention_share": p.attention_share, "predicted_attention_share": flops.attention_score_share,
        })  # fmt: skip
    crossover = measured_crossover(points)
    result = {
        "device": str(dev), "threads": set_threads(None), "method": METHOD, "points": rows,
        "measured_crossover_seq_len": crossover, "predicted_crossover_seq_len": analysis.crossover_seq_len,
    }  # fmt: skip
    return result


def print_measure(target: str, measured: dict[str, Any]) -> None:
    from embedcalc.render.tables import measure_table

    output.stdout.print(measure_table(target, measured))
