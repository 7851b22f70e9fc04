"""Tables at 60, 80 and 120 columns never cut a number or a name (issues 16 and 24); below 40 columns and with
``COLUMNS=0`` every table is written as plain ``key: value`` lines.

Every table of ``analyze``, ``check``, ``sweep``, ``compare`` and ``presets`` is drawn for every shipped preset (and
``check``'s Hugging Face report for every fixture it reads) at each width, on a fixed-width colourless console like
the CLI's stdout. The text must hold no ``…``, no line wider than the terminal, and every exact number of the
JSON output whole: ``109,482,240`` as it is, never ``109,482,…`` or split over two lines.

The per-preset and per-file tables are drawn from the result objects (what the CLI renders); presets, compare and a
sweep over every axis go through the CLI itself, and so does one run of every other command and mode (analyze
with parallelism, training, serving and the time model; compare and sweep with --hardware; hardware, heads, check,
every explain topic, plan, diff, verify, bench) at 80, 60, 39 and 0 columns (:data:`EVERY_COMMAND`). A name may
wrap at its separators (``decoder.layers.0-5.`` / ``attention.norm.weight``, :mod:`embedcalc.render.wrap`):
:func:`assert_name_whole` finds it whole or broken only there.
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
from embedcalc.errors import ConfigError
from embedcalc.render import units
from embedcalc.render.config_tables import check_table, hf_mapping_table
from embedcalc.render.plot import score_share_table, sweep_table
from embedcalc.render.sweep_output import result_json
from embedcalc.render.tables import flops_table, memory_table, params_table
from embedcalc.sources.loading import load_target
from embedcalc.sources.presets import preset_names

WIDTHS = (60, 80, 120)
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


BOX = frozenset("│┃━─┏┓┗┛┡┩╇┼├┤┬┴┳┻╭╮╰╯┌┐└┘")  # what a rich table or panel draws its borders with
KEY_VALUE = re.compile(r"^ *[^ :\n][^:\n]*: \S", re.MULTILINE)  # "  params: 124,439,808"


def assert_key_values(text: str, width: int, what: str) -> None:
    """At ``width`` below 40 (or 0: none), no table or panel is drawn: plain ``key: value`` lines, none cut."""
    assert text.strip(), f"{what} at {width} columns prints nothing"
    assert "…" not in text, f"{what} at {width} columns cuts a cell:\n{text}"
    drawn = sorted(BOX & set(text))
    assert not drawn, (
        f"{what} at {width} columns draws a table ({drawn}) instead of key: value lines:\n{text}"
    )
    assert KEY_VALUE.search(text), f"{what} at {width} columns: no key: value line in\n{text}"
    too_wide = [line for line in text.splitlines() if width and len(line) > width]
    assert not too_wide, f"{what} at {width} columns: lines wider than the terminal:\n{too_wide}"


def assert_drawn(text: str, width: int, what: str) -> None:
    """At 60 columns and more the tables are tables (a header rule or a border), not the key: value fallback."""
    assert_fits(text, width, what)
    assert "╇" in text or "┌" in text or "╭" in text, f"{what} at {width} columns draws no table:\n{text}"


def assert_name_whole(text: str, name: str, what: str) -> None:
    """``name`` appears whole, or wrapped only after a separator with the rest on the next line of its column."""
    pieces = re.split(r"(?<=[./_-])", name)
    gap = r"(?:[^\S\n]*[│┃]?[^\n]*\n[│┃ ]*)?"  # the rest of the line, then the next line's border and indent
    pattern = gap.join(re.escape(p) for p in pieces if p)
    assert re.search(rf"(?<![\w.]){pattern}(?![\w])", text), f"{what}: {name!r} is not shown whole in\n{text}"


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


# --- every command and mode at 80, 60, 39 and 0 columns ----------------------------------------------------------

EVERY_COMMAND: list[tuple[str, ...]] = [
    ("analyze", "gpt2"),
    ("analyze", "t5-base", "--mode", "training"),
    ("analyze", "deepseek-v3", "--mode", "training", "--tp", "8", "--pp", "4", "--dp", "2", "--zero", "1"),
    ("analyze", "llama-3.1-8b", "--hardware", "h100-sxm"),
    ("analyze", "llama-3.1-8b", "--hardware", "h100-sxm", "--concurrency", "16"),
    (
        "analyze",
        "llama-3.1-8b",
        "--hardware",
        "h100-sxm",
        "--mode",
        "training",
        "--train-tokens",
        "1T",
        "--price-per-hour",
        "2",
    ),
    ("analyze", "qwen3-next-80b-a3b", "--hardware", "h100-sxm", "--gen-tokens", "16"),
    ("compare", "bert-base", "gpt2", "llama-3.1-8b", "--hardware", "h100-sxm"),
    ("sweep", "gpt2", "--seq-len", "128,1024", "--hardware", "h100-sxm"),
    ("hardware",),
    ("hardware", "show", "h100-sxm"),
    ("heads", "768"),
    ("check", "gpt2"),
    ("explain", "gpt2"),
    ("explain", "deepseek-v3", "fine-tune"),
    ("explain", "qwen3-8b", "embed-dim", "--lang", "zh"),
    ("plan", "llama-3.1-8b"),
    ("plan", "llama-3.1-8b", "--mode", "training", "--train-tokens", "1T", "--deadline", "30d"),
    pytest.param(("diff", "gpt2", "gpt2", "--set", "num_layers=6"), marks=pytest.mark.torch),  # type: ignore[list-item]
    pytest.param(("diff", "llama-3.1-8b", "qwen3-8b"), marks=pytest.mark.torch),  # type: ignore[list-item]
    pytest.param(("verify", "gpt2", "--tp", "2"), marks=pytest.mark.torch),  # type: ignore[list-item]
]
BENCH = ("--set", "num_layers=1", "--set", "embed_dim=64", "--set", "num_heads=2", "--set", "vocab_size=512",
         "--set", "max_seq_len=64", "--seq-len", "16", "--device", "cpu", "--repeat", "1", "--warmup", "0")  # fmt: skip
EVERY_COMMAND += [  # real timing on a tiny model: slow in the default suite's terms
    pytest.param(("bench", "gpt2", *BENCH), marks=[pytest.mark.torch, pytest.mark.slow]),  # type: ignore[list-item]
    pytest.param(  # type: ignore[list-item]
        ("bench", "gpt2", *BENCH, "--mode", "generate", "--gen-tokens", "4"),
        marks=[pytest.mark.torch, pytest.mark.slow],
    ),
]


def _key(args: tuple[str, ...]) -> str:
    return " ".join(args[:3])


def _torch_or_skip(args: tuple[str, ...]) -> None:
    if args[0] in ("diff", "verify", "bench"):
        pytest.importorskip("torch")


@pytest.mark.parametrize("width", [80, 60])
@pytest.mark.parametrize("args", EVERY_COMMAND, ids=_key)
def test_every_command_is_drawn_whole(args: tuple[str, ...], width: int) -> None:
    _torch_or_skip(args)
    code, text = _run(width, *args)
    assert code == 0, text
    assert_drawn(text, width, " ".join(args))


@pytest.mark.parametrize("width", [39, 0])
@pytest.mark.parametrize("args", EVERY_COMMAND, ids=_key)
def test_every_command_falls_back_to_key_values(args: tuple[str, ...], width: int) -> None:
    _torch_or_skip(args)
    code, text = _run(width, *args)
    assert code == 0, text
    assert_key_values(text, width, " ".join(args))


@pytest.mark.parametrize("width", [80, 60, 39, 0])
def test_diff_names_and_counts_whole(width: int) -> None:
    """The reproducer: at 80 columns diff cut every tensor name to ``decoder.…``."""
    pytest.importorskip("torch")
    args = ("diff", "gpt2", "gpt2", "--set", "num_layers=6")
    code, text = _run(width, *args)
    assert code == 0, text
    data = as_json(*args)["results"][0]
    names = [t["name"] for t in data["tensors"] if ".layers." not in t["name"]]
    names += [n.replace(".layers.0.", ".layers.0-5.") for n in (t["name"] for t in data["tensors"])
              if ".layers.0." in n]  # fmt: skip
    assert names, data.keys()
    for name in names:
        assert_name_whole(text, name, f"diff at {width}")
    totals = data["totals"]
    assert_whole(
        text, counts([totals["params_a"], totals["params_b"], totals["dropped_params"]]), f"diff at {width}"
    )
    if width in (80, 60):
        assert "Left out at" in text  # the low-priority columns it dropped, said


@pytest.mark.parametrize("width", [80, 60, 39, 0])
def test_explain_fine_tune_counts_whole(width: int) -> None:
    """The reproducer: at 80 columns ``explain deepseek-v3 fine-tune`` cut its parameter counts."""
    args = ("explain", "deepseek-v3", "fine-tune")
    code, text = _run(width, *args)
    assert code == 0, text
    answer = as_json(*args)["results"][0]["answer"]
    shown = [n for s in answer["scenarios"] for n in (s["loadable_params"], s["params_to_initialise"])]
    assert_whole(text, counts(shown), f"explain fine-tune at {width}")


@pytest.mark.parametrize("width", [60, 39, 0])
def test_roofline_components_whole(width: int) -> None:
    """The reproducer: at 60 columns the roofline tables were unreadable."""
    args = ("analyze", "llama-3.1-8b", "--hardware", "h100-sxm")
    code, text = _run(width, *args)
    assert code == 0, text
    phases = as_json(*args)["results"][0]["time"]["breakdown"]
    for components in phases.values():
        for key in components:
            assert_name_whole(text, key, f"roofline at {width}")


def test_no_render_module_draws_a_plain_table() -> None:
    """Every table goes through FitTable and every panel through FitPanel (render/fit.py): the one place that keeps
    numbers whole and falls back to key: value lines."""
    render = Path(__file__).resolve().parents[2] / "embedcalc" / "render"
    plain = re.compile(r"(?<![\w.])(?:Table|Panel)\(")
    found = [f"{path.name}:{n}" for path in sorted(render.glob("*.py")) if path.name != "fit.py"
             for n, line in enumerate(path.read_text().splitlines(), 1) if plain.search(line)]  # fmt: skip
    assert not found, f"plain rich tables or panels: {found}"
