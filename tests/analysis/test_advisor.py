"""The advisor and the measured views: ``check --suggest``, ``compare --plot``, ``sweep --measure`` and
``bench --memory-matrix`` (structure and arithmetic only; never a speed)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from embedcalc.analysis.params import count_params
from embedcalc.sources.loading import load_target

TINY_DECODER = {"architecture": "decoder", "vocab_size": 512, "embed_dim": 64, "num_heads": 4, "num_layers": 2,
                "max_seq_len": 128}  # fmt: skip


def _suggestions(cli: Any, *args: str) -> list[dict[str, Any]]:
    result = cli("check", *args, "--suggest", "--format", "json")
    assert result.exit_code == 3, result.stderr
    entry = json.loads(result.stdout)["results"][0]
    assert entry["valid"] is False
    return list(entry["suggestions"])


def test_suggest_indivisible_heads(cli: Any) -> None:
    rows = _suggestions(cli, "bert-base", "--set", "embed_dim=1000")
    assert rows, "no suggestion"
    # changing num_heads keeps q_dim = embed_dim, so the parameter count as written does not move: ranked first
    assert rows[0]["set"] == ["num_heads=10"] and rows[0]["delta_params"] == 0
    assert rows[1]["set"] == ["num_heads=8"]
    for row in rows:  # every suggestion is valid and its params are what analyze would count
        overrides = ["embed_dim=1000", *row["set"]]
        assert row["params"] == count_params(load_target("bert-base", overrides).config).total
        assert row["command_line"] == " ".join(f"--set {s}" for s in row["set"])
    deltas = [abs(r["delta_params"]) for r in rows]
    assert deltas == sorted(deltas)


def test_suggest_kv_heads_and_rope(cli: Any) -> None:
    kv = _suggestions(cli, "gpt2", "--set", "num_kv_heads=5")
    assert [r["set"] for r in kv[:2]] == [["num_kv_heads=4"], ["num_kv_heads=6"]]
    rope = _suggestions(
        cli, "gpt2", "--set", "position=rope", "--set", "embed_dim=1008", "--set", "num_heads=16"
    )
    for row in rope:  # 1008 / 16 = 63 is odd; every proposal gives an even head_dim
        config = load_target("gpt2", ["position=rope", "embed_dim=1008", "num_heads=16", *row["set"]]).config
        assert config.resolved_head_dim % 2 == 0


def test_suggest_in_table_goes_to_stdout_error_to_stderr(cli: Any) -> None:
    result = cli("check", "bert-base", "--set", "embed_dim=1000", "--suggest")
    assert result.exit_code == 3
    assert "--set num_heads=10" in result.stdout and "Nearest valid configs" in result.stdout
    assert "must divide" in result.stderr and "must divide" not in result.stdout


def test_compare_plot_writes_a_png(cli: Any, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    path = tmp_path / "compare.png"
    result = cli("compare", "bert-base", "gpt2", "--plot", str(path), "--plot-seq-len", "64:1024:x4")
    assert result.exit_code == 0, result.stderr
    data = path.read_bytes()
    assert (
        data[:8] == b"\x89PNG\r\n\x1a\n" and data[-8:] == b"IEND\xaeB`\x82" and 10_000 < len(data) < 5_000_000
    )
    assert f"wrote {path}" in result.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["compare.png"]  # no temporary left behind


def test_compare_plot_title_names_the_dtypes_the_targets_ran_in(
    cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """gpt2 runs in fp32 and llama-3.1-8b in bf16 (each its own dtype): the title must not say one of them for both,
    each curve says its own; a dtype chosen with --dtype is the title's."""
    pytest.importorskip("matplotlib")
    import embedcalc.render.plot as plot

    drawn: list[tuple[list[str], str | None]] = []
    monkeypatch.setattr(plot, "plot_seq_len_curves",
                        lambda curves, path, title=None: drawn.append(([c.label for c in curves], title)))  # fmt: skip
    args = ["gpt2", "llama-3.1-8b", "--plot", str(tmp_path / "c.png"), "--plot-seq-len", "128,256"]
    assert cli("compare", *args).exit_code == 0
    assert cli("compare", *args, "--dtype", "fp16").exit_code == 0
    (labels, title), (chosen_labels, chosen_title) = drawn
    assert title is not None and "fp32" not in title and "each in its own dtype" in title
    assert labels == ["gpt2 (fp32)", "llama-3.1-8b (bf16)"]
    assert chosen_title is not None and chosen_title.startswith("compare: fp16,")
    assert chosen_labels == ["gpt2", "llama-3.1-8b"]


