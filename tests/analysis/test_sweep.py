"""``embedcalc sweep``: axis parsing, the crossover, the vectorised grid against the per-config analyzer, overflow
fallback, invalid points, output formats and plots.

The grid (``analysis/grid.py``) is a second implementation of the closed forms; here it is compared, point by
point, with ``analysis.report.analyze()`` run on the config built for that point (``sweep.reference.evaluate_point``).
"""

from __future__ import annotations

import csv
import io
import json
import random
import struct
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from json_contract import MEMORY_KEYS

from embedcalc.analysis.grid import INT64_SAFE_BOUND, grid_bound
from embedcalc.analysis.sweep import AxisError, SweepResult, evaluate_point, parse_axis, seq_len_curves
from embedcalc.analysis.sweep import sweep_target as sweep_loaded
from embedcalc.analysis.workload import Workload
from embedcalc.api.sweep import sweep_base as load_base
from embedcalc.cli.sweep import CSV_COLUMNS, result_csv
from embedcalc.errors import EmbedcalcError
from embedcalc.render.plot import write_atomically


def sweep_target(
    target: str, overrides: Any, axes: Any, workload: Workload, force_python_ints: bool = False
) -> SweepResult:
    """Load TARGET with ``--set`` as the CLI does, then sweep it."""
    return sweep_loaded(load_base(target, tuple(overrides)), axes, workload, force_python_ints)


GQA_SWIGLU = (
    "num_kv_heads=4",
    "activation=swiglu",
    "norm=rmsnorm",
    "position=rope",
    "bias=false",
    "tie_embeddings=false",
    "dropout=0.0",
    "ffn_dim=2048",
    "max_seq_len=4096",
)


# --- axes ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), [
    ("128,256,512", (128, 256, 512)),
    (" 7 ", (7,)),
    ("1:10:+4", (1, 5, 9)),
    ("384:1536:+384", (384, 768, 1152, 1536)),
    ("64:1024:x2", (64, 128, 256, 512, 1024)),
    ("3:100:x3", (3, 9, 27, 81)),
    ("5:5:+1", (5,)),
])  # fmt: skip
def test_parse_axis(text: str, expected: tuple[int, ...]) -> None:
    assert parse_axis(text) == expected


def test_parse_axis_issue_examples_are_inclusive() -> None:
    embed = parse_axis("384:12288:+384")
    assert len(embed) == 32 and embed[0] == 384 and embed[-1] == 12288
    seq = parse_axis("64:16384:x2")
    assert seq == tuple(64 * 2**k for k in range(9))


@pytest.mark.parametrize("text", [
    "", "12,,3", "0", "-4", "1.5", "abc", "3,3", "10:1:+1", "1:10", "1:10:+0", "1:10:x1", "1:10:/2", "1:2:3:4",
    "1:10:+", "1:1000000000:+1",
])  # fmt: skip
def test_parse_axis_rejects(text: str) -> None:
    with pytest.raises(AxisError):
        parse_axis(text)


@pytest.mark.parametrize(("flag", "value"), [
    ("--seq-len", "64:16384:x1"), ("--embed-dim", "768,abc"), ("--num-heads", "0"), ("--batch-size", "1:8"),
    ("--num-layers", "12,12"), ("--ffn-dim", "1.5"),
])  # fmt: skip
def test_malformed_axis_exits_2_naming_the_flag(cli: Any, flag: str, value: str) -> None:
    result = cli("sweep", "bert-base", flag, value)
    assert result.exit_code == 2
    assert flag in result.stderr
    assert result.stdout == ""


# --- the crossover ------------------------------------------------------------------------------------------------


def by_hand(d: int, q: int, kv: int, f: int, gated: bool) -> int | float:
    """n* = (2 d (q + 2 kv) + 2 q d + 2 d f_in + 2 f d) / (4 q), written out independently of crossover.py."""
    f_in = 2 * f if gated else f
    value = Fraction(2 * d * (q + 2 * kv) + 2 * q * d + 2 * d * f_in + 2 * f * d, 4 * q)
    return int(value) if value.denominator == 1 else float(value)


