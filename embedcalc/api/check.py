"""``check``: every target validated (the config, and the workload when a budget is judged on it), with its
derived values, warnings, parameter count and, for an invalid one, the nearest valid alternatives.

One :class:`TargetCheck` per target, in order, in a :class:`CheckReport` whose ``to_json()`` is the ``results``
list of ``embedcalc check --format json``. An invalid target is a result, not an exception: ``check`` reports on
all of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from embedcalc.analysis.workload import Workload
from embedcalc.api.analyze import budget_problems
from embedcalc.api.load import load_target
from embedcalc.errors import ConfigError, Problem
from embedcalc.sources.loading import LoadedConfig

if TYPE_CHECKING:
    from embedcalc.analysis.budget import Budget
    from embedcalc.analysis.report import Analysis
    from embedcalc.analysis.suggest import Suggestion
    from embedcalc.reconcile.general import GeneralCount

__all__ = ["CheckReport", "TargetCheck", "check"]


@dataclass(frozen=True)
class TargetCheck:
    """One target: valid (``loaded``, ``analysis``, ``warnings``) or not (``error`` with its problems, and the
    ``suggestions`` when they were asked for)."""

    target: str
    loaded: LoadedConfig | None = None
    analysis: Analysis | None = None
    warnings: list[Problem] = field(default_factory=list)
    error: ConfigError | None = None
    suggestions: list[Suggestion] | None = None
    general: GeneralCount | None = None  # no native mapping: counted by transformers' own class (DESIGN §19)

    @property
    def valid(self) -> bool:
        return self.error is None

    @property
    def problems(self) -> list[Problem]:
        """The problems that make it invalid, each path prefixed with the target."""
        found = self.error.problems if self.error is not None else []
        return [Problem(f"{self.target}: {p.path}", p.message, p.code) for p in found]

    def to_json(self) -> dict[str, Any]:
        """This target's entry of ``embedcalc check --format json``."""
        if self.general is not None:
            g = self.general
            return {"target": self.target, "valid": True, "reader": g.to_json()["reader"], "counted_by": g.counted_by,
                    "params": {"total": g.params.total, "active": g.active_params}, "notes": list(g.notes),
                    "warnings": []}  # fmt: skip
        if self.error is not None or self.loaded is None or self.analysis is None:
            problems = self.error.problems if self.error is not None else []
            entry: dict[str, Any] = {
                "target": self.target,
                "valid": False,
                "problems": [p.as_dict() for p in problems],
            }
            if self.suggestions is not None:
                entry["suggestions"] = [_suggestion_json(s) for s in self.suggestions]
            return entry
        config = self.loaded.config
        return {
            "target": self.target, "valid": True, "config": config.model_dump(mode="json"),
            "derived": config.derived(), "params": {"total": self.analysis.params.total},
            "warnings": [w.as_dict() for w in self.warnings],
        } | ({"hf": self.loaded.hf.as_dict()} if self.loaded.hf is not None else {})  # fmt: skip


def _suggestion_json(s: Suggestion) -> dict[str, Any]:
    return {
        "set": list(s.overrides),
        "command_line": s.set_line,
        "params": s.params,
        "delta_params": s.delta_params,
    }


@dataclass(frozen=True)
class CheckReport:
    """Every target checked, the workload a budget was judged on (None without a budget), and the budget's
    verdict."""

    results: list[TargetCheck]
    workload: Workload | None
    over_budget: list[Problem]

    @property
    def problems(self) -> list[Problem]:
        return [p for r in self.results for p in r.problems]

    def to_json(self) -> list[dict[str, Any]]:
        return [r.to_json() for r in self.results]


def check(
    targets: Sequence[str],
    overrides: Sequence[str] | None,
    run: Workload,
    budget: Budget,
    suggest: bool = False,
) -> CheckReport:
    """``embedcalc check``: each target loaded with ``--set`` and validated; with a budget, also the workload
    (the budget is judged on it, so it must be possible) and the budget itself."""
    from embedcalc.analysis.checked import does_not_fit, fit_problems, own_dtype
    from embedcalc.analysis.report import analyze
    from embedcalc.config.advisories import config_warnings

    results: list[TargetCheck] = []
    over: list[Problem] = []
    for target in targets:
        try:
            loaded = load_target(target, overrides)
        except ConfigError as exc:
            from embedcalc.api.general import GENERAL_CODES

            if exc.code in GENERAL_CODES:  # the general reader's case: loaded only then
                results.append(_general_check(target, overrides, run, exc))
                continue
            found = _suggestions(target, overrides) if suggest else None
            results.append(TargetCheck(target, error=exc, suggestions=found))
            continue
        at = own_dtype(loaded, run)  # the model's own dtype unless one was chosen
        # the rules analyze applies (one place: fit_problems); the workload's own only with a budget, which is judged
        # on it, the parallel layout's always (--tp 5 on 12 heads is invalid whether or not a budget is given)
        workload_errors, parallel_errors, workload_warnings = fit_problems(loaded.config, at)
        errors = parallel_errors + (workload_errors if not budget.empty else [])
        if errors:
            results.append(TargetCheck(target, error=does_not_fit(target, errors)))
            continue
        warnings = loaded.source_warnings + config_warnings(
            loaded.config, loaded.user_keys, published=loaded.source != "file"
        )
        if not budget.empty:
            warnings += workload_warnings
        analysis = analyze(target, loaded.config, at, warnings)
        if not budget.empty:
            over += budget_problems(budget, [analysis])
        results.append(TargetCheck(target, loaded, analysis, warnings))
    return CheckReport(results, run if not budget.empty else None, over)


def _general_check(
    target: str, overrides: Sequence[str] | None, run: Workload, refusal: ConfigError
) -> TargetCheck:
    """A family without a native mapping: valid when transformers builds it (its count through the general reader),
    else the refusal, told how to get the general reader when torch or transformers is missing."""
    from embedcalc.api.general import (
        beyond_general,
        general_available,
        general_hint,
        read_general,
        with_refusal_note,
    )

    if not general_available():
        return TargetCheck(target, error=general_hint(refusal))
    try:
        return TargetCheck(target, general=with_refusal_note(read_general(target, overrides, run), refusal))
    except ConfigError as exc:
        return TargetCheck(target, error=beyond_general(refusal, exc))


def _suggestions(target: str, overrides: Sequence[str] | None) -> list[Suggestion]:
    """The nearest valid alternatives of an invalid target (none when the file itself is unreadable)."""
    from embedcalc.analysis.suggest import suggest as suggest_fixes
    from embedcalc.sources.loading import raw_config

    extra = list(overrides or [])
    try:
        raw = raw_config(target, extra)
    except ConfigError:
        return []
    return suggest_fixes(raw, lambda more: load_target(target, [*extra, *more]).config)
