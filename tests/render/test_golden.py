"""Golden files for the deterministic analytic tables, rendered to a fixed-width (120 columns), colourless console,
and checks that the rendered rows add up to the rendered totals.

Regenerate after an intended change with ``pytest tests/render/test_golden.py --update-goldens`` and review the diff.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from typing import Any

import pytest
from paths import GOLDEN
from rich.console import Console
from rich.table import Table
from rich.text import Text

from embedcalc.analysis.checked import analyze_loaded
from embedcalc.analysis.report import Analysis
from embedcalc.analysis.workload import Workload
from embedcalc.render.tables import compare_table, flops_table, memory_table, params_table, workload_header
from embedcalc.sources.loading import load_target

GOLDEN_DIR = GOLDEN
WIDTH = 120


def analysis(name: str, workload: Workload | None = None) -> Analysis:
    """As the CLI analyses a preset: checked, in the preset's own dtype unless the workload chose one."""
    return analyze_loaded(load_target(name), workload or Workload())


def render(*tables: Table | Text) -> str:
    console = Console(width=WIDTH, color_system=None, record=True, file=io.StringIO(), legacy_windows=False)
    for table in tables:
        console.print(table)
    return console.export_text()


def check_golden(name: str, text: str, update: bool) -> None:
    path = GOLDEN_DIR / name
    if update:
        GOLDEN_DIR.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return
    assert path.exists(), f"{path} is missing; run pytest with --update-goldens to create it"
    expected = path.read_text(encoding="utf-8")
    assert text == expected, f"{name} differs from the golden file; if intended, rerun with --update-goldens"


def analyze_bert_base_text() -> str:
    a = analysis("bert-base")
    return render(
        workload_header(a, ("batch_size", "seq_len")), params_table(a), flops_table(a), memory_table(a)
    )


def compare_text() -> str:
    return render(compare_table([analysis(n) for n in ("bert-base", "gpt2", "transformer-base")]))


GOLDENS: dict[str, Callable[[], str]] = {
    "analyze_bert-base.txt": analyze_bert_base_text,
    "compare_bert-base_gpt2_transformer-base.txt": compare_text,
}


@pytest.mark.parametrize("name", GOLDENS)
def test_golden(name: str, update_goldens: bool) -> None:
    text = GOLDENS[name]()
    assert max(len(line) for line in text.splitlines()) <= WIDTH
    assert "\x1b[" not in text  # no colour codes
    check_golden(name, text, update_goldens)


def test_no_stale_goldens() -> None:
    """Every golden file belongs to a test (torchinfo's flaw: goldens left behind after their test went)."""
    assert sorted(p.name for p in GOLDEN_DIR.glob("*.txt")) == sorted(GOLDENS)


@pytest.mark.parametrize(
    ("args", "name"),
    [
        (["analyze", "bert-base"], "analyze_bert-base.txt"),
        (["compare", "bert-base", "gpt2", "transformer-base"], "compare_bert-base_gpt2_transformer-base.txt"),
    ],
)
def test_cli_prints_the_golden_tables(run_cli: Callable[..., Any], args: list[str], name: str) -> None:
    """The CLI at COLUMNS=120, NO_COLOR=1, TERM=dumb prints exactly the golden text on stdout."""
    proc = run_cli(*args)
    assert proc.returncode == 0, proc.stderr
    golden = (GOLDEN_DIR / name).read_text(encoding="utf-8")
    assert [line.rstrip() for line in proc.stdout.splitlines()] == [
        line.rstrip() for line in golden.splitlines()
    ]


# --- rows add up to totals --------------------------------------------------------------------------------------

_NUMBER = re.compile(r"^-?[\d,]+$")


def table_rows(text: str) -> list[list[str]]:
    """Cells of the body rows of a rendered table (box-drawing separators, headers and captions dropped)."""
    rows = []
    for line in text.splitlines():
        if line.startswith("│"):
            rows.append([cell.rstrip() for cell in line.strip("│").split("│")])
    return rows


def as_int(cell: str) -> int:
    cell = cell.strip()
    assert _NUMBER.match(cell), cell
    return int(cell.replace(",", ""))


def leaf_and_group_sums(rows: list[list[str]], total_label: str) -> tuple[int, int, int]:
    """(sum of leaf rows, sum of group rows, total) for a params/FLOPs table: leaves are indented two spaces."""
    leaves = groups = 0
    total = None
    seen_total = False
    for label, value, *_ in rows:
        name = label.strip()
        if name == total_label:
            total = as_int(value)
            seen_total = True
            continue
        if seen_total:
            continue  # the rows after the total (training step, estimates) are not components
        if label.startswith("   "):  # leaf under a group (one space of cell padding + two of indent)
            leaves += as_int(value)
        else:
            groups += as_int(value)
            if name in ("pooler",):  # an ungrouped leaf counts on both sides
                leaves += as_int(value)
    assert total is not None, total_label
    return leaves, groups, total


@pytest.mark.parametrize("name", ["bert-base", "gpt2", "transformer-base", "bert-large"])
def test_params_table_rows_sum_to_total(name: str) -> None:
    a = analysis(name)
    leaves, groups, total = leaf_and_group_sums(table_rows(render(params_table(a))), "total")
    assert leaves == groups == total == a.params.total


@pytest.mark.parametrize("name", ["bert-base", "gpt2", "transformer-base"])
def test_flops_table_rows_sum_to_forward(name: str) -> None:
    a = analysis(name)
    leaves, groups, total = leaf_and_group_sums(table_rows(render(flops_table(a))), "forward")
    assert leaves == groups == total == a.flops.forward


def test_memory_table_rows_sum_to_total() -> None:
    a = analysis("gpt2", Workload(batch_size=4, seq_len=512, mode="training", dtype="bfloat16"))
    rows = table_rows(render(memory_table(a)))
    kinds = {r[0].strip(): as_int(r[1]) for r in rows if not r[0].startswith("   ")}
    total = kinds.pop("total")
    assert total == a.memory.total_bytes
    assert sum(kinds.values()) == total
    activation_rows = [as_int(r[1]) for r in rows if r[0].strip().startswith("activations:")]
    assert sum(activation_rows) == kinds["activations"]


def test_compare_table_params_groups_sum_to_params() -> None:
    analyses = [analysis(n) for n in ("bert-base", "gpt2", "transformer-base")]
    rows = table_rows(render(compare_table(analyses)))
    params = next(r for r in rows if r[0].strip() == "params")
    groups = [r for r in rows if r[0].strip().startswith("params:")]
    assert len(groups) >= 3
    for column, a in enumerate(analyses, start=1):
        assert as_int(params[column]) == a.params.total
        assert sum(as_int(g[column]) for g in groups) == a.params.total