@pytest.mark.parametrize(("target", "overrides", "expected"), [
    ("bert-base", (), 4608),
    ("bert-large", (), 6144),
    ("gpt2", (), 4608),
    # GQA: 4 KV heads of 64 for 12 query heads: (2·768·(768 + 512) + 2·768² + 4·768·3072) / (4·768) = 4096
    ("gpt2", ("num_kv_heads=4",), by_hand(768, 768, 256, 3072, gated=False)),
    # SwiGLU with ffn_dim 2731: f_in = 5462, n* = (2·2304 + 2·768 + 2·5462 + 2·2731) / 4 = 5632.5
    ("gpt2", ("activation=swiglu", "ffn_dim=2731"), by_hand(768, 768, 768, 2731, gated=True)),
    ("gpt2", GQA_SWIGLU, by_hand(768, 768, 256, 2048, gated=True)),
])  # fmt: skip
def test_crossover_exact(cli: Any, target: str, overrides: tuple[str, ...], expected: int | float) -> None:
    sets = [a for o in overrides for a in ("--set", o)]
    result = cli("sweep", target, "--seq-len", "128,256", *sets, "--format", "json")
    assert result.exit_code == 0, result.stderr
    entry = json.loads(result.stdout)["results"][0]
    assert entry["crossover_seq_len"] == expected
    assert type(entry["crossover_seq_len"]) is type(expected)
    assert all(p["crossover_seq_len"] == expected for p in entry["points"])


def test_hand_values() -> None:
    assert by_hand(768, 768, 256, 3072, gated=False) == 4096
    assert by_hand(768, 768, 768, 2731, gated=True) == 5632.5


def test_crossover_per_point_follows_swept_shape() -> None:
    axes = {"num_heads": (4, 8, 12, 16), "seq_len": (128,)}
    result = sweep_target("gpt2", GQA_SWIGLU, axes, Workload())
    column = result.crossover_column()
    for i, h in enumerate(axes["num_heads"]):
        hd = 768 // h
        assert column[i] == by_hand(768, 768, 4 * hd, 2048, gated=True)


# --- the grid against the per-config analyzer ---------------------------------------------------------------------

CASES: list[tuple[str, tuple[str, ...], dict[str, tuple[int, ...]], Workload]] = [
    (
        "bert-base",
        (),
        {
            "embed_dim": (384, 768, 1000, 1024),
            "num_heads": (8, 12, 16),
            "num_layers": (1, 12),
            "seq_len": (64, 512, 1024),
            "batch_size": (1, 3),
        },
        Workload(attention="eager"),
    ),
    (
        "bert-base",
        ("ffn_dim=null",),
        {"embed_dim": (256, 512, 768, 1024), "seq_len": (32, 128, 512)},
        Workload(dtype="bfloat16", mode="training", recompute="selective"),
    ),
    (
        "gpt2",
        (),
        {
            "num_layers": (1, 6, 12),
            "ffn_dim": (1000, 3072),
            "seq_len": (1, 100, 1024, 2048),
            "batch_size": (1, 4, 7),
        },
        Workload(dtype="float16", optimizer="sgd", gen_tokens=16),
    ),
    (
        "transformer-base",
        (),
        {"embed_dim": (256, 512), "num_layers": (2, 4, 6), "seq_len": (7, 128, 600)},
        Workload(tgt_len=50, attention="eager"),
    ),
    (
        "transformer-base",
        ("num_decoder_layers=null",),
        {"num_layers": (2, 4, 6), "seq_len": (16, 128, 256), "num_heads": (4, 8)},
        Workload(dtype="int4"),
    ),
    (
        "gpt2",
        GQA_SWIGLU,
        {
            "num_heads": (4, 6, 8, 12, 16),
            "embed_dim": (672, 768, 1536),
            "seq_len": (64, 4096),
            "batch_size": (1, 2),
        },
        Workload(optimizer="adafactor", recompute="full"),
    ),
    (
        "bert-base",
        (),
        {"num_layers": (2, 12), "seq_len": (32, 128, 512), "batch_size": (1, 8)},
        Workload(mode="training", attention="eager", recompute="selective"),
    ),
    (
        "transformer-base",
        (),
        {"num_layers": (2, 6), "seq_len": (16, 300), "embed_dim": (256, 512)},
        Workload(mode="training", attention="eager", recompute="full", tgt_len=40),
    ),
    (
        "gpt2",
        GQA_SWIGLU,
        {"num_layers": (1, 4), "seq_len": (64, 1024)},
        Workload(mode="training", dtype="bfloat16", recompute="full"),
    ),
    (
        "bert-large",
        ("head_dim=64",),
        {"num_heads": (8, 16, 17), "seq_len": (64, 512), "num_layers": (3, 24)},
        Workload(dtype="int8"),
    ),
]


