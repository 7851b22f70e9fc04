"""A loaded target analysed as ``embedcalc analyze`` does: the workload and parallel layout checked against the
config first (one :class:`ConfigError` with every problem), the config's warnings kept on the result.

Shared by the CLI (which prints the warnings) and the Python API (which returns them on the result).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from embedcalc.analysis.parallel import parallel_problems
from embedcalc.analysis.report import Analysis, analyze
from embedcalc.analysis.workload import DtypeSource, Workload, context_problems, with_model_dtype
from embedcalc.config.advisories import config_warnings, workload_problems
from embedcalc.errors import ConfigError, Problem

if TYPE_CHECKING:
    from embedcalc.config.resolved import ResolvedShape
    from embedcalc.sources.loading import LoadedConfig


def fit_problems(
    config: ResolvedShape, workload: Workload
) -> tuple[list[Problem], list[Problem], list[Problem]]:
    """How ``workload`` fits ``config``, by the rules ``analyze`` and ``check`` share: (the workload's errors,
    the parallel layout's errors, warnings and notes)."""
    workload_errors, warnings = workload_problems(config, workload)
    parallel_errors, notes = parallel_problems(config, workload.parallel)
    return workload_errors, context_problems(workload) + parallel_errors, warnings + notes


def does_not_fit(target: str, errors: list[Problem]) -> ConfigError:
    lines = "\n".join(f"  {p.message}" for p in errors)
    return ConfigError(f"{target}: the workload does not fit the config\n{lines}", errors)


def own_dtype(loaded: LoadedConfig, workload: Workload) -> Workload:
    """``workload`` in the model's own dtype unless one was chosen (``dtype_source``: ``preset`` for a shipped
    preset, ``config`` for a config file or a Hugging Face config.json; embedcalc.config.dtypes)."""
    source: DtypeSource = "preset" if loaded.source == "preset" else "config"
    return with_model_dtype(workload, loaded.config.dtype, source)


def analyze_loaded(loaded: LoadedConfig, workload: Workload, model_dtype: bool = True) -> Analysis:
    """Check ``workload`` against ``loaded.config`` and analyse it, in the model's own dtype when no dtype was
    chosen (``model_dtype``; bench passes False: it runs what it measures); raises ConfigError when they do not
    fit."""
    if model_dtype:
        workload = own_dtype(loaded, workload)
    target = loaded.target
    workload_errors, parallel_errors, warnings = fit_problems(loaded.config, workload)
    errors = workload_errors + parallel_errors
    if errors:
        raise does_not_fit(target, errors)
    published = loaded.source in ("preset", "hf")  # the model's own sizes, not someone choosing them
    warnings = loaded.source_warnings + config_warnings(loaded.config, loaded.user_keys, published) + warnings
    result = analyze(target, loaded.config, workload, warnings)
    if loaded.source == "transformers":  # derived from transformers' module tree (embedcalc.api.general)
        return replace(
            result, reader="transformers-meta", reader_note=loaded.notes[-1] if loaded.notes else None
        )
    return result
