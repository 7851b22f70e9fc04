"""Tables at 80 and 120 columns never cut a number or a name (issue 16).

Every table of ``analyze``, ``check``, ``sweep``, ``compare`` and ``presets`` is drawn for every shipped preset (and
``check``'s Hugging Face report for every fixture it reads) at both widths, on a fixed-width colourless console like
the CLI's stdout. The text must hold no ``…``, no line wider than the terminal, and every exact number of the
JSON output whole: ``109,482,240`` as it is, never ``109,482,…`` or split over two lines.

The per-preset and per-file tables are drawn from the result objects (what the CLI renders); presets, compare and a
sweep over every axis go through the CLI itself.
"""

from __future__ import annotations

import functools
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
import typer.main
import typer.testing
from paths import HF_FIXTURES
from rich.console import Console
from typer.testing import CliRunner

from embedcalc.analysis.report import Analysis, analyze
from embedcalc.analysis.sweep import SweepResult, seq_len_curves, sweep_target
from embedcalc.analysis.workload import Workload
from embedcalc.api.sweep import sweep_base as load_base
from embedcalc.cli.app import app
from embedcalc.config.loading import load_target
from embedcalc.config.presets import preset_names
from embedcalc.errors import ConfigError
from embedcalc.render import units
from embedcalc.render.config_tables import check_table, hf_mapping_table
from embedcalc.render.plot import score_share_table, sweep_table
from embedcalc.render.sweep_output import result_json
from embedcalc.render.tables import flops_table, memory_table, params_table

WIDTHS = (80, 120)
PRESETS = preset_names()
HF_FILES = sorted(HF_FIXTURES.glob("*.json"))
SWEEP_AXES = {"batch_size": (1, 8), "seq_len": (64, 128)}  # workload axes: valid on every preset


def assert_fits(text: str, width: int, what: str) -> None:
    assert "…" not in text, f"{what} at {width} columns cuts a cell:\n{text}"
    too_wide = [line for line in text.splitlines() if len(line) > width]
    assert not too_wide, f"{what} at {width} columns: lines wider than the terminal:\n{too_wide}"


def assert_whole(text: str, shown: list[str], what: str) -> None:
    """Each string of ``shown`` appears in ``text`` with nothing of a number or a name glued to either side."""
    for item in shown:
        pattern = rf"(?<![\w.])(?<!\d,){re.escape(item)}(?!\w|,\d)"  # "1,234" inside "1,234,567" is not whole
        assert re.search(pattern, text), f"{what}: {item!r} is not shown whole in\n{text}"


def counts(values: list[int | None]) -> list[str]:
    return [units.count(v) for v in values if v]


# --- the per-preset tables, from the result objects -----------------------------------------------------------


def draw(width: int, *tables: Any) -> str:
    """What the CLI's stdout console prints (cli/output.py: soft_wrap off), at ``width`` columns, without colour."""
    out = io.StringIO()
    console = Console(width=width, file=out, color_system=None, soft_wrap=False, highlight=False)
    for table in tables:
        console.print(table)
    return out.getvalue()


@functools.cache
def analysis(name: str) -> Analysis:
    return analyze(name, load_target(name).config, Workload())


def analysis_of(loaded: Any) -> Analysis:
    return analyze(loaded.target, loaded.config, Workload())


@functools.cache
def sweep(name: str) -> SweepResult:
    return sweep_target(load_base(name), SWEEP_AXES, Workload())


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", PRESETS)
def test_analyze_and_check(name: str, width: int) -> None:
    a = analysis(name)
    result = a.to_json()  # what `analyze --format json` prints
    params, flops, memory = result["params"], result["flops"], result["memory"]
    numbers = [params["total"], *params["breakdown"].values(), *flops["breakdown"].values()]
    numbers += [flops["forward"], flops["forward_causal"], flops["training_step"]]
    numbers += [v for k, v in memory.items() if k.endswith("_bytes") and isinstance(v, int)]
    text = draw(width, params_table(a), flops_table(a), memory_table(a))
    assert_fits(text, width, f"analyze {name}")
    assert_whole(text, [name, *counts(numbers)], f"analyze {name}")
    text = draw(width, check_table(name, a.config.derived(), params["total"]))
    assert_fits(text, width, f"check {name}")
    assert_whole(text, [name, units.count(params["total"])], f"check {name}")


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", PRESETS)
def test_sweep(name: str, width: int) -> None:
    result = sweep(name)
    text = draw(width, sweep_table(result, 50), *(score_share_table(c) for c in seq_len_curves(result)))
    assert_fits(text, width, f"sweep {name}")
    shown = []
    for point in result_json(result)["points"]:  # what `sweep --format json` prints
        shown += [units.si(point["params"]["total"]), units.si(point["flops"]["forward"])]
        shown += [units.si(point["flops"]["attention_scores"])]
        shown.append(units.binary_bytes(point["memory"]["inference_total_bytes"]))
    assert_whole(text, shown, f"sweep {name}")