def _grid_point(result: SweepResult, i: int) -> dict[str, Any]:
    assert result.grid is not None
    out = {k: v[i] for k, v in result.grid.columns.items() if not k.startswith("crossover_")}
    out["crossover_seq_len"] = result.crossover_column()[i]
    return out


@pytest.mark.parametrize("force_python_ints", [False, True], ids=["int64", "python-int"])
def test_grid_equals_per_config_analyzer(force_python_ints: bool) -> None:
    """>= 200 sampled points across presets, architectures and workloads: every quantity identical."""
    rng = random.Random(20240605)
    checked = invalid = 0
    for target, overrides, axes, workload in CASES:
        result = sweep_target(target, overrides, axes, workload, force_python_ints=force_python_ints)
        assert result.grid is not None
        assert result.grid.method == ("python-int" if force_python_ints else "int64")
        base = load_base(target, overrides)
        for i in rng.sample(range(result.size), min(result.size, 100)):
            point = {a: result.axes[a][result.index[a][i]] for a in result.axes}
            expected = evaluate_point(base, point, workload)
            if "problems" in expected:
                assert not result.valid[i], point
                assert expected["problems"][0].code in {p.code for p in result.problems_at(i)}
                invalid += 1
                continue
            assert result.valid[i], (target, point, result.problems_at(i))
            got = _grid_point(result, i)
            assert set(got) == set(expected), set(got) ^ set(expected)
            for key, value in expected.items():
                assert got[key] == value, (target, overrides, point, key, got[key], value)
                assert isinstance(got[key], int | float | np.integer)
            assert type(got["crossover_seq_len"]) is type(expected["crossover_seq_len"])
            checked += 1
    assert checked >= 200
    assert invalid >= 20


def test_overflow_falls_back_to_python_ints_and_stays_exact(cli: Any) -> None:
    """A grid whose values pass 2**63 is evaluated with Python ints, exactly, and the user is told."""
    overrides = ("max_seq_len=4294967296",)
    axes = {"embed_dim": (12288, 12288 * 2**18), "seq_len": (2048, 2**31), "batch_size": (1, 2**20)}
    assert grid_bound(load_base("gpt3-175b", overrides).config_at({}), Workload(), axes) >= INT64_SAFE_BOUND
    result = sweep_target("gpt3-175b", overrides, axes, Workload())
    assert result.grid is not None and result.grid.method == "python-int"
    assert result.valid.all()
    base = load_base("gpt3-175b", overrides)
    biggest = 0
    for i in range(result.size):
        point = {a: result.axes[a][result.index[a][i]] for a in result.axes}
        expected = evaluate_point(base, point, Workload())
        got = _grid_point(result, i)
        for key, value in expected.items():
            assert got[key] == value and type(got[key]) is type(value), (point, key)
        biggest = max(biggest, expected["flops_forward"])
    assert biggest > 2**63  # int64 would have wrapped
    cli_result = cli(
        "sweep",
        "gpt3-175b",
        "--set",
        overrides[0],
        "--embed-dim",
        f"12288,{12288 * 2**18}",
        "--seq-len",
        "2048,2147483648",
        "--format",
        "json",
    )
    assert cli_result.exit_code == 0, cli_result.stderr
    assert "Python integers" in cli_result.stderr
    points = json.loads(cli_result.stdout)["results"][0]["points"]
    assert max(p["flops"]["forward"] for p in points) > 2**63


