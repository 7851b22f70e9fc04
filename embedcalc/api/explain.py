"""``explain``: the questions the tool grew from (DESIGN.md §12), answered on the user's config and workload.

Each topic's answer is computed by :mod:`embedcalc.analysis.explain` and its siblings; this module picks the topics,
and answers the heads topic even for a config invalid only in its heads (explaining that failure is what was
asked for), from the unvalidated mapping. Every other topic needs a valid config (the validation error is raised).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from embedcalc.analysis.workload import Workload
from embedcalc.api.analyze import analyze_target
from embedcalc.errors import ConfigError, Problem

if TYPE_CHECKING:
    from embedcalc.analysis.explain import HeadShape
    from embedcalc.config.resolved import ResolvedShape

# validation problems the heads topic explains (DESIGN.md §3: the head split of the width)
HEAD_PROBLEMS = frozenset({"heads_indivisible", "kv_heads_indivisible", "rope_head_dim_odd"})

__all__ = ["HEAD_PROBLEMS", "Explanation", "explain", "head_shape_from_raw"]


@dataclass(frozen=True)
class Explanation:
    """The answers, one per topic, on ``config`` (None when it is invalid in its heads: then the heads topic alone,
    with the ``problems`` that make it invalid; ``narrowed`` when more topics were asked for)."""

    target: str
    config: ResolvedShape | None
    answers: list[tuple[str, Any]]
    problems: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)
    narrowed: bool = False
    workload: Workload | None = None  # as answered: in the model's own dtype unless one was chosen

    @property
    def valid(self) -> bool:
        return self.config is not None

    @property
    def label(self) -> str:
        return self.config.label if self.config is not None else self.target


def _positive_int(raw: dict[str, Any], key: str, default: int | None = None) -> int | None:
    value = raw.get(key, default)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def head_shape_from_raw(raw: dict[str, Any]) -> HeadShape | None:
    """The heads topic's numbers from an unvalidated mapping, or None if they are not all positive integers."""
    from embedcalc.analysis.explain import HeadShape

    d, h = _positive_int(raw, "embed_dim"), _positive_int(raw, "num_heads")
    layers = _positive_int(raw, "num_layers")
    if d is None or h is None or layers is None:
        return None
    kv = _positive_int(raw, "num_kv_heads", h) if raw.get("num_kv_heads") is not None else h
    decoder = _positive_int(raw, "num_decoder_layers", layers) if raw.get("num_decoder_layers") else layers
    arch = raw.get("architecture")
    if kv is None or decoder is None or arch not in ("encoder", "decoder", "encoder-decoder"):
        return None
    head_dim = raw.get("head_dim")
    return HeadShape(
        embed_dim=d,
        num_heads=h,
        num_kv_heads=kv,
        head_dim=head_dim if isinstance(head_dim, int) and not isinstance(head_dim, bool) else None,
        num_layers=layers + (decoder if arch == "encoder-decoder" else 0),
        cache_layers={"encoder": 0, "decoder": layers, "encoder-decoder": decoder}[arch],
        rope=raw.get("position") == "rope",
    )


def _presets() -> list[tuple[str, ResolvedShape]]:
    from embedcalc.sources.loading import load_target
    from embedcalc.sources.presets import preset_names

    return [(name, load_target(name).config) for name in preset_names()]


# the devices explain fine-tune compares when none is named: the two sizes people ask about, a 24 GB consumer GPU
# and an 80 GB datacenter one
FINE_TUNE_DEVICES = ("rtx-4090", "h100-sxm")