def test_compare_plot_bad_range_is_usage_error(cli: Any, tmp_path: Path) -> None:
    result = cli("compare", "bert-base", "gpt2", "--plot", str(tmp_path / "x.png"), "--plot-seq-len", "64:x2")
    assert result.exit_code == 2
    assert "--plot-seq-len" in result.stderr
    assert not (tmp_path / "x.png").exists()


@pytest.mark.torch
def test_sweep_measure_structure(cli: Any, write_config: Callable[..., Path]) -> None:
    pytest.importorskip("torch")
    path = write_config(TINY_DECODER, "tiny.yaml")
    result = cli("sweep", str(path), "--seq-len", "16,32,64", "--measure", "--device", "cpu", "--repeat", "1",
                 "--format", "json")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    measured = json.loads(result.stdout)["results"][0]["measured"]
    assert [p["seq_len"] for p in measured["points"]] == [16, 32, 64]
    for p in measured["points"]:
        assert p["full_s"] > 0 and p["rest_s"] > 0 and p["attention_s"] >= 0
        assert p["attention_s"] == pytest.approx(max(0.0, p["full_s"] - p["rest_s"]))
        assert 0 <= p["measured_attention_share"] <= 1 and 0 < p["predicted_attention_share"] < 1
    assert measured["predicted_crossover_seq_len"] == 2 * 64 + 4 * 64 // 1  # 2d + f for a standard block
    assert "pass-through" in measured["method"]


def test_sweep_measure_needs_a_seq_len_sweep(cli: Any) -> None:
    result = cli("sweep", "gpt2", "--embed-dim", "512,768", "--seq-len", "64,128", "--measure")
    assert result.exit_code == 2
    assert "--measure" in result.stderr


@pytest.mark.torch
def test_measured_crossover_interpolates() -> None:
    pytest.importorskip("torch")
    from embedcalc.modeling.measure import SplitPoint, measured_crossover

    # attention/rest = 0.5 at n=100 and 2.0 at n=400: log-log interpolation crosses 1 at n=200
    points = [SplitPoint(100, 1.5, 1.0), SplitPoint(400, 3.0, 1.0)]
    assert measured_crossover(points) == pytest.approx(200.0)
    assert measured_crossover([SplitPoint(100, 1.1, 1.0)]) is None


@pytest.mark.torch
@pytest.mark.slow  # six fresh processes, each importing torch: minutes on two cores (issue 14: run by .ci/run)
def test_memory_matrix_runs_every_setting(cli: Any, write_config: Callable[..., Path]) -> None:
    pytest.importorskip("torch")
    path = write_config(TINY_DECODER, "tiny.yaml")
    result = cli("bench", str(path), "--mode", "training", "--device", "cpu", "--seq-len", "32", "--batch-size", "2",
                 "--memory-matrix", "--format", "json")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    rows = json.loads(result.stdout)["results"][0]["memory_matrix"]
    assert [(r["attention"], r["recompute"]) for r in rows] == [
        (a, r) for a in ("sdpa", "eager") for r in ("none", "selective", "full")
    ]
    by = {(r["attention"], r["recompute"]): r for r in rows}
    for r in rows:
        assert r["predicted_memory_bytes"] > 0 and r["peak_memory_bytes"] >= 0
    # the prediction obeys the model: full recomputation never predicts more than none
    for attention in ("sdpa", "eager"):
        assert (
            by[(attention, "full")]["predicted_memory_bytes"]
            <= by[(attention, "none")]["predicted_memory_bytes"]
        )
