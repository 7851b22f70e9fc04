"""``embedcalc sweep TARGET --seq-len ... --measure``: measured attention vs rest time beside the prediction.

The prediction is the FLOP split (attention-score FLOPs vs everything else) and the closed-form crossover n*;
the measurement times real forward passes with and without the attention core (embedcalc.modeling.measure);
:mod:`embedcalc.reconcile.attention_split` puts the two side by side.
"""

from __future__ import annotations

import typer

from embedcalc.analysis.report import Analysis
from embedcalc.analysis.workload import Workload
from embedcalc.cli import output
from embedcalc.cli.analyze import analyze_target
from embedcalc.cli.torch_env import require_device, require_torch
from embedcalc.reconcile.attention_split import AttentionSplit, attention_split


def measure_split(
    target: str, overrides: list[str] | None, axes: dict[str, tuple[int, ...]], workload: Workload,
    device: str, repeat: int,
) -> AttentionSplit:  # fmt: skip
    """Measure every --seq-len point (other axes must be single-valued) beside the predicted split."""
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
    from embedcalc.modeling.measure import measure_attention_split
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
    return attention_split(analysis, points, batch, str(dev), set_threads(None))


def print_measure(target: str, measured: AttentionSplit) -> None:
    """Print the measured split beside the prediction."""
    from embedcalc.render.tables import measure_table

    output.stdout.print(measure_table(target, measured))
