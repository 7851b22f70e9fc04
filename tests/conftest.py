"""Shared fixtures for the whole suite: running the CLI, writing config files, golden-file updates.

Where a test goes: the tree mirrors the package, and a test lives beside the code it checks.

- ``tests/config/``: the config schema, its rules, records and precision; ``tests/sources/``: loading, parsing,
  checkpoint headers, and in ``tests/sources/hf/`` the Hugging Face readers, aliases, the accept-list, the hub cache
  and parity of HF families with transformers; ``tests/devices/``: the hardware catalogue and the local device;
  ``tests/architecture/``: the package's import graph.
- ``tests/analysis/``, ``tests/modeling/``, ``tests/reconcile/``, ``tests/render/``, ``tests/api/``,
  ``tests/cli/``: the package of the same name. A test that builds a torch model to check an analytic count
  belongs to the side whose code it is about (a count of ``analysis/`` checked against torch stays in
  ``tests/analysis/``; ``modeling/``'s own layers in ``tests/modeling/``). A CLI test asserts what only the CLI
  owns (exit codes, streams, options, the JSON envelope); numbers go in the package that computes them.
- ``tests/regressions/``: a bug class with the exact input that reproduced it (edge, hostile inputs), and the fuzz
  suite (``tests/regressions/fuzz/``).
- ``tests/e2e/``: the product from outside: the newcomer's quick start, the wheel, the README and docs pages
  number by number, the golden JSON of every command.

Shared data stays at the top: ``fixtures/`` (``fixtures/hf/``: hub config.json files; ``published_sizes.yaml``:
each file's total as transformers builds it, one row per file, checked by sources/hf/test_published_sizes.py; a
new family adds its row there, not a table in its test), ``golden/``; name them through ``paths.py`` (``from paths
import HF_FIXTURES``), never from a test's own ``__file__``. Helpers shared by several directories stay at the top
too (``hf_reference.py``, ``golden_json.py``, ``paths.py``, ``cli_process.py``); this directory is on ``sys.path``
(pytest puts the root conftest's directory there), so they import by their bare names (never ``from conftest``: a
directory's own conftest.py can stand in for this one). No ``__init__.py``: test file names are
unique across the tree.

Two ways to run the CLI:

- ``cli`` invokes the Typer app in-process with ``typer.testing.CliRunner`` (click >= 8.2 keeps stdout and stderr
  apart: ``result.stdout``, ``result.stderr``); an uncaught exception shows up as ``result.exception``.
- ``run_cli`` starts ``python -m embedcalc`` in a subprocess: the real streams, the real exit code and a real
  traceback on stderr if anything escapes. Slower (~0.4 s a call), so used where the process boundary matters.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import typer.main
import typer.testing
import yaml
from cli_process import run_embedcalc
from hypothesis import HealthCheck, settings
from typer.testing import CliRunner

from embedcalc.cli.app import app

# typer's CliRunner.invoke converts the Typer application into its click command on every call (50 ms for
# embedcalc's 13 commands, five times what `check gpt2` itself costs in-process; 60% of the fuzz profile's time).
# The conversion reads only the registered functions' signatures, and every test module builds its application
# once, so one click command per application serves every invoke of the suite. Should a typer release rename the
# hook, the suite stays correct, only slower.
if hasattr(typer.testing, "_get_command"):
    typer.testing._get_command = functools.cache(typer.main.get_command)

settings.register_profile(
    "embedcalc", deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("embedcalc-thorough", deadline=None, max_examples=500)
# CI draws the same examples on every run: a red CI is then a real regression, never an unlucky draw
settings.register_profile(
    "embedcalc-ci",
    deadline=None,
    max_examples=60,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE", "embedcalc-ci" if os.environ.get("CI") else "embedcalc")
)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """pyproject's ``-n auto`` spreads the default run over the machine's CPUs (pytest-xdist); a run that selects
    the slow tests or shows the tests' own output (``-s``: the fuzz profiles' summaries, issue 33's table of costs)
    stays in one process: those tests bound their CPU, memory and wall time per case, and a worker would swallow
    what they print. None: xdist's own count."""
    if config.getoption("capture") == "no" or "not slow" not in (config.getoption("markexpr") or ""):
        return 0
    return None


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-goldens",
        action="store_true",
        default=False,
        help="Rewrite tests/golden/*.txt from the current output instead of comparing with them.",
    )


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No test reads or writes the user's ``~/.cache/embedcalc`` (``bench --peak`` records the local device there):
    every test gets an empty cache of its own (``$XDG_CACHE_HOME``, returned), so ``local`` is unmeasured unless
    the test asks for ``measured_local``."""
    cache = tmp_path_factory.mktemp("xdg-cache")
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    return cache


@contextlib.contextmanager
def _held(lock: Path) -> Iterator[None]:
    """An exclusive lock on ``lock`` across processes (``fcntl.flock``, released when the file closes); where
    ``fcntl`` does not exist (Windows) each process goes on alone, which costs time, not correctness."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    with lock.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


