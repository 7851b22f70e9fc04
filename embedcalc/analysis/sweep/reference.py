"""The per-config reference path of a sweep: one point evaluated the slow, obviously-correct way (pydantic
validation plus :func:`embedcalc.analysis.report.analyze`), that the vectorised grid of
:mod:`embedcalc.analysis.sweep` is tested and benchmarked against; both count through the same term functions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from embedcalc.analysis.report import analyze
from embedcalc.analysis.sweep.points import SweepBase
from embedcalc.analysis.workload import INFERENCE_ONLY_DTYPES, Workload, with_model_dtype
from embedcalc.config.advisories import workload_problems
from embedcalc.errors import ConfigError


def evaluate_point(base: SweepBase, point: Mapping[str, int], workload: Workload) -> dict[str, Any]:
    """One point the slow, obviously-correct way: validate with pydantic, then ``analyze()`` per mode.

    Returns the grid's column names (plus ``crossover_seq_len``) with Python ints, or ``{"problems": [...]}``.
    """
    try:
        config = base.config_at(point, tuple(point))
    except ConfigError as exc:
        return {"problems": exc.problems}
    # as the grid: the model's own dtype
    workload = with_model_dtype(workload, config.dtype, base.dtype_source)
    run = replace(
        workload,
        batch_size=int(point.get("batch_size", workload.batch_size)),
        seq_len=int(point.get("seq_len", workload.seq_len)),
    )
    errors, _ = workload_problems(config, run)
    if errors:
        return {"problems": errors}
    inference = analyze(base.target, config, replace(run, mode="inference"))
    out: dict[str, Any] = {
        "params": inference.params.total,
        "params_active": inference.active_params,
        "flops_forward": inference.flops.forward,
        "flops_attention_scores": inference.flops.attention_score_flops,
        "flops_other": inference.flops.forward - inference.flops.attention_score_flops,
        "flops_training_step": inference.flops.training_step,
        "inference_weights_bytes": inference.memory.weights_bytes,
        "inference_activations_bytes": inference.memory.activations_bytes,
        "kv_cache_bytes": inference.memory.kv_cache_bytes,
        "inference_total_bytes": inference.memory.total_bytes,
        "crossover_seq_len": inference.crossover_seq_len,
        "head_dim": config.derived()["head_dim"],
        "ffn_dim": config.resolved_ffn_dim,
    }
    if inference.flops.forward_causal is not None:
        out["flops_forward_causal"] = inference.flops.forward_causal
    if config.has_recurrent_state:
        out["recurrent_state_bytes"] = inference.memory.recurrent_state_bytes
        out["flops_recurrent_mixers"] = sum(v for k, v in inference.flops.breakdown.items() if "/mixer/" in k)
    if workload.dtype not in INFERENCE_ONLY_DTYPES:
        training = analyze(base.target, config, replace(run, mode="training")).memory
        out |= {
            "training_weights_bytes": training.weights_bytes,
            "gradients_bytes": training.gradients_bytes,
            "optimizer_bytes": training.optimizer_bytes,
            "training_activations_bytes": training.activations_bytes,
            "training_total_bytes": training.total_bytes,
        }
    return out
