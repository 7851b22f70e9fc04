"""The wheel works on its own: built, installed into a fresh venv (no system site-packages), and run from a
directory where the checkout's presets/ cannot be reached (issue 2, "Packaging").

Needs the network for the build backend and the runtime dependencies (PyPI); slow (~20-60 s).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from expected_presets import PRESETS
from paths import ROOT

pytestmark = pytest.mark.slow

REPO_ROOT = ROOT
RUNTIME_DEPS = ("typer", "rich", "pydantic", "numpy", "pyyaml")


def _run(cmd: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "PIP_REQUIRE_VIRTUALENV")
    }
    env.update(NO_COLOR="1", TERM="dumb", COLUMNS="120", PIP_DISABLE_PIP_VERSION_CHECK="1")
    proc = subprocess.run(
        cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL
    )
    assert proc.returncode == 0, (
        f"{cmd} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    return proc


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dist = tmp_path_factory.mktemp("dist")
    _run([sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(REPO_ROOT)], cwd=dist)
    (path,) = dist.glob("embedcalc-*.whl")
    return path


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("venv")
    start = time.perf_counter()
    _run([sys.executable, "-m", "venv", str(root / "env")], cwd=root)  # no --system-site-packages
    python = root / "env" / "bin" / "python"
    _run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", str(wheel)], cwd=root)
    _run([str(python), "-m", "pip", "install", "--quiet", *RUNTIME_DEPS], cwd=root)
    # nothing missing: pip check fails if a declared dependency of the wheel is not installed
    _run([str(python), "-m", "pip", "check"], cwd=root)
    elapsed = time.perf_counter() - start
    print(f"fresh venv with the wheel and its dependencies in {elapsed:.1f} s")
    return root / "env"


def test_wheel_ships_presets_and_entry_point(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        assert "embedcalc = embedcalc.cli.app:main" in zf.read(entry_points).decode()
        metadata = zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert {f"embedcalc/presets/{p}.yaml" for p in PRESETS} <= set(names)
    shipped = {p.name for p in (REPO_ROOT / "hardware").glob("*.yaml")}
    assert {f"embedcalc/hardware/{h}" for h in shipped} <= set(names) and "h100-sxm.yaml" in shipped
    for lang in ("en", "zh"):  # explain's message catalogues, source and compiled
        assert {f"embedcalc/locale/{lang}/LC_MESSAGES/embedcalc.{ext}" for ext in ("po", "mo")} <= set(names)
    assert "embedcalc/py.typed" in names
    assert "embedcalc/sources/hf/accept_list.json" in names  # the HF keys transformers' classes write
    assert not [n for n in names if n.startswith("tests/")]
    for dep in ("typer", "rich", "pydantic", "numpy", "pyyaml"):
        assert f"Requires-Dist: {dep}" in metadata.replace("PyYAML", "pyyaml")
    assert "torch" not in [
        line.split()[1].split(";")[0].split(">")[0]
        for line in metadata.splitlines()
        if line.startswith("Requires-Dist:") and "extra ==" not in line
    ]


def test_installed_wheel_lists_presets_outside_the_checkout(venv: Path, tmp_path: Path) -> None:
    assert not (tmp_path / "presets").exists()
    proc = _run([str(venv / "bin" / "embedcalc"), "presets", "--format", "json"], cwd=tmp_path)
    names = [row["name"] for row in json.loads(proc.stdout)["results"]]
    assert names == sorted(PRESETS)
    table = _run([str(venv / "bin" / "embedcalc"), "presets"], cwd=tmp_path)
    for name in PRESETS:
        assert name in table.stdout


def test_installed_wheel_analyzes_bert_base(venv: Path, tmp_path: Path) -> None:
    proc = _run([str(venv / "bin" / "embedcalc"), "analyze", "bert-base", "--format", "json"], cwd=tmp_path)
    result = json.loads(proc.stdout)["results"][0]
    assert result["params"]["total"] == 109_482_240
    assert result["flops"]["forward"] == 22_348_431_360
    # python -m works too, and the package really came from the venv, not the checkout
    where = _run(
        [str(venv / "bin" / "python"), "-c", "import embedcalc; print(embedcalc.__file__)"], cwd=tmp_path
    )
    assert str(REPO_ROOT) not in where.stdout
    device = _run([str(venv / "bin" / "embedcalc"), "hardware", "show", "h100-sxm"], cwd=tmp_path)
    assert "h100" in device.stdout.lower()
    zh = _run(
        [str(venv / "bin" / "embedcalc"), "explain", "bert-base", "heads", "--lang", "zh"], cwd=tmp_path
    )
    assert "768" in zh.stdout and "head_dim" in zh.stdout
    module = _run([str(venv / "bin" / "python"), "-m", "embedcalc", "presets", "show", "gpt2"], cwd=tmp_path)
    assert "name: gpt2" in module.stdout