def test_small_grids_stay_int64() -> None:
    result = sweep_target("bert-base", (), {"seq_len": (128, 512)}, Workload())
    assert result.grid is not None and result.grid.method == "int64"
    assert result.grid["params"].dtype == np.int64


@given(
    embed=st.lists(st.integers(1, 2**21), min_size=1, max_size=3, unique=True),
    heads=st.lists(st.integers(1, 64), min_size=1, max_size=3, unique=True),
    seq=st.lists(st.integers(1, 2**24), min_size=1, max_size=3, unique=True),
    batch=st.lists(st.integers(1, 2**12), min_size=1, max_size=2, unique=True),
)
def test_bound_covers_every_value(
    embed: list[int], heads: list[int], seq: list[int], batch: list[int]
) -> None:
    """The bound that decides int64 is at least every value the grid produces (computed with Python ints)."""
    axes = {
        "embed_dim": tuple(embed),
        "num_heads": tuple(heads),
        "seq_len": tuple(seq),
        "batch_size": tuple(batch),
    }
    workload = Workload(attention="eager")
    result = sweep_target(
        "gpt2", ("max_seq_len=16777216", "head_dim=64"), axes, workload, force_python_ints=True
    )
    assert result.grid is not None
    bound = grid_bound(
        load_base("gpt2", ("max_seq_len=16777216", "head_dim=64")).config_at({}), workload, axes
    )
    assert all(int(v) <= bound for column in result.grid.columns.values() for v in column)


# --- invalid points -----------------------------------------------------------------------------------------------


def test_invalid_points_are_reported_with_reasons() -> None:
    axes = {"embed_dim": (768, 1000), "num_heads": (12, 16), "seq_len": (256, 1024)}
    result = sweep_target("bert-base", (), axes, Workload())
    rows = {
        (
            result.axes["embed_dim"][result.index["embed_dim"][i]],
            result.axes["num_heads"][result.index["num_heads"][i]],
            result.axes["seq_len"][result.index["seq_len"][i]],
        ): i
        for i in range(result.size)
    }
    assert result.size == 8
    assert result.valid[rows[768, 12, 256]] and result.valid[rows[768, 16, 256]]
    codes = {key: [p.code for p in result.problems_at(i)] for key, i in rows.items()}
    assert codes[1000, 12, 256] == ["heads_indivisible"]
    assert codes[1000, 16, 1024] == ["heads_indivisible", "seq_len_over_context"]
    assert codes[768, 12, 1024] == ["seq_len_over_context"]
    message = result.problems_at(rows[1000, 12, 256])[0].message
    assert "--num-heads (12)" in message and "--embed-dim (1000)" in message


def test_rope_and_kv_rules_per_point() -> None:
    overrides = ("position=rope", "num_kv_heads=4", "max_seq_len=1024")
    result = sweep_target("gpt2", overrides, {"embed_dim": (768, 840), "num_heads": (8, 12, 6)}, Workload())
    by_point = {
        (
            result.axes["embed_dim"][result.index["embed_dim"][i]],
            result.axes["num_heads"][result.index["num_heads"][i]],
        ): [p.code for p in result.problems_at(i)]
        for i in range(result.size)
    }
    assert by_point[768, 8] == [] and by_point[768, 12] == []
    assert by_point[768, 6] == ["kv_heads_indivisible"]  # 6 % 4
    assert by_point[840, 8] == ["rope_head_dim_odd"]  # 840 / 8 = 105
    assert by_point[840, 12] == []  # 840 / 12 = 70
    base = load_base("gpt2", overrides)
    for (d, h), codes in by_point.items():
        expected = evaluate_point(base, {"embed_dim": d, "num_heads": h}, Workload())
        assert [p.code for p in expected.get("problems", [])] == codes


