"""``embedcalc explain TARGET [TOPIC]``: the questions the tool grew from, answered on the user's config (§12).

Exit codes: 0 when the explanation was given, including the heads topic on a config that is invalid because of
its heads (``--set num_heads=10`` on a 768-wide model): explaining that failure is what was asked for, and the
panel says the config is invalid (``check`` exits 3 on it). Every other topic needs a valid config and exits 3
with the validation error; without TOPIC, such a config gets the heads topic alone (and a note on stderr).
"""

from __future__ import annotations

import os
from dataclasses import asdict
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import typer

from embedcalc.cli import output
from embedcalc.cli.common import FormatOption, OutputFormat, SetOption, analyze_target, handle_errors
from embedcalc.cli.options import WorkloadFlags, flags, only
from embedcalc.errors import ConfigError, Problem

if TYPE_CHECKING:  # the answers load when a question is asked (`embedcalc --help` needs only the options)
    from embedcalc.analysis.explain_heads import HeadShape
    from embedcalc.analysis.workload import Workload
    from embedcalc.config.schema import ModelConfig

# validation problems the heads topic explains (DESIGN.md §3: the head split of the width)
HEAD_PROBLEMS = frozenset({"heads_indivisible", "kv_heads_indivisible", "rope_head_dim_odd"})


class Topic(StrEnum):
    heads = "heads"
    width_depth = "width-depth"
    fine_tune = "fine-tune"
    embed_dim = "embed-dim"
    cost = "cost"


class Language(StrEnum):
    en = "en"
    zh = "zh"


def _positive_int(raw: dict[str, Any], key: str, default: int | None = None) -> int | None:
    value = raw.get(key, default)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def head_shape_from_raw(raw: dict[str, Any]) -> HeadShape | None:
    """The heads topic's numbers from an unvalidated mapping, or None if they are not all positive integers."""
    from embedcalc.analysis.explain_heads import HeadShape

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


def _presets() -> list[tuple[str, ModelConfig]]:
    from embedcalc.config.loading import load_target
    from embedcalc.config.presets import preset_names

    return [(name, load_target(name).config) for name in preset_names()]


def _answer(topic: str, config: ModelConfig, workload: Workload) -> Any:
    from embedcalc.analysis.explain import explain_cost, explain_width_depth
    from embedcalc.analysis.explain_heads import HeadShape, explain_heads
    from embedcalc.analysis.explain_weights import explain_embed_dim, explain_fine_tune

    if topic == "heads":
        return explain_heads(HeadShape.of(config), workload, config)
    if topic == "width-depth":
        return explain_width_depth(config, workload, _presets(), config.label)
    if topic == "fine-tune":
        return explain_fine_tune(config)
    if topic == "embed-dim":
        return explain_embed_dim(config, workload)
    return explain_cost(config, workload)


def _invalid_heads(
    target: str, overrides: list[str] | None, error: ConfigError, topics: list[str], workload: Workload
) -> tuple[Any, list[Problem]]:
    """The heads answer for a config invalid only in its heads; re-raise ``error`` for anything else."""
    from embedcalc.analysis.explain_heads import explain_heads
    from embedcalc.config.loading import raw_config

    codes = {p.code for p in error.problems}
    if (len(topics) == 1 and topics != ["heads"]) or not codes or not codes <= HEAD_PROBLEMS:
        raise error
    shape = head_shape_from_raw(raw_config(target, overrides))
    if shape is None:
        raise error
    if len(topics) > 1:
        output.stderr.print(
            f"embedcalc: {target}: the config is invalid, so only the heads topic applies (it explains why)",
            markup=False,
        )
    return explain_heads(shape, workload), error.problems


@handle_errors("explain")
@flags
def explain_command(
    target: Annotated[str, typer.Argument(help="Preset name or config file (YAML/JSON).")],
    topic: Annotated[
        Topic | None,
        typer.Argument(help="heads, width-depth, fine-tune, embed-dim or cost; all of them when omitted."),
    ] = None,
    lang: Annotated[
        Language | None,
        typer.Option("--lang", help="Language of the text; default from LANGUAGE/LC_ALL/LC_MESSAGES/LANG."),
    ] = None,
    *,
    run: Annotated[WorkloadFlags, only("batch_size", "seq_len", "tgt_len", "dtype", "mode")],
    overrides: SetOption = None,
    format: FormatOption = OutputFormat.table,
) -> None:
    """Answer, on this config and workload: why num_heads must divide embed_dim and how to choose both (heads),
    how width and depth trade off (width-depth), whether embed_dim can change when fine-tuning (fine-tune), what
    embed_dim is in this model (embed-dim), where compute and memory go (cost).

    Every number is computed on the config; --format json carries all of them. A config invalid because of its
    heads is still explained by the heads topic (exit 0; `check` exits 3 on it); other topics need a valid
    config (exit 3).
    """
    from embedcalc.analysis.explain import TOPICS
    from embedcalc.render.i18n import language_from_env

    language = lang.value if lang is not None else language_from_env(os.environ)
    workload = run.workload()
    topics = [topic.value] if topic is not None else list(TOPICS)
    problems: list[Problem] = []
    config: ModelConfig | None = None
    try:
        config = analyze_target(target, overrides, workload).config
        answers = [(t, _answer(t, config, workload)) for t in topics]
    except ConfigError as error:
        if config is not None:
            raise
        heads, problems = _invalid_heads(target, overrides, error, topics, workload)
        answers = [("heads", heads)]
    label = config.label if config is not None else target
    if format is OutputFormat.json:
        results = [
            {"target": target, "topic": t, "lang": language, "valid": config is not None,
             "config_problems": [p.as_dict() for p in problems], "answer": asdict(a)}
            for t, a in answers
        ]  # fmt: skip
        output.emit_json("explain", results, workload.as_dict())
        return
    from embedcalc.render.explain import render_answer
    from embedcalc.render.i18n import Messages

    messages = Messages(language)
    for t, a in answers:
        output.stdout.print(render_answer(t, a, messages, label, target, valid=config is not None))
