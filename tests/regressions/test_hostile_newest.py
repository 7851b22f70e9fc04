"""Issue 33, the tracebacks and wrong exit codes on the newest surfaces: each case gives its documented exit code
and a one-line message naming the field, in bounded work."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from embedcalc.analysis.plan.engine import Engine
from embedcalc.analysis.plan.scheduler import MAX_ITERATIONS, simulate
from embedcalc.analysis.plan.steps import StepCost
from embedcalc.analysis.roofline.traffic import experts_reached
from embedcalc.devices.resolve import hardware_dir


def test_a_device_pattern_of_5000_nested_groups_is_exit_3(cli: Any, tmp_path: Path) -> None:
    data = yaml.safe_load((hardware_dir() / "h100-sxm.yaml").read_text())
    for pattern in ("(" * 5000 + "x" + ")" * 5000, "(" * 150 + "x" + ")" * 150):
        path = tmp_path / "device.yaml"
        path.write_text(yaml.safe_dump(data | {"name": "mine", "cuda_name_pattern": pattern}))
        result = cli("analyze", "gpt2", "--hardware", str(path))
        assert result.exit_code == 3, result.stderr
        assert "cuda_name_pattern" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("experts", [8, 256, 2 * 10**16, 10**29])
def test_experts_reached_stays_between_top_k_and_all(experts: int) -> None:
    for tokens in (1, 2, 1000, 10**12):
        reached = experts_reached(experts, 2, tokens)
        assert min(2, experts) <= reached <= experts
    assert experts_reached(8, 2, 4) == pytest.approx(8 * (1 - (1 - 2 / 8) ** 4))


def test_2e16_experts_with_hardware_is_a_result(analyze_json: Any) -> None:
    result = analyze_json(
        "mixtral-8x7b", "--set", "ffn.num_experts=20000000000000000", "--hardware", "h100-sxm"
    )
    assert result["results"][0]["time"]


@pytest.mark.parametrize("columns", ["10001", "100000", "99999999999999999999", "²"])
def test_columns_beyond_the_bound_are_clamped_for_help_and_usage(
    columns: str, cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", columns)
    help_text = cli("--help")
    assert help_text.exit_code == 0 and len(help_text.stdout) < 1_000_000
    usage = cli("analyze", "--bogus")
    assert usage.exit_code == 2 and "Traceback" not in usage.stderr and len(usage.stderr) < 200_000


def test_a_256_character_device_name_is_an_unknown_device_with_the_envelope(cli: Any) -> None:
    result = cli("analyze", "gpt2", "--hardware", "a" * 256, "--format", "json")
    assert result.exit_code == 2
    assert json.loads(result.stdout)["status"] == "error"


def test_train_tokens_beyond_30_digits_is_a_usage_error(cli: Any) -> None:
    result = cli(
        "analyze", "gpt2", "--hardware", "h100-sxm", "--mode", "training", "--train-tokens", "1" * 31
    )
    assert result.exit_code == 2 and "--train-tokens" in result.stderr


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_local_cache_that_is_no_file_is_not_reported_missing(
    kind: str, cli: Any, _private_cache: Path
) -> None:
    path = _private_cache / "embedcalc" / "local.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path) if kind == "fifo" else path.mkdir()
    result = cli("analyze", "gpt2", "--hardware", "local")
    assert result.exit_code == 4 and "not a regular file" in " ".join(result.stderr.split())
    assert "does not exist" not in result.stderr


def test_a_replica_preempting_every_step_is_not_sustained_and_bounded() -> None:
    """One request's KV room and 64 clients: every step preempts; the simulation stops as not sustained."""
    cost = StepCost.build(lambda n: 0.015 + 1e-4 * n, 0.4, 5000, 1024, None)
    load = simulate(cost, Engine(1024, 8192), 5000, 5000, 5600, concurrency=64)
    assert load.sustained is False and load.preemptions <= MAX_ITERATIONS
