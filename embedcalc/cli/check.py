"""``embedcalc check TARGET...``: validate, print derived values and warnings; exit 3 if any target is invalid."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from embedcalc.analysis.params import count_params
from embedcalc.cli import output
from embedcalc.cli.common import FormatOption, OutputFormat, SetOption, handle_errors, load
from embedcalc.config.checks import config_warnings
from embedcalc.errors import ConfigError, Problem


@handle_errors("check")
def check_command(
    targets: Annotated[list[str], typer.Argument(help="Preset names or config files (YAML/JSON).")],
    overrides: SetOption = None,
    format: FormatOption = OutputFormat.table,
) -> None:
    """Validate configs: each problem names the field, both values and a fix. Exit 3 if any is invalid."""
    results: list[dict[str, Any]] = []
    problems: list[Problem] = []
    for target in targets:
        try:
            loaded = load(target, overrides)
        except ConfigError as exc:
            output.report_error(exc)
            problems += [Problem(f"{target}: {p.path}", p.message, p.code) for p in exc.problems]
            results.append(
                {"target": target, "valid": False, "problems": [p.as_dict() for p in exc.problems]}
            )
            continue
        warnings = config_warnings(loaded.config, loaded.user_keys)
        output.warn(warnings, target)
        params = count_params(loaded.config).total
        derived = loaded.config.derived()
        results.append(
            {
                "target": target,
                "valid": True,
                "config": loaded.config.model_dump(mode="json"),
                "derived": derived,
                "params": {"total": params},
                "warnings": [w.as_dict() for w in warnings],
            }
        )
        if format is OutputFormat.table:
            from embedcalc.render.tables import check_table

            output.stdout.print(check_table(target, derived, params))
    if format is OutputFormat.json:
        output.emit_json("check", results, problems=problems, status="error" if problems else "ok")
    if problems:
        raise typer.Exit(3)