def _methods(
    config: ResolvedShape, workload: Workload, hardware: Sequence[str] | None
) -> tuple[list[Any], dict[str, Any]]:
    """Full, full with the optimizer offloaded, LoRA and QLoRA (peft's defaults: r 8 on the family's default
    targets) on each device, for one step of the workload's batch and tokens (``plan --mode training --peft``'s
    search, :mod:`embedcalc.analysis.plan.finetune`)."""
    from embedcalc.analysis.explain import MethodFit
    from embedcalc.analysis.finetune.adapters import FinetuneSpec
    from embedcalc.api.finetune import FinetuneOptions
    from embedcalc.api.finetune_plan import plan_finetune

    dtype = workload.dtype if workload.dtype in ("bf16", "fp16", "fp32") else "bf16"
    plan = plan_finetune(config, FinetuneOptions(FinetuneSpec("lora")), train_tokens=workload.batch_size
                         * workload.seq_len, seq_len=workload.seq_len, batch_size=workload.batch_size, dtype=dtype,
                         hardware=list(hardware or FINE_TUNE_DEVICES))  # fmt: skip
    order = {name: i for i, name in enumerate(hardware or FINE_TUNE_DEVICES)}
    rows = sorted(plan.rows, key=lambda r: (order.get(r.device, len(order)), r.method))
    fits = [MethodFit(r.device, r.method, r.fits, r.memory_bytes, r.memory_limit_bytes or 0, r.recompute,
                      r.trainable_params, r.step_s, r.reasons[0] if r.reasons else None) for r in rows]  # fmt: skip
    used = {"batch_size": workload.batch_size, "seq_len": workload.seq_len, "dtype": dtype}
    return fits, used


def _answer(
    topic: str, config: ResolvedShape, workload: Workload, hardware: Sequence[str] | None = None
) -> Any:
    from embedcalc.analysis.explain import (
        HeadShape,
        explain_cost,
        explain_embed_dim,
        explain_fine_tune,
        explain_heads,
        explain_width_depth,
    )

    if topic == "heads":
        return explain_heads(HeadShape.of(config), workload, config)
    if topic == "width-depth":
        return explain_width_depth(config, workload, _presets(), config.label)
    if topic == "fine-tune":
        from dataclasses import replace

        methods, used = _methods(config, workload, hardware)
        return replace(explain_fine_tune(config), methods=methods, method_workload=used)
    if topic == "embed-dim":
        return explain_embed_dim(config, workload)
    return explain_cost(config, workload)


def explain(
    target: str,
    overrides: Sequence[str] | None,
    run: Workload,
    topics: Sequence[str] | None = None,
    hardware: Sequence[str] | None = None,
) -> Explanation:
    """``embedcalc explain TARGET [TOPIC]``: ``topics`` (default every one of
    :data:`embedcalc.analysis.explain.TOPICS`) answered on TARGET with ``--set``; ``hardware``: the devices the
    fine-tune topic fits the methods on (default :data:`FINE_TUNE_DEVICES`)."""
    from embedcalc.analysis.explain import TOPICS

    asked = list(topics) if topics else list(TOPICS)
    config: ResolvedShape | None = None
    try:
        analysis = analyze_target(target, overrides, run)
        config, run = analysis.config, analysis.workload  # the model's own dtype unless --dtype
        answers = [(t, _answer(t, config, run, hardware)) for t in asked]
    except ConfigError as error:
        if config is not None:
            raise
        return _invalid_heads(target, overrides, error, asked, run)
    return Explanation(target, config, answers, warnings=analysis.warnings, workload=run)


def _invalid_heads(
    target: str, overrides: Sequence[str] | None, error: ConfigError, topics: list[str], run: Workload
) -> Explanation:
    """The heads answer for a config invalid only in its heads; re-raise ``error`` for anything else."""
    from embedcalc.analysis.explain import explain_heads
    from embedcalc.sources.loading import raw_config

    codes = {p.code for p in error.problems}
    if (len(topics) == 1 and topics != ["heads"]) or not codes or not codes <= HEAD_PROBLEMS:
        raise error
    shape = head_shape_from_raw(raw_config(target, list(overrides or [])))
    if shape is None:
        raise error
    return Explanation(
        target, None, [("heads", explain_heads(shape, run))], error.problems, narrowed=len(topics) > 1
    )
