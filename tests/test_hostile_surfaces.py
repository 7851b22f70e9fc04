"""Regression tests for issue 24 (the new surfaces under hostile input), one per bug class, each with the exact
input that reproduced it. The hub-cache classes are in tests/test_hub.py, the no-torch class in tests/test_cli.py
(scripts/no_torch_check.py).

Time guards are blow-up guards (30 s on a shared CI core), not speed assertions.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import pytest

GUARD_S = 30.0
H100 = ["--hardware", "h100-sxm"]
TRAINING = [*H100, "--mode", "training", "--train-tokens", "1e9"]


def run(cli: Any, *args: str) -> Any:
    start = time.perf_counter()
    result = cli(*args)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.stderr + result.stdout
    assert time.perf_counter() - start < GUARD_S, args[:4]
    return result


def assert_refused(result: Any, code: int, *words: str) -> None:
    assert result.exit_code == code, (result.exit_code, result.stderr)
    for word in words:
        assert word in result.stderr, (word, result.stderr)


# --- non-finite numbers in the time model -------------------------------------------------------------------------


def test_price_per_hour_inf_is_refused(cli: Any) -> None:
    result = run(cli, "analyze", "gpt2", *TRAINING, "--price-per-hour", "inf", "--format", "json")
    assert_refused(result, 2, "--price-per-hour", "finite price")
    assert "Infinity" not in result.stdout


def test_efficiency_1e_320_is_refused(cli: Any) -> None:
    assert_refused(run(cli, "analyze", "gpt2", *H100, "--efficiency", "1e-320"), 2, "--efficiency", "[0.0001, 1]")


def test_device_file_with_1e_300_flops_is_refused(cli: Any, tmp_path: Path) -> None:
    device = tmp_path / "slow.yaml"
    device.write_text(
        "name: slow\ntitle: Slow\nvendor: X\nkind: gpu\nsources: {d: me}\n"
        "peak_flops_per_s:\n  fp32: {value: 1.0e-300, source: d}\n"
        "memory_bytes: {value: 85899345920, source: d}\nmemory_bandwidth_bytes_per_s: {value: 3.35e12, source: d}\n"
    )
    result = run(cli, "analyze", "gpt2", "--hardware", str(device), "--format", "json")
    assert_refused(result, 3, "peak_flops_per_s", "below 1 MFLOP/s")
    assert json.loads(result.stdout)["status"] == "error"


def test_devices_with_400_digits_is_a_usage_error(cli: Any) -> None:
    assert_refused(run(cli, "analyze", "gpt2", *TRAINING, "--devices", "9" * 400), 2, "--devices", "30 digits")


def test_time_request_applies_the_same_rules_to_python_callers() -> None:
    from embedcalc.analysis.roofline import Efficiency
    from embedcalc.analysis.roofline_time import TimeRequest
    from embedcalc.errors import WorkloadError

    for kwargs in ({"price_per_hour": math.inf}, {"devices": 10**400}, {"efficiency": Efficiency(1e-320, 1.0)},
                   {"train_tokens": 0}, {"price_per_hour": math.nan}):  # fmt: skip
        with pytest.raises(WorkloadError) as info:
            TimeRequest(**kwargs)  # type: ignore[arg-type]
        assert info.value.problems[0].code == "time_input_invalid"


def test_json_is_never_written_with_infinity(capsys: pytest.CaptureFixture[str]) -> None:
    from embedcalc.cli.output import emit_json
    from embedcalc.errors import WorkloadError

    with pytest.raises(WorkloadError, match=r"results\[0\]\.time\.cost"):
        emit_json("analyze", [{"time": {"cost": math.inf}}])
    assert capsys.readouterr().out == ""
