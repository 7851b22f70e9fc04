"""A loaded target analysed as ``embedcalc analyze`` does: the workload and parallel layout checked against the
config first (one :class:`ConfigError` with every problem), the config's warnings kept on the result.

Shared by the CLI (which prints the warnings) and the Python API (which returns them on the result).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from embedcalc.analysis.parallel import parallel_problems
from embedcalc.analysis.report import Analysis, analyze
from embedcalc.analysis.workload import Workload
from embedcalc.config.checks import config_warnings, workload_problems
from embedcalc.errors import ConfigError, Problem

if TYPE_CHECKING:
    from embedcalc.config.loading import LoadedConfig
    from embedcalc.config.schema import ModelConfig


def fit_problems(config: ModelConfig, workload: Workload) -> tuple[list[Problem], list[Problem], list[Problem]]:
    """How ``workload`` fits ``config``, by the rules ``analyze`` and ``check`` share: (the workload's errors,
    the parallel layout's errors, warnings and notes)."""
    workload_errors, warnings = workload_problems(config, workload)
    parallel_errors, notes = parallel_problems(config, workload.parallel)
    return workload_errors, parallel_errors, warnings + notes


def does_not_fit(target: str, errors: list[Problem]) -> ConfigError:
    lines = "\n".join(f"  {p.message}" for p in errors)
    return ConfigError(f"{target}: the workload does not fit the config\n{lines}", errors)


def analyze_loaded(loaded: LoadedConfig, workload: Workload) -> Analysis:
    """Check ``workload`` against ``loaded.config`` and analyse it; raises ConfigError when they do not fit."""
    target = loaded.target
    workload_errors, parallel_errors, warnings = fit_problems(loaded.config, workload)
    errors = workload_errors + parallel_errors
    if errors:
        raise does_not_fit(target, errors)
    published = loaded.source in ("preset", "hf")  # the model's own sizes, not someone choosing them
    warnings = config_warnings(loaded.config, loaded.user_keys, published) + warnings
    return analyze(target, loaded.config, workload, warnings)