def test_problem_no_axis_causes_exits_3(cli: Any) -> None:
    result = cli("sweep", "bert-base", "--set", "num_kv_heads=5", "--seq-len", "128,256")
    assert result.exit_code == 3
    assert "num_kv_heads" in result.stderr
    fixed_seq = cli("sweep", "bert-base", "--num-layers", "1,2", "--set", "max_seq_len=64")  # seq_len 128
    assert fixed_seq.exit_code == 3 and "max_seq_len" in fixed_seq.stderr


def test_all_points_invalid_still_reports_them(cli: Any) -> None:
    result = cli("sweep", "bert-base", "--num-heads", "7,11", "--format", "json")
    assert result.exit_code == 0, result.stderr
    points = json.loads(result.stdout)["results"][0]["points"]
    assert [p["valid"] for p in points] == [False, False]
    assert all(p["problems"][0]["code"] == "heads_indivisible" and p["params"] is None for p in points)


def test_too_many_points_exits_2(cli: Any) -> None:
    result = cli("sweep", "bert-base", "--embed-dim", "1:100000:+1", "--seq-len", "1:100:+1")
    assert result.exit_code == 2
    assert "points" in result.stderr


# --- output formats -----------------------------------------------------------------------------------------------


def test_json_points(cli: Any) -> None:
    result = cli("sweep", "bert-base", "--seq-len", "128,1024", "--batch-size", "1,2", "--format", "json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["command"] == "sweep" and data["status"] == "ok"
    assert data["axes"] == {"batch_size": [1, 2], "seq_len": [128, 1024]}
    assert data["workload"]["seq_len"] is None and data["workload"]["batch_size"] is None
    entry = data["results"][0]
    assert entry["crossover_seq_len"] == 4608
    assert len(entry["points"]) == 4
    first = entry["points"][0]
    assert (first["batch_size"], first["seq_len"], first["valid"]) == (1, 128, True)
    assert first["params"]["total"] == 109_482_240
    assert first["flops"]["forward"] == 22_348_431_360
    assert first["flops"]["attention_scores"] + first["flops"]["other"] == first["flops"]["forward"]
    assert set(first["memory"]) >= {*MEMORY_KEYS, "inference_total_bytes", "training_total_bytes"}
    assert first["memory"]["total_bytes"] == first["memory"]["inference_total_bytes"]
    bad = entry["points"][1]
    assert bad["valid"] is False and bad["flops"] is None
    assert bad["problems"][0]["code"] == "seq_len_over_context"
    assert "invalid" in result.stderr  # the note goes to stderr, never into the JSON


def test_csv(cli: Any) -> None:
    result = cli(
        "sweep",
        "gpt2",
        "--seq-len",
        "128,2048",
        "--num-heads",
        "12,7",
        "--mode",
        "training",
        "--format",
        "csv",
    )
    assert result.exit_code == 0, result.stderr
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert tuple(rows[0]) == CSV_COLUMNS
    assert len(rows) == 4
    ok = rows[0]
    assert (ok["num_heads"], ok["seq_len"], ok["valid"]) == ("12", "128", "true")
    assert int(ok["params"]) == 124_439_808
    assert int(ok["flops_attention_scores"]) + int(ok["flops_other"]) == int(ok["flops_forward"])
    assert int(ok["total_bytes"]) == int(ok["training_total_bytes"])
    assert int(ok["gradients_bytes"]) > 0 and ok["kv_cache_bytes"] == "0"
    assert ok["crossover_seq_len"] == "4608" and ok["problems"] == ""
    invalid = [r for r in rows if r["valid"] == "false"]
    assert {r["problem_codes"] for r in invalid} == {
        "heads_indivisible",
        "seq_len_over_context",
        "heads_indivisible;seq_len_over_context",
    }
    assert all(r["params"] == "" for r in invalid)


def test_csv_quotes_awkward_text(write_config: Any) -> None:
    path = write_config(
        {
            "name": 'a "quoted", model',
            "architecture": "encoder",
            "vocab_size": 100,
            "max_seq_len": 64,
            "embed_dim": 64,
            "num_heads": 4,
            "num_layers": 1,
        }
    )
    result = sweep_target(str(path), (), {"seq_len": (32, 128)}, Workload())
    rows = list(csv.DictReader(io.StringIO(result_csv(result))))
    assert rows[1]["problems"].startswith('--seq-len 128 exceeds max_seq_len 64 of a "quoted", model')


def test_table_shows_crossover_and_score_share(cli: Any) -> None:
    result = cli("sweep", "gpt2", "--set", "max_seq_len=8192", "--seq-len", "1024:8192:x2")
    assert result.exit_code == 0, result.stderr
    assert "crossover n* = 4608" in result.stdout
    assert "Attention-score share" in result.stdout
    assert "◀ n* = 4608" in result.stdout  # marked at the first seq_len >= n*: 8192
    assert "█" in result.stdout


def test_table_row_limit(cli: Any) -> None:
    result = cli("sweep", "bert-base", "--num-layers", "1:40:+1", "--max-rows", "5")
    assert result.exit_code == 0
    assert "Showing 5 of 40 points" in result.stdout


# --- plots --------------------------------------------------------------------------------------------------------


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_plot_png(cli: Any, tmp_path: Path) -> None:
    out = tmp_path / "curves.png"
    result = cli(
        "sweep",
        "bert-base",
        "--set",
        "position=sinusoidal",
        "--seq-len",
        "64:16384:x2",
        "--num-layers",
        "12,24",
        "--plot",
        str(out),
        "--format",
        "json",
    )
    assert result.exit_code == 0, result.stderr
    data = out.read_bytes()
    width, height = _png_size(data)
    assert 800 <= width <= 4000 and 400 <= height <= 3000
    assert 20_000 < len(data) < 5_000_000
    assert data.endswith(b"IEND\xaeB`\x82")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["curves.png"]  # no temporary file left
    assert str(out) in result.stderr
    json.loads(result.stdout)


def test_plot_failure_leaves_no_file(cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from matplotlib.figure import Figure

    def broken(self: Any, fname: Any, **kwargs: Any) -> None:
        fname.write(b"\x89PNG partial")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", broken)
    out = tmp_path / "curves.png"
    result = cli("sweep", "gpt2", "--seq-len", "64,128", "--plot", str(out))
    assert result.exit_code == 1
    assert "No space left on device" in result.stderr
    assert list(tmp_path.iterdir()) == []
    # an existing file of that name is left as it was
    out.write_bytes(b"old")
    assert cli("sweep", "gpt2", "--seq-len", "64,128", "--plot", str(out)).exit_code == 1
    assert out.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["curves.png"]


def test_write_atomically_removes_temp_on_any_error(tmp_path: Path) -> None:
    target = tmp_path / "x.png"

    def crash(handle: Any) -> None:
        handle.write(b"half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_atomically(target, crash)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(EmbedcalcError):
        write_atomically(tmp_path / "missing-dir" / "x.png", lambda h: None)


def test_plot_without_matplotlib_exits_4(cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    result = cli("sweep", "gpt2", "--seq-len", "64,128", "--plot", str(tmp_path / "p.png"))
    assert result.exit_code == 4
    assert "pip install 'embedcalc[plot]'" in result.stderr
    assert list(tmp_path.iterdir()) == []
    as_json = cli(
        "sweep", "gpt2", "--seq-len", "64,128", "--plot", str(tmp_path / "p.png"), "--format", "json"
    )
    assert as_json.exit_code == 4
    envelope = json.loads(as_json.stdout)
    assert envelope["status"] == "error" and envelope["problems"][0]["code"] == "no_matplotlib"


@pytest.mark.parametrize(("args", "word"), [
    (("--num-layers", "1,2"), "--seq-len"),
    (("--seq-len", "128"), "--seq-len"),
    (("--seq-len", "64,128", "--num-layers", "1:9:+1"), "9"),
])  # fmt: skip
def test_plot_bad_requests_exit_2(cli: Any, tmp_path: Path, args: tuple[str, ...], word: str) -> None:
    result = cli("sweep", "gpt2", *args, "--plot", str(tmp_path / "p.png"))
    assert result.exit_code == 2
    assert word in result.stderr
    bad_suffix = cli("sweep", "gpt2", "--seq-len", "64,128", "--plot", str(tmp_path / "p.txt"))
    assert bad_suffix.exit_code == 2 and ".png" in bad_suffix.stderr


def test_seq_len_curves_one_per_combination() -> None:
    result = sweep_target("bert-base", (), {"num_layers": (6, 12), "seq_len": (128, 256, 1024)}, Workload())
    curves = seq_len_curves(result)
    assert [c.label for c in curves] == ["bert-base num_layers=6", "bert-base num_layers=12"]
    assert curves[1].seq_len == (128, 256, 1024)
    assert curves[1].score_flops[2] is None and curves[1].score_flops[0] == 12 * 2 * 2 * 12 * 128 * 128 * 64
    assert curves[0].crossover_seq_len == 4608


def test_plot_with_every_point_invalid_exits_3(cli: Any, tmp_path: Path) -> None:
    result = cli(
        "sweep", "bert-base", "--num-heads", "7,11", "--seq-len", "64,128", "--plot", str(tmp_path / "p.png")
    )
    assert result.exit_code == 3
    assert "nothing to draw" in result.stderr and "heads_indivisible" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_fixed_axis_values_come_from_the_target_even_when_it_is_invalid() -> None:
    """--set embed_dim=700 is invalid with bert-base's 12 heads; the sweep over heads repairs it at 7."""
    result = sweep_target("bert-base", ("embed_dim=700",), {"num_heads": (7, 12)}, Workload())
    assert result.config is None and result.crossover_seq_len is None
    assert result.valid.tolist() == [True, False]
    assert result.axis_column("embed_dim").tolist() == [700, 700]
    assert result.axis_column("ffn_dim").tolist() == [3072, 3072]


def test_cli_module_stays_light() -> None:
    """Registering `sweep` must not load numpy (or matplotlib) into every `embedcalc` start-up."""
    import subprocess

    from embedcalc.analysis import sweep as analysis_sweep
    from embedcalc.cli import sweep as cli_sweep

    assert cli_sweep.AXES == analysis_sweep.AXES
    code = "import sys, embedcalc.cli.sweep; print(sorted({'numpy', 'matplotlib'} & set(sys.modules)))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "[]"


def test_bracketed_names_are_shown_verbatim(cli: Any, write_config: Any) -> None:
    path = write_config(
        {"name": "m", "architecture": "encoder", "vocab_size": 64, "max_seq_len": 64, "embed_dim": 64,
         "num_heads": 4, "num_layers": 1},
        name="model [draft].yaml",
    )  # fmt: skip
    result = cli("sweep", str(path), "--seq-len", "32,128")
    assert result.exit_code == 0, result.stderr
    assert "[draft].yaml" in result.stdout  # not swallowed as rich markup
    assert "exceeds max_seq_len 64" in " ".join(
        result.stdout.split()
    )  # under the table, wrapped to the width
