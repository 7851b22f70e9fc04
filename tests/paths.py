"""Where the test suite's shared files live, named once: tests sit at different depths of the mirror tree
(tests/sources/hf/test_hf.py, tests/regressions/fuzz/test_fuzz.py), so none computes a path from its own
``__file__``. Import as ``from paths import FIXTURES`` (tests/ is on ``sys.path``: pytest puts the directory of
the root conftest.py there, and the scripts in tests/ run from it)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
FIXTURES = TESTS / "fixtures"
HF_FIXTURES = FIXTURES / "hf"
PUBLISHED_SIZES = FIXTURES / "published_sizes.yaml"
GOLDEN = TESTS / "golden"
GOLDEN_JSON = GOLDEN / "json"
SCRIPTS = ROOT / "scripts"
BENCHMARKS = ROOT / "benchmarks"
DOCS = ROOT / "docs"


def load_script(stem: str, folder: Path = SCRIPTS) -> ModuleType:
    """``scripts/STEM.py`` (or ``FOLDER/STEM.py``) imported as module ``STEM`` (the scripts are not a package;
    registered in ``sys.modules`` so that its dataclasses and pickles resolve their module)."""
    # as when it runs: its siblings import by their bare names (benchmarks/judge.py)
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    spec = importlib.util.spec_from_file_location(stem, folder / f"{stem}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(stem, module)
    spec.loader.exec_module(module)
    return module