@pytest.fixture(scope="session")
def _local_measurement(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``local.json`` as ``bench --peak --device cpu`` and ``bench --peak --device cpu --dtype bf16`` write it,
    measured once per test run in a cache of its own: the matmul peaks, memory bandwidth, per-kernel overhead and
    GEMM rows of this CPU take 45-55 s on 2 cores, and every bench of an unmeasured machine would pay them again.
    Under xdist the workers of one run share it (the first measures it under a lock, the others wait and read it),
    in the run's own base directory, so no run reads another's."""
    pytest.importorskip("torch")
    from embedcalc.api.bench import RunOptions, measure_peak

    base = tmp_path_factory.getbasetemp()
    run_root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    cache = run_root / "measured-cache"
    local = cache / "embedcalc" / "local.json"
    done = cache / "complete"
    with _held(run_root / "measured-cache.lock"):
        if not done.exists():
            shutil.rmtree(cache, ignore_errors=True)
            cache.mkdir()
            with pytest.MonkeyPatch.context() as patch:
                patch.setenv("XDG_CACHE_HOME", str(cache))
                for dtype in ("fp32", "bf16"):
                    measure_peak(dtype, RunOptions(device="cpu"))
            done.touch()
    return local


@pytest.fixture
def measured_local(_private_cache: Path, _local_measurement: Path) -> Path:
    """This machine already measured as ``local`` (fp32 and bf16), in the test's own cache: a copy of the
    session's one measurement (``_local_measurement``), so a bench run predicts from it instead of measuring the
    machine first. Tests of an unmeasured machine (``--hardware local`` refused, the first bench measuring it)
    leave this out."""
    path = _private_cache / "embedcalc" / "local.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_local_measurement, path)
    return path


@pytest.fixture
def update_goldens(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-goldens"))


@pytest.fixture
def run_cli() -> Callable[..., subprocess.CompletedProcess[str]]:
    return run_embedcalc


class InProcessCli:
    """``cli("analyze", "bert-base")`` -> click Result with separate ``stdout`` and ``stderr``."""

    def __init__(self) -> None:
        self.runner = CliRunner()

    def __call__(self, *args: str) -> Any:
        return self.runner.invoke(app, list(args), env={"COLUMNS": "120", "NO_COLOR": "1"})


@functools.cache
def _analyze_json(*args: str) -> dict[str, Any]:
    result = InProcessCli()("analyze", *args, "--format", "json")
    assert result.exit_code == 0, result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    assert data["status"] == "ok"
    assert data["problems"] == []
    return data


@pytest.fixture(scope="session")
def analyze_json() -> Callable[..., dict[str, Any]]:
    """``analyze_json("bert-base", "--seq-len", "64")``: ``embedcalc analyze ... --format json`` in-process, parsed
    and checked for status ok; cached per argument list. The numbers are the package's; the process boundary
    (streams, exit codes, no traceback) has its own tests in tests/cli/ (``run_cli``)."""
    return _analyze_json


@pytest.fixture
def cli() -> InProcessCli:
    return InProcessCli()


@pytest.fixture
def write_config(tmp_path: Path) -> Callable[..., Path]:
    """Write a mapping (YAML by default, JSON for a ``.json`` name) or raw text/bytes to ``tmp_path``."""

    def write(content: dict[str, Any] | str | bytes, name: str = "model.yaml") -> Path:
        path = tmp_path / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        elif isinstance(content, str):
            path.write_text(content, encoding="utf-8")
        elif name.endswith(".json"):
            path.write_text(json.dumps(content), encoding="utf-8")
        else:
            path.write_text(yaml.safe_dump(content, sort_keys=False), encoding="utf-8")
        return path

    return write


@pytest.fixture
def generate_state(
    cli: InProcessCli, write_config: Callable[..., Path], measured_local: Path
) -> Callable[..., dict[str, Any]]:
    """``bench --mode generate`` (CPU, 2 sequences of 9 tokens, 3 decoded, ``local`` already measured) on a config
    mapping: its measurement, once the recurrent state the torch tensors hold is checked to be the analytic state
    (DESIGN.md §16)."""

    def run(content: dict[str, Any], name: str = "config.json") -> dict[str, Any]:
        path = write_config(content, name)
        result = cli("bench", str(path), "--mode", "generate", "--device", "cpu", "--format", "json", "--seq-len",
                     "9", "--gen-tokens", "3", "--batch-size", "2", "--repeat", "1", "--warmup", "0")  # fmt: skip
        assert result.exit_code == 0, result.stderr
        entry = json.loads(result.stdout)["results"][0]
        m: dict[str, Any] = entry["measurement"]
        assert m["recurrent_state_bytes_measured"] == m["recurrent_state_bytes"]
        assert m["recurrent_state_bytes"] == entry["memory"]["recurrent_state_bytes"]
        assert m["recurrent_state_matches"] is True
        assert m["kv_cache_bytes_measured"] == m["kv_cache_bytes"]
        return m

    return run


@pytest.fixture
def in_tmp_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.chdir(tmp_path)
    yield tmp_path