@functools.cache
def hf_file(path: Path) -> Any:
    try:
        return load_target(str(path))
    except ConfigError:
        return None  # a family the reader does not take (the reference file of a layer-schema preset)


# 80 columns (the strictest) by default; 120 as well in the slow suite
@pytest.mark.parametrize("width", [80, pytest.param(120, marks=pytest.mark.slow)])
@pytest.mark.parametrize("path", HF_FILES, ids=[p.stem for p in HF_FILES])
def test_check_hugging_face_report(path: Path, width: int) -> None:
    loaded = hf_file(path)
    if loaded is None or loaded.hf is None:
        pytest.skip(f"{path.name}: not a family the Hugging Face reader takes")
    params = analysis_of(loaded).params.total
    text = draw(
        width, check_table(str(path), loaded.config.derived(), params), hf_mapping_table(str(path), loaded.hf)
    )
    assert_fits(text, width, f"check {path.name}")
    report = loaded.hf.as_dict()  # what `check --format json` prints under "hf"
    keys = [m["key"] for m in report["mapped"] if not m["key"].startswith("(")] + [
        i["key"] for i in report["ignored"]
    ]
    keys = [key for joined in keys for key in joined.split(", ")]  # "a, b": a field read from two keys
    fields = [m["field"] for m in report["mapped"]]
    assert_whole(text, keys + fields + [units.count(params)], f"check {path.name}")


# --- whole commands through the CLI ---------------------------------------------------------------------------


_COMMAND = typer.main.get_command(app)


@pytest.fixture(autouse=True)
def _one_command(monkeypatch: pytest.MonkeyPatch) -> None:
    """Build the click command once, as one process does, not for each run here."""
    monkeypatch.setattr(typer.testing, "_get_command", lambda _app: _COMMAND)


@functools.cache
def _run(width: int, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": str(width), "NO_COLOR": "1"})
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.stdout


def table(width: int, *args: str) -> str:
    code, text = _run(width, *args)
    assert code == 0, text
    assert_fits(text, width, " ".join(args))
    return text


def as_json(*args: str) -> dict[str, Any]:
    code, text = _run(200, *args, "--format", "json")
    assert code == 0, text
    data: dict[str, Any] = json.loads(text)
    return data


@pytest.mark.parametrize("width", WIDTHS)
def test_presets(width: int) -> None:
    text = table(width, "presets")
    rows = as_json("presets")["results"]
    assert_whole(text, [r["name"] for r in rows], "presets")
    assert_whole(text, counts([r["params"] for r in rows]), "presets")


@pytest.mark.parametrize("width", WIDTHS)
def test_compare_every_preset(width: int) -> None:
    """All presets side by side: more targets than fit, so the table is stacked, never cut."""
    text = table(width, "compare", *PRESETS)
    shown = list(PRESETS)
    for result in as_json("compare", *PRESETS)["results"]:
        flops = result["flops"]
        shown += counts(
            [result["params"]["total"], flops["forward"], flops["forward_causal"], flops["training_step"]]
        )
    assert_whole(text, shown, "compare")


@pytest.mark.parametrize("width", WIDTHS)
def test_sweep_over_every_axis(width: int) -> None:
    """Six swept axes and invalid points: at 80 columns the swept values share one column, each value whole."""
    args = ("sweep", "bert-base", "--embed-dim", "768,1000", "--num-heads", "12,16", "--num-layers", "12,24",
            "--ffn-dim", "3072,4096", "--batch-size", "1,8", "--seq-len", "128,1024")  # fmt: skip
    text = table(width, *args)
    points = [p for p in as_json(*args)["results"][0]["points"][:50] if p["valid"]]
    shown = [units.si(p["params"]["total"]) for p in points] + [
        units.si(p["flops"]["forward"]) for p in points
    ]
    assert_whole(text, shown, "sweep")
    assert "exceeds" in text  # the invalid points keep their reason
