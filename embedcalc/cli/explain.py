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
from typing import Annotated

import typer

from embedcalc.cli import output
from embedcalc.cli.common import FormatOption, OutputFormat, SetOption, handle_errors
from embedcalc.cli.options import flags, only
from embedcalc.cli.workload_options import WorkloadFlags


class Topic(StrEnum):
    heads = "heads"
    width_depth = "width-depth"
    fine_tune = "fine-tune"
    embed_dim = "embed-dim"
    cost = "cost"


class Language(StrEnum):
    en = "en"
    zh = "zh"


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
        typer.Option(
            "--lang", help="Language of the text; default from LANGUAGE, LC_ALL, LC_MESSAGES or LANG."
        ),
    ] = None,
    *,
    run: Annotated[WorkloadFlags, only("batch_size", "seq_len", "tgt_len", "dtype", "mode")],
    hardware: Annotated[
        str | None,
        typer.Option(
            "--hardware",
            metavar="NAMES",
            help="fine-tune: the devices to fit full fine-tuning, offload, LoRA and QLoRA on, comma-separated "
            "(`embedcalc hardware` lists them). Default: rtx-4090,h100-sxm.",
        ),
    ] = None,
    overrides: SetOption = None,
    format: FormatOption = OutputFormat.table,
) -> None:
    """Answer, on this config and workload: why num_heads must divide embed_dim and how to choose both (heads),
    how width and depth trade off (width-depth), whether embed_dim can change when fine-tuning and which
    fine-tuning method fits which device (fine-tune), what embed_dim is in this model (embed-dim), where compute
    and memory go (cost).

    Every number is computed on the config; --format json carries all of them. A config invalid because of its
    heads is still explained by the heads topic (exit 0; `check` exits 3 on it); other topics need a valid
    config (exit 3).
    """
    from embedcalc.api.explain import explain
    from embedcalc.render.i18n import language_from_env

    if topic is None and target in {t.value for t in Topic}:
        raise typer.BadParameter(
            f"{target!r} is a topic; name the model first, then the topic: `embedcalc explain bert-base {target}` "
            "(a preset, a config file or a hub id)",
            param_hint="'TARGET'",
        )
    language = lang.value if lang is not None else language_from_env(os.environ)
    workload = run.workload()
    devices = [n.strip() for n in hardware.split(",") if n.strip()] if hardware is not None else None
    if devices is not None and not devices:
        raise typer.BadParameter(
            "give one or more device names separated by commas", param_hint="'--hardware'"
        )
    result = explain(target, overrides, workload, [topic.value] if topic is not None else None, devices)
    output.warn(result.warnings, target)
    if result.narrowed:
        output.stderr.print(
            f"embedcalc: {target}: the config is invalid, so only the heads topic applies (it explains why)",
            markup=False,
        )
    answers, problems, label = result.answers, result.problems, result.label
    if format is OutputFormat.json:
        results = [
            {"target": target, "topic": t, "lang": language, "valid": result.valid,
             "config_problems": [p.as_dict() for p in problems], "answer": asdict(a)}
            for t, a in answers
        ]  # fmt: skip
        output.emit_json("explain", results, (result.workload or workload).as_dict())
        return
    from embedcalc.render.explain import render_answer
    from embedcalc.render.i18n import Messages

    messages = Messages(language)
    for t, a in answers:
        output.stdout.print(render_answer(t, a, messages, label, target, valid=result.valid))
