"""A newcomer's first ten minutes (issue 16): the README's quick start is what CI runs, published sizes are not
warned about, and sibling commands give the same answer to the same mistake."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from paths import HF_FIXTURES, ROOT

from embedcalc.errors import ConfigError
from embedcalc.sources.loading import load_target
from embedcalc.sources.presets import preset_names

HF_FILES = sorted((HF_FIXTURES).glob("*.json"))


# --- the quick start --------------------------------------------------------------------------------------------


def quick_start() -> list[str]:
    """The command lines of the README's quick-start block."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Quick start") :]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block is not None
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_ci_runs_the_readme_quick_start_as_written() -> None:
    commands = quick_start()
    assert len(commands) == 2  # install + the main job; the tests
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    for command in commands:
        assert command in ci, f".ci/run does not run the README's {command!r}"


def test_quick_start_installs_the_cpu_build() -> None:
    install = quick_start()[0]
    assert "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in install
    assert install.index("--index-url https://download.pytorch.org/whl/cpu") < install.index("pip install -e")


# --- vocabulary padding: advice for a size the user chose -------------------------------------------------------


def codes(result: dict[str, Any]) -> list[str]:
    return [w["code"] for w in result["warnings"]]


def test_no_vocab_warning_on_shipped_presets(cli: Any) -> None:
    result = cli("check", *preset_names(), "--format", "json")
    assert result.exit_code == 0, result.stderr
    assert "multiple of 64" not in result.stderr
    for entry in json.loads(result.stdout)["results"]:
        assert "vocab_unaligned" not in codes(entry), entry["target"]


def test_no_vocab_warning_on_hugging_face_files(cli: Any) -> None:
    readable = []
    for path in HF_FILES:
        try:
            load_target(str(path))
        except ConfigError:
            continue  # a family the reader does not take
        readable.append(str(path))
    assert any(path.endswith("bert-base-uncased.json") for path in readable)  # 30522: the case in point
    result = cli("check", *readable, "--format", "json")
    assert result.exit_code == 0, result.stderr
    assert "multiple of 64" not in result.stderr
    for entry in json.loads(result.stdout)["results"]:
        assert "vocab_unaligned" not in codes(entry), entry["target"]


def test_vocab_warning_on_analyze_of_a_preset_only_with_set(cli: Any) -> None:
    assert "multiple of 64" not in cli("analyze", "bert-base").stderr
    result = cli("analyze", "bert-base", "--set", "vocab_size=30522", "--format", "json")
    assert result.exit_code == 0
    assert "embedcalc: warning: bert-base: --set vocab_size" in result.stderr
    assert codes(json.loads(result.stdout)["results"][0]) == ["vocab_unaligned"]


@pytest.mark.parametrize("overrides", [[], ["--set", "vocab_size=30522"]])
def test_vocab_warning_on_the_users_own_config(cli: Any, write_config: Any, overrides: list[str]) -> None:
    own = {"architecture": "encoder", "vocab_size": 30522 if not overrides else 30528, "max_seq_len": 512,
           "embed_dim": 768, "num_heads": 12, "num_layers": 2}  # fmt: skip
    result = cli("check", str(write_config(own)), *overrides, "--format", "json")
    assert result.exit_code == 0, result.stderr
    assert "vocab_size 30522 is not a multiple of 64; padding to 30528" in result.stderr
    (warning,) = json.loads(result.stdout)["results"][0]["warnings"]
    assert warning["code"] == "vocab_unaligned"
    assert warning["path"] == ("--set vocab_size" if overrides else "vocab_size")


# --- the same mistake, the same answer ------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_plot_file_of_unknown_type_is_a_usage_error_in_compare_and_sweep(
    cli: Any, in_tmp_cwd: Path, fmt: str
) -> None:
    out = in_tmp_cwd / "out.jpg"
    compare = cli("compare", "bert-base", "gpt2", "--plot", "out.jpg", "--format", fmt)
    sweep = cli("sweep", "bert-base", "--seq-len", "128,256", "--plot", "out.jpg", "--format", fmt)
    for result in (compare, sweep):
        assert result.exit_code == 2
        assert isinstance(result.exception, SystemExit)  # no traceback
        assert "'--plot'" in result.stderr and ".png, .svg or .pdf" in result.stderr
        assert result.stdout == ""
    message = [line for line in compare.stderr.splitlines() if "--plot" in line]
    assert message == [line for line in sweep.stderr.splitlines() if "--plot" in line]
    assert not out.exists()


@pytest.fixture
def no_cuda() -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")


@pytest.mark.torch
@pytest.mark.usefixtures("no_cuda")
@pytest.mark.parametrize("fmt", ["table", "json"])
def test_device_cuda_without_cuda_is_exit_4_in_sweep_measure_and_bench(cli: Any, fmt: str) -> None:
    sweep = cli("sweep", "bert-base", "--seq-len", "16,32", "--measure", "--device", "cuda", "--format", fmt)
    bench = cli("bench", "bert-base", "--device", "cuda", "--format", fmt)
    for result in (sweep, bench):
        assert result.exit_code == 4, result.stderr
        assert isinstance(result.exception, SystemExit)
        assert result.stderr.startswith("embedcalc: error: --device cuda")
        assert "use --device cpu or --device auto" in result.stderr
        if fmt == "json":
            assert json.loads(result.stdout)["problems"][0]["code"] == "no_cuda"
        else:
            assert result.stdout == ""
    assert sweep.stderr == bench.stderr


@pytest.mark.torch
def test_sweep_measure_unknown_device_is_a_usage_error(cli: Any) -> None:
    pytest.importorskip("torch")
    result = cli("sweep", "bert-base", "--seq-len", "16,32", "--measure", "--device", "gpu")
    assert result.exit_code == 2
    assert "'--device'" in result.stderr and "auto, cpu, cuda" in result.stderr
    assert isinstance(result.exception, SystemExit)
