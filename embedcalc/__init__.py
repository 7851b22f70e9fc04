"""embedcalc: configurator and cost calculator for Transformer models.

The Python API (DESIGN.md §13) is the code the CLI runs, with the same typed results:

>>> import embedcalc
>>> r = embedcalc.analyze(embedcalc.load("bert-base"))
>>> r.params.total
109482240
>>> r.to_json()["memory"]["weights_bytes"]
437928960

:func:`load` reads a preset, a config file (embedcalc's YAML/JSON or a Hugging Face ``config.json``) or a mapping
of fields; :func:`analyze`, :func:`compare` and :func:`sweep` count params, FLOPs and memory; :func:`verify` and
:func:`bench` build the model in PyTorch (the ``torch`` extra); :func:`plan` searches devices and layouts. Every
result has ``to_json()``, the ``results[]`` entry of the CLI's ``--format json`` (DESIGN.md §5). The names in
``__all__`` are the API; the version rules are in the documentation's Python API page (docs/api.md).

Importing ``embedcalc`` is cheap: the API's modules (pydantic, the analyzer; torch only for verify/bench) load on
first use of a name. The package is split as DESIGN.md §7 describes: ``config``, ``analysis``, ``modeling``
(the only torch code), ``reconcile``, ``api`` (the one orchestrator these names come from), ``render`` (the only
rich code) and ``cli``; the layers below ``api`` never import it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> module defining it, imported on first access (PEP 562)
_LAZY = {
    "load": "embedcalc.api.load",
    "analyze": "embedcalc.api.analyze",
    "compare": "embedcalc.api.analyze",
    "sweep": "embedcalc.api.sweep",
    "verify": "embedcalc.api.verify",
    "bench": "embedcalc.api.bench",
    "plan": "embedcalc.api.plan",
    "PlanResult": "embedcalc.analysis.plan.rows",
    "Comparison": "embedcalc.api.results",
    "Sweep": "embedcalc.api.results",
    "ConfigLike": "embedcalc.api.load",
    "Analysis": "embedcalc.analysis.report",
    "Workload": "embedcalc.analysis.workload",
    "Parallelism": "embedcalc.analysis.workload",
    "Breakdown": "embedcalc.analysis.breakdown",
    "FlopsEstimate": "embedcalc.analysis.flops",
    "MemoryEstimate": "embedcalc.analysis.memory",
    "LoadedConfig": "embedcalc.sources.loading",
    "ModelConfig": "embedcalc.config.schema",
    "VerifyResult": "embedcalc.reconcile.verify",
    "Reconciliation": "embedcalc.reconcile.verify",
    "BenchResult": "embedcalc.reconcile.bench",
    "Measurement": "embedcalc.reconcile.bench",
    "EmbedcalcError": "embedcalc.errors",
    "ConfigError": "embedcalc.errors",
    "UnsupportedEnvironmentError": "embedcalc.errors",
    "Problem": "embedcalc.errors",
}

__all__ = [
    "Analysis",
    "BenchResult",
    "Breakdown",
    "Comparison",
    "ConfigError",
    "ConfigLike",
    "EmbedcalcError",
    "FlopsEstimate",
    "LoadedConfig",
    "Measurement",
    "MemoryEstimate",
    "ModelConfig",
    "Parallelism",
    "PlanResult",
    "Problem",
    "Reconciliation",
    "Sweep",
    "UnsupportedEnvironmentError",
    "VerifyResult",
    "Workload",
    "__version__",
    "analyze",
    "bench",
    "compare",
    "load",
    "plan",
    "sweep",
    "verify",
]

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time __getattr__ imports on first use
    from embedcalc.analysis.breakdown import Breakdown
    from embedcalc.analysis.flops import FlopsEstimate
    from embedcalc.analysis.memory import MemoryEstimate
    from embedcalc.analysis.plan.rows import PlanResult
    from embedcalc.analysis.report import Analysis
    from embedcalc.analysis.workload import Parallelism, Workload
    from embedcalc.api.analyze import analyze, compare
    from embedcalc.api.bench import bench
    from embedcalc.api.load import ConfigLike, load
    from embedcalc.api.plan import plan
    from embedcalc.api.results import Comparison, Sweep
    from embedcalc.api.sweep import sweep
    from embedcalc.api.verify import verify
    from embedcalc.config.schema import ModelConfig
    from embedcalc.errors import ConfigError, EmbedcalcError, Problem, UnsupportedEnvironmentError
    from embedcalc.reconcile.bench import BenchResult, Measurement
    from embedcalc.reconcile.verify import Reconciliation, VerifyResult
    from embedcalc.sources.loading import LoadedConfig


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'embedcalc' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next access is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
