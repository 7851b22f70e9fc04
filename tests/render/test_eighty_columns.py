"""Issue 34, item 4: at 80 columns no table wraps a number or a reason over more than two lines, plan's serving
table fits a screen with TTFT shown, and --help writes every choice list whole.

A drawn table's rows are read back from the text: a row starts on a line whose first cell is not blank (every
table here labels each row in its first column), and its height is the number of lines until the next row.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

import embedcalc
from embedcalc.cli.app import app
from embedcalc.config.dtypes import DTYPES
from embedcalc.render.roofline import summary_rows, summary_table

runner = CliRunner()
COLUMNS = {"COLUMNS": "80"}


def row_heights(text: str) -> list[tuple[str, int]]:
    """(first line, lines) of every body row of every box-drawn table in ``text``."""
    rows: list[tuple[str, int]] = []
    for line in text.splitlines():
        if not line.startswith("│"):
            continue
        first = line.split("│")[1]
        if first.strip():
            rows.append((line, 1))
        elif rows:
            rows[-1] = (rows[-1][0], rows[-1][1] + 1)
    return rows


def assert_rows_at_most_two_lines(text: str, what: str) -> None:
    tall = [(line, n) for line, n in row_heights(text) if n > 2]
    assert row_heights(text), f"{what}: no table rows in\n{text}"
    assert not tall, f"{what}: rows over more than two lines: {tall}\n{text}"


def test_plan_70b_serving_fits_a_screen_at_80_columns_with_ttft() -> None:
    args = ["plan", "llama-3.1-70b", "--concurrency", "32"]
    result = runner.invoke(app, args, env=COLUMNS)
    assert result.exit_code == 0, result.output
    text = result.stdout
    lines = text.splitlines()
    assert len(lines) <= 80, f"{len(lines)} lines:\n{text}"
    assert max(len(line) for line in lines) <= 80
    assert "TTFT" in lines[4] or "TTFT" in lines[5], text  # a header of the main table
    assert_rows_at_most_two_lines(text, "plan at 80 columns")
    rows = json.loads(runner.invoke(app, [*args, "--format", "json"]).stdout)["results"][0]["layouts"]
    served = [r for r in rows if r["times"] is not None][:20]
    from embedcalc.units import seconds

    for row in served:  # each shown TTFT whole on its row's line
        ttft = seconds(row["times"]["ttft_s"])
        assert any(ttft in line and row["layout"]["device"] in line for line in lines), (ttft, text)
    # the layouts that cannot serve: one line each, the figure that decides
    assert re.search(r"│ t4 +│ TP 1, 2, 4, 8 +│ weights 16\.43 GiB > 14\.40 GiB usable +│", text), text


def test_plan_status_codes_have_their_legend() -> None:
    result = runner.invoke(app, ["plan", "llama-3.1-70b", "--hardware", "a100-80gb,l4", "--concurrency", "64",
                                 "--max-ttft", "0.2"], env=COLUMNS)  # fmt: skip
    assert result.exit_code == 0, result.output
    assert re.search(r"│ TTFT +│", result.stdout), result.stdout  # the code in the status column
    assert "TTFT: misses --max-ttft" in " ".join(result.stdout.split())  # and its meaning below
    assert_rows_at_most_two_lines(result.stdout, "plan with objectives")


def test_plan_reasons_keep_their_sentence_and_code() -> None:
    from embedcalc.analysis.plan.rows import REASON_CODES, reason_code

    result = embedcalc.plan("llama-3.1-70b", hardware=["h100-sxm", "l4"], concurrency=64, max_ttft=0.2)
    reasons = [reason for row in result.rows for reason in row.reasons]
    assert {reason_code(r) for r in reasons} >= {"weights", "TTFT"}
    assert all(reason_code(r) in REASON_CODES for r in reasons)
    weights = next(r for r in reasons if reason_code(r) == "weights")
    assert (
        weights.startswith("weights do not fit: ") and "usable = 90% of" in weights
    )  # JSON keeps the sentence
    assert json.loads(json.dumps(result.to_json()))["layouts"][-1]["reasons"][0].startswith(
        ("weights", "TTFT")
    )


TRAINING = {"mode": "training", "hardware": "h100-sxm", "train_tokens": "100B", "parallel": {"dp": 8},
            "seq_len": 2048, "batch_size": 8, "global_batch": 512, "price_per_hour": 2.5}  # fmt: skip


@pytest.mark.parametrize(
    "kwargs",
    [{"hardware": "h100-sxm", "seq_len": 1024, "gen_tokens": 256}, TRAINING],
    ids=["inference", "training"],
)
def test_analyze_time_table_keeps_each_value_on_one_line_at_80_columns(kwargs: dict[str, Any]) -> None:
    model = "pythia-1.4b" if kwargs.get("mode") == "training" else "llama-3.1-8b"
    analysis = embedcalc.analyze(model, **kwargs)
    assert analysis.time is not None
    table = summary_table(analysis, analysis.time)
    console = Console(width=80, record=True, color_system=None, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(table)
    text = console.export_text()
    assert_rows_at_most_two_lines(text, "analyze's time table")
    for _, value in summary_rows(analysis.time):
        assert any(value in line for line in text.splitlines()), f"{value!r} wraps:\n{text}"


def test_sweep_problem_column_is_a_code_with_its_message_below() -> None:
    result = runner.invoke(app, ["sweep", "llama-3.1-8b", "--num-heads", "30:34:+1"], env=COLUMNS)
    assert result.exit_code == 0, result.output
    assert_rows_at_most_two_lines(result.stdout, "sweep at 80 columns")
    flat = " ".join(result.stdout.split())
    assert "heads_indivisible: --num-heads (30) must divide embed_dim (4096)" in flat


HELP_COMMANDS = ["analyze", "compare", "sweep", "plan", "bench", "verify", "check", "explain"]


@pytest.mark.parametrize("command", HELP_COMMANDS)
def test_help_writes_choice_lists_whole_at_80_columns(command: str) -> None:
    result = runner.invoke(app, [command, "--help"], env=COLUMNS)
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert "…" not in text, text
    assert max(len(line) for line in text.splitlines()) <= 80
    if "--dtype" in text and command != "bench":
        for dtype in DTYPES:  # each choice whole, never folded inside (fp8|mx / fp4)
            assert re.search(rf"(?<![\w|]){dtype}(?![\w|])", text), (dtype, text)
    if "--optimizer" in text:
        assert "paged_adamw_8bit" in text


def test_finetune_plan_reads_at_80_columns_with_its_status_codes() -> None:
    result = runner.invoke(app, ["plan", "llama-3.1-70b", "--mode", "training", "--train-tokens", "1B", "--peft",
                                 "lora", "--hardware", "l4,h100-sxm"], env=COLUMNS)  # fmt: skip
    assert result.exit_code == 5, result.output  # lora fits no device: exit 5, the table still printed
    assert_rows_at_most_two_lines(result.stdout, "fine-tuning plan at 80 columns")
    assert re.search(r"│ h100-sxm │ lora +│ +144\.00 GiB / 80\.00 GiB │ .*│ memory │", result.stdout), (
        result.stdout
    )
    assert "memory: the memory per device exceeds the device's even with recompute full" in " ".join(
        result.stdout.split()
    )


def test_a_reason_keeps_its_code_through_copy_and_pickle() -> None:
    import copy
    import pickle

    from embedcalc.analysis.plan.rows import Reason, reason_brief, reason_code

    reason = Reason("memory", "memory does not fit: 2 GiB per device > 1 GiB", "memory 2 GiB > 1 GiB")
    for again in (copy.copy(reason), copy.deepcopy(reason), pickle.loads(pickle.dumps(reason))):
        assert (
            again == reason
            and reason_code(again) == "memory"
            and reason_brief(again) == "memory 2 GiB > 1 GiB"
        )
