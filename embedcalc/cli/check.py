"""``embedcalc check TARGET...``: validate, print derived values and warnings; exit 3 if any target is invalid."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from embedcalc.cli import output
from embedcalc.cli.common import FormatOption, OutputFormat, SetOption, enforce_budget, handle_errors
from embedcalc.cli.options import flags
from embedcalc.cli.workload_options import BudgetFlags, ParallelFlags, WorkloadFlags
from embedcalc.errors import ExitCode, outcome

if TYPE_CHECKING:
    from embedcalc.api.check import TargetCheck


@handle_errors("check")
@flags
def check_command(
    targets: Annotated[
        list[str] | None,
        typer.Argument(
            help="Preset names or config files (YAML/JSON, or a Hugging Face config.json).",
            show_default=False,
        ),
    ] = None,
    *,
    overrides: SetOption = None,
    limits: BudgetFlags,
    run: WorkloadFlags,
    layout: ParallelFlags,
    suggest: Annotated[
        bool,
        typer.Option(
            "--suggest", help="For an invalid config, propose the nearest valid ones as --set lines."
        ),
    ] = False,
    format: FormatOption = OutputFormat.table,
) -> None:
    """Validate configs: each problem names the field, both values and a fix. Exit 3 if any is invalid.

    Prints the derived values (head_dim, FFN ratio, KV groups, ...) and warnings. A Hugging Face config.json
    also lists every key: mapped onto which field, or ignored and why; one of a family without a native mapping
    is valid when transformers builds it (torch and transformers installed: counted by its own class on the
    meta device, "reader": "transformers-meta"). With a budget (--max-params,
    --max-memory, --max-flops) exits 5 when a valid config exceeds it; memory and FLOPs are then those of the
    workload the options give, per device with --tp/--pp/--dp/--zero, as `analyze` reports them.
    """
    from embedcalc.api.check import check

    if not targets:
        raise typer.BadParameter(_no_target(overrides or []), param_hint="'TARGETS...'")
    report = check(targets, overrides, run.workload(layout), limits.budget(), suggest)
    for result in report.results:
        _render(result, format)
    problems, over = report.problems, report.over_budget
    if format is OutputFormat.json:
        # what budgets were judged on
        workload = report.workload.as_dict() if report.workload is not None else None
        status = "error" if problems or over else "ok"
        output.emit_json("check", report.to_json(), workload, problems + over, status)
    if problems:
        raise outcome(ExitCode.INVALID_CONFIG, "the config is invalid", "invalid_config")
    enforce_budget(over, json_emitted=format is OutputFormat.json)


def _render(result: TargetCheck, format: OutputFormat) -> None:
    """One target's lines on stderr (its error, or its warnings) and, as a table, its derived values."""
    if result.error is not None:
        output.report_error(result.error)
        if format is OutputFormat.table and result.suggestions is not None:
            _print_suggestions(result)
        return
    output.warn(result.warnings, result.target)
    if format is OutputFormat.table and result.general is not None:
        from embedcalc.api.general import NOT_NATIVE
        from embedcalc.render.config_tables import check_table

        g = result.general
        derived: dict[str, object] = {
            "reader": "transformers-meta",
            "counted by": f"{g.class_name} ({g.auto_class}), meta device",
        }
        why = next((n for n in g.notes if n.startswith(NOT_NATIVE)), None)
        if why is not None:  # handed over by the native reader: the line analyze prints too
            output.stderr.print(f"embedcalc: {result.target}: {why}", markup=False)
        if g.active_params is not None and g.experts:
            derived["active params"] = f"{g.active_params:,}"
        output.stdout.print(check_table(result.target, derived, g.params.total))
    elif format is OutputFormat.table and result.loaded is not None and result.analysis is not None:
        from embedcalc.render.config_tables import check_table, hf_mapping_table

        output.stdout.print(
            check_table(result.target, result.loaded.config.derived(), result.analysis.params.total)
        )
        if result.loaded.hf is not None:
            output.stdout.print(hf_mapping_table(result.target, result.loaded.hf))


def _print_suggestions(result: TargetCheck) -> None:
    rows = result.to_json()["suggestions"]
    if rows:
        from embedcalc.render.config_tables import suggestions_table

        output.stdout.print(suggestions_table(result.target, rows))
    else:
        output.stderr.print("embedcalc: no nearby valid config found to suggest", markup=False)


def _no_target(overrides: list[str]) -> str:
    """The usage error of ``check`` without a model: --set changes a model, it does not make one."""
    if not overrides:
        return "give one or more models to check: a preset (`embedcalc presets` lists them), a config file or a hub id"
    sets = " ".join(f"--set {o}" for o in overrides) or "--set embed_dim=1000 --set num_heads=12"
    fields = dict(o.split("=", 1) for o in overrides if "=" in o)
    heads = (f"; for the heads question alone, `embedcalc heads {fields['embed_dim']}` lists the head counts that "
             "divide it") if fields.get("embed_dim", "").isdigit() else ""  # fmt: skip
    return (f"name the model to check: --set changes a preset or config file, it does not make one, e.g. "
            f"`embedcalc check bert-base {sets}` (a YAML file with every field works too){heads}")  # fmt: skip
