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
from embedcalc.errors import ConfigError

if TYPE_CHECKING:
    from embedcalc.config.loading import LoadedConfig


def analyze_loaded(loaded: LoadedConfig, workload: Workload) -> Analysis:
    """Check ``workload`` against ``loaded.config`` and analyse it; raises ConfigError when they do not fit."""
    target = loaded.target
    errors, warnings = workload_problems(loaded.config, workload)
    parallel_errors, notes = parallel_problems(loaded.config, workload.parallel)
    errors += parallel_errors
    if errors:
        lines = "\n".join(f"  {p.message}" for p in errors)
        raise ConfigError(f"{target}: the workload does not fit the config\n{lines}", errors)
    published = loaded.source in ("preset", "hf")  # the model's own sizes, not someone choosing them
    warnings = config_warnings(loaded.config, loaded.user_keys, published) + warnings + notes
    return analyze(target, loaded.config, workload, warnings)
