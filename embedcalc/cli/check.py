"""``embedcalc check TARGET...``: validate, print derived values and warnings; exit 3 if any target is invalid."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from embedcalc.cli import output
from embedcalc.cli.common import (
    FormatOption,
    OutputFormat,
    SetOption,
    budget_problems,
    enforce_budget,
    handle_errors,
    load,
)  # fmt: skip
from embedcalc.cli.options import BudgetFlags, ParallelFlags, WorkloadFlags, flags
from embedcalc.errors import ConfigError, ExitCode, Problem, outcome


@handle_errors("check")
@flags
def check_command(
    targets: Annotated[
        list[str],
        typer.Argument(help="Preset names or config files (YAML/JSON, or a Hugging Face config.json)."),
    ],
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
    also lists every key: mapped onto which field, or ignored and why. With a budget (--max-params,
    --max-memory, --max-flops) exits 5 when a valid config exceeds it; memory and FLOPs are then those of the
    workload the options give, per device with --tp/--pp/--dp/--zero, as `analyze` reports them.
    """
    from embedcalc.analysis.report import analyze
    from embedcalc.config.checks import config_warnings, workload_problems

    workload = run.workload(layout)
    budget = limits.budget()
    results: list[dict[str, Any]] = []
    problems: list[Problem] = []
    over: list[Problem] = []
    for target in targets:
        try:
            loaded = load(target, overrides)
        except ConfigError as exc:
            output.report_error(exc)
            problems += [Problem(f"{target}: {p.path}", p.message, p.code) for p in exc.problems]
            entry: dict[str, Any] = {
                "target": target, "valid": False, "problems": [p.as_dict() for p in exc.problems]
            }  # fmt: skip
            if suggest:
                entry["suggestions"] = _suggestions(target, overrides, format)
            results.append(entry)
            continue
        workload_errors, workload_warnings = workload_problems(loaded.config, workload)
        if workload_errors and not budget.empty:  # the budget is judged on this workload: it must be possible
            output.report_error(
                ConfigError(
                    f"{target}: the workload does not fit the config\n"
                    + "\n".join(f"  {p.message}" for p in workload_errors),
                    workload_errors,
                )
            )
            problems += [Problem(f"{target}: {p.path}", p.message, p.code) for p in workload_errors]
            results.append(
                {"target": target, "valid": False, "problems": [p.as_dict() for p in workload_errors]}
            )
            continue
        warnings = config_warnings(loaded.config, loaded.user_keys, published=loaded.source != "file")
        if not budget.empty:
            warnings += workload_warnings
        output.warn(warnings, target)
        result = analyze(target, loaded.config, workload, warnings)
        if not budget.empty:
            over += budget_problems(budget, [result])
        derived = loaded.config.derived()
        results.append(
            {
                "target": target, "valid": True, "config": loaded.config.model_dump(mode="json"),
                "derived": derived, "params": {"total": result.params.total},
                "warnings": [w.as_dict() for w in warnings],
            }
            | ({"hf": loaded.hf.as_dict()} if loaded.hf is not None else {})
        )  # fmt: skip
        if format is OutputFormat.table:
            from embedcalc.render.config_tables import check_table, hf_mapping_table

            output.stdout.print(check_table(target, derived, result.params.total))
            if loaded.hf is not None:
                output.stdout.print(hf_mapping_table(target, loaded.hf))
    if format is OutputFormat.json:
        workload_json = (
            workload.as_dict() if not budget.empty else None
        )  # the workload budgets were judged on
        status = "error" if problems or over else "ok"
        output.emit_json("check", results, workload_json, problems + over, status)
    if problems:
        raise outcome(ExitCode.INVALID_CONFIG, "the config is invalid", "invalid_config")
    enforce_budget(over, json_emitted=format is OutputFormat.json)


def _suggestions(target: str, overrides: list[str] | None, format: OutputFormat) -> list[dict[str, Any]]:
    """Nearest valid alternatives, printed (table) and returned (JSON)."""
    from embedcalc.analysis.suggest import suggest as suggest_fixes
    from embedcalc.config.loading import load_target, raw_config

    try:
        raw = raw_config(target, overrides)
    except ConfigError:
        return []  # the file itself is unreadable: nothing to suggest
    found = suggest_fixes(raw, lambda extra: load_target(target, [*(overrides or []), *extra]).config)
    rows = [{"set": list(s.overrides), "command_line": s.set_line, "params": s.params,
             "delta_params": s.delta_params} for s in found]  # fmt: skip
    if format is OutputFormat.table:
        from embedcalc.render.config_tables import suggestions_table

        if rows:
            output.stdout.print(suggestions_table(target, rows))
        else:
            output.stderr.print("embedcalc: no nearby valid config found to suggest", markup=False)
    return rows
