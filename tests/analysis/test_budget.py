"""Budgets for CI (issue 6): strict human sizes, exit 5 over budget naming the limit, the value and the excess.

``--max-params`` and ``--max-flops`` take counts (``400M``, ``1.3B``, ``2e12``), ``--max-memory`` bytes (``16GiB`` =
16·2³⁰, ``16GB`` = 16·10⁹). A malformed size is a usage error (exit 2) naming the flag.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from embedcalc.analysis.budget import Budget, SizeError, check_budget, parse_size
from embedcalc.render.units import binary_bytes

BERT_BASE, BERT_LARGE = 109_482_240, 335_141_888
BERT_BASE_FORWARD = 22_348_431_360  # DESIGN.md §8: batch 1, seq 128


# --- parse_size ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "kind", "expected"),
    [
        ("400M", "count", 400 * 10**6),
        ("1.3B", "count", 13 * 10**8),  # B = billion for model sizes
        ("2e12", "count", 2 * 10**12),
        ("2E12", "count", 2 * 10**12),
        ("5T", "count", 5 * 10**12),
        ("2000000", "count", 2_000_000),
        ("16GiB", "bytes", 16 * 2**30),  # 17,179,869,184
        ("16GB", "bytes", 16 * 10**9),
        ("512MiB", "bytes", 512 * 2**20),
        ("2e12", "bytes", 2 * 10**12),
        ("80e9", "bytes", 80 * 10**9),
        ("4096", "bytes", 4096),
    ],
)
def test_parse_size_accepts(text: str, kind: str, expected: int) -> None:
    value = parse_size(text, kind)
    assert value == expected
    assert type(value) is int


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("4OOM", "count"),  # letter O, not zero
        ("1.5", "count"),  # a count must be whole
        ("300m", "count"),  # lower-case m: milli? mega? refused
        ("1.3b", "count"),
        ("-5", "count"),
        ("-5", "bytes"),
        ("", "count"),
        ("", "bytes"),
        ("abc", "count"),
        ("1e", "count"),
        ("1e", "bytes"),
        ("0", "count"),  # a limit of nothing is a mistake
        ("1,000", "count"),
        ("0x10", "count"),
        ("16GiB", "count"),  # byte units are not counts
        ("1.3B", "bytes"),  # 1.3 bytes
        ("1.5", "bytes"),
        ("5T", "bytes"),  # T is not a byte unit (TB and TiB are)
        ("nan", "count"),
        ("inf", "bytes"),
    ],
)
def test_parse_size_refuses(text: str, kind: str) -> None:
    with pytest.raises(SizeError) as info:
        parse_size(text, kind)
    assert repr(text) in str(info.value)  # the message quotes what was written


def test_parse_size_is_exact_beyond_28_digits() -> None:
    assert parse_size("10000000000000000000000000000001", "count") == 10**31 + 1


def test_huge_exponent_is_a_usage_error(cli: Any) -> None:
    result = cli("check", "bert-base", "--max-params", "1e1000000")
    assert result.exit_code == 2
    assert "--max-params" in result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_huge_size_is_refused_quickly() -> None:
    code = (
        "from embedcalc.analysis.budget import SizeError, parse_size\n"
        "try:\n    parse_size('1e999999', 'count')\nexcept SizeError:\n    print('refused')\n"
        "else:\n    print('accepted')\n"
    )
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("parse_size('1e999999') ran for more than 30 s (an algorithmic blow-up, not slowness)")
    assert proc.stdout.strip() == "refused"


def test_check_budget_reports_only_exceeded_limits() -> None:
    budget = Budget(max_params=100, max_memory_bytes=1000, max_flops=None)
    # equal to the limit is fine
    assert check_budget(budget, params=100, memory_bytes=999, flops=10**20) == []
    [violation] = check_budget(budget, params=150, memory_bytes=1000, flops=0)
    assert (violation.flag, violation.limit, violation.value, violation.excess) == (
        "--max-params",
        100,
        150,
        50,
    )
    assert violation.excess_fraction == 0.5
    assert Budget().empty


# --- CLI: check --------------------------------------------------------------------------------------------------


def test_check_bert_large_over_300m(cli: Any) -> None:
    result = cli("check", "bert-large", "--max-params", "300M")
    assert result.exit_code == 5
    assert "--max-params" in result.stderr
    assert "300,000,000" in result.stderr  # the limit
    assert "335,141,888" in result.stderr  # the value
    assert f"{BERT_LARGE - 300_000_000:,}" in result.stderr  # the excess: 35,141,888
    assert "over" in result.stderr
    assert "bert-large" in result.stdout  # the check table was still printed


def test_check_bert_large_under_400m(cli: Any) -> None:
    result = cli("check", "bert-large", "--max-params", "400M")
    assert result.exit_code == 0, result.stderr
    assert "over budget" not in result.stderr


def test_check_exactly_at_the_limit_passes(cli: Any) -> None:
    assert cli("check", "bert-large", "--max-params", str(BERT_LARGE)).exit_code == 0
    assert cli("check", "bert-large", "--max-params", str(BERT_LARGE - 1)).exit_code == 5


@pytest.mark.parametrize("value", ["4OOM", "1.5", "300m", "-5", "abc", "1e"])
def test_check_malformed_size_is_exit_2(cli: Any, value: str) -> None:
    result = cli("check", "bert-large", "--max-params", value)
    assert result.exit_code == 2
    assert "--max-params" in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("flag", "value"), [("--max-memory", "16XB"), ("--max-flops", "2e12x"), ("--max-memory", "1.5")]
)
def test_malformed_memory_and_flops_sizes_name_the_flag(cli: Any, flag: str, value: str) -> None:
    result = cli("analyze", "bert-base", flag, value)
    assert result.exit_code == 2
    assert flag in result.stderr


def test_check_several_targets_one_over(cli: Any) -> None:
    result = cli("check", "bert-base", "bert-large", "--max-params", "200M", "--format", "json")
    assert result.exit_code == 5
    data = json.loads(result.stdout)
    assert data["status"] == "error"
    assert [r["target"] for r in data["results"]] == ["bert-base", "bert-large"]
    assert [(p["path"], p["code"]) for p in data["problems"]] == [("bert-large: --max-params", "over_budget")]


def test_check_invalid_config_wins_over_budget(cli: Any) -> None:
    result = cli("check", "bert-base", "--set", "num_heads=7", "--max-params", "1K")
    assert result.exit_code == 3


def test_check_max_memory(cli: Any) -> None:
    # gpt2 inference, batch 1, seq 128, fp32: the weights alone are 4 * 124,439,808 bytes = 474.7 MiB
    over = cli("check", "gpt2", "--max-memory", "400MiB")
    assert over.exit_code == 5
    assert "--max-memory" in over.stderr
    assert "400.00 MiB" in over.stderr
    assert cli("check", "gpt2", "--max-memory", "1GiB").exit_code == 0


# --- CLI: analyze and compare ------------------------------------------------------------------------------------


def analyze_memory(cli: Any, *args: str) -> int:
    result = cli("analyze", *args, "--format", "json")
    assert result.exit_code == 0, result.stderr
    total: int = json.loads(result.stdout)["results"][0]["memory"]["total_bytes"]
    return total


def test_analyze_max_memory(cli: Any) -> None:
    total = analyze_memory(cli, "bert-base")
    result = cli("analyze", "bert-base", "--max-memory", "100MiB")
    assert result.exit_code == 5
    assert "--max-memory" in result.stderr
    assert "100.00 MiB" in result.stderr  # the limit
    assert binary_bytes(total) in result.stderr  # the value
    assert binary_bytes(total - 100 * 2**20) in result.stderr  # the excess
    assert cli("analyze", "bert-base", "--max-memory", str(total)).exit_code == 0
    assert cli("analyze", "bert-base", "--max-memory", str(total - 1)).exit_code == 5


def test_max_memory_is_per_device(cli: Any) -> None:
    # bert-base fp32 training: 16 N = 1,751,715,840 bytes before activations > 1.5 GiB = 1,610,612,736;
    # on one of 2 TP ranks 16 * 55,262,208 = 884,195,328 plus activations fits
    args = ("bert-base", "--mode", "training", "--max-memory", "1.5GiB")
    assert cli("analyze", *args).exit_code == 5
    assert cli("analyze", *args, "--tp", "2").exit_code == 0


def test_analyze_max_flops(cli: Any) -> None:
    result = cli("analyze", "bert-base", "--max-flops", "2e10")
    assert result.exit_code == 5
    assert "--max-flops" in result.stderr
    assert "20,000,000,000" in result.stderr
    assert f"{BERT_BASE_FORWARD:,}" in result.stderr
    assert f"{BERT_BASE_FORWARD - 2 * 10**10:,}" in result.stderr  # 2,348,431,360 over


def test_max_flops_counts_the_training_step(cli: Any) -> None:
    # forward 22.3e9 < 5e10, but a training step is 3 x forward = 67.0e9 > 5e10
    assert cli("analyze", "bert-base", "--max-flops", "5e10").exit_code == 0
    result = cli("analyze", "bert-base", "--max-flops", "5e10", "--mode", "training")
    assert result.exit_code == 5
    assert f"{3 * BERT_BASE_FORWARD:,}" in result.stderr


def test_analyze_json_over_budget_is_one_document(cli: Any) -> None:
    result = cli("analyze", "bert-base", "--max-params", "100M", "--max-flops", "1e9", "--format", "json")
    assert result.exit_code == 5
    data = json.loads(result.stdout)  # raises on a second document or any trailing text
    assert data["command"] == "analyze"
    assert data["status"] == "error"
    assert len(data["results"]) == 1
    assert data["results"][0]["params"]["total"] == BERT_BASE
    assert {p["code"] for p in data["problems"]} == {"over_budget"}
    assert [p["path"] for p in data["problems"]] == ["bert-base: --max-params", "bert-base: --max-flops"]
    assert "over budget" in result.stderr


def test_analyze_json_within_budget(cli: Any) -> None:
    result = cli("analyze", "bert-base", "--max-params", "110M", "--format", "json")
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert data["status"] == "ok"
    assert data["problems"] == []


def test_compare_budget_applies_to_each_target(cli: Any) -> None:
    result = cli("compare", "bert-base", "bert-large", "--max-params", "200M")
    assert result.exit_code == 5
    assert "bert-large: --max-params 200,000,000 exceeded" in result.stderr
    assert "bert-base: --max-params" not in result.stderr
    assert "bert-large" in result.stdout  # the table was printed first


@pytest.mark.parametrize(
    ("flag", "value"), [("--max-memory", "300MiB"), ("--max-flops", "30e9"), ("--max-params", "200M")]
)
def test_compare_json_over_budget(cli: Any, flag: str, value: str) -> None:
    result = cli("compare", "bert-base", "bert-large", flag, value, "--format", "json")
    assert result.exit_code == 5
    data = json.loads(result.stdout)
    assert data["status"] == "error"
    assert [r["target"] for r in data["results"]] == ["bert-base", "bert-large"]
    paths = [p["path"] for p in data["problems"]]
    assert f"bert-large: {flag}" in paths
    assert all(p["code"] == "over_budget" for p in data["problems"])
    assert flag in result.stderr


@pytest.mark.parametrize("fmt", ["csv", "markdown"])
def test_compare_other_formats_over_budget(cli: Any, fmt: str) -> None:
    result = cli("compare", "bert-base", "bert-large", "--max-params", "200M", "--format", fmt)
    assert result.exit_code == 5
    assert "bert-large" in result.stdout
    assert "--max-params" in result.stderr


def test_budget_in_a_real_process(run_cli: Any) -> None:
    proc = run_cli("check", "bert-large", "--max-params", "300M", "--format", "json")
    assert proc.returncode == 5
    assert "Traceback" not in proc.stderr
    data = json.loads(proc.stdout)
    assert data["status"] == "error"
    assert data["problems"][0]["code"] == "over_budget"
