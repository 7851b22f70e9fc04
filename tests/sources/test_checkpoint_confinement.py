"""``verify --checkpoint`` opens nothing outside the directory (or hub-cache snapshot) it is given (issue 33).

A tree of hostile checkpoints is built here, each beside an ``outside/`` folder holding a *canary*: a valid
safetensors file whose tensors are named ``CANARY...``, a config.json, and a text file starting ``root:x:0``. Each
case names the canary another way (an absolute or ``..`` path in the index's weight_map, a symlinked shard, a
symlinked index, a symlinked config.json, a hub snapshot or its files pointing out of the cache). Every case must
exit 3 naming the file at fault, print no canary tensor and no byte of a canary file, and open no file under
``outside/``: an audit hook (``sys.addaudithook``, the ``open`` event every ``open()``/``os.open`` raises) records
every path the process opens while the case runs (tests/opened_files.py), and each must resolve inside the
directory named (or the hub cache) or among the interpreter's own files: none under ``outside/``, nothing else.
Symlinks that stay inside (a shard linked from a subfolder; the hub cache's own ``../../blobs/`` links) still work.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from checkpoint_trees import COMMIT, CONFIG, INDEX, make_outside, write_header
from checkpoint_trees import hub_cache as _hub
from checkpoint_trees import model_dir as _model
from opened_files import Opened, opened_files

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="symlinks and FIFOs")


@pytest.fixture
def opened() -> Iterator[Opened]:
    recorder = opened_files()
    recorder.paths = []
    yield recorder
    recorder.recording = False


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """The canary folder, beside (never inside) every checkpoint directory of the test."""
    return make_outside(tmp_path / "outside")


def _index(directory: Path, shard: str) -> None:
    (directory / INDEX).write_text(json.dumps({"weight_map": {"model.norm.weight": shard}}))


def _hostile(case: str, tmp: Path, outside: Path) -> Path:
    """The directory of one hostile case."""
    model = _model(tmp / "model", shards=case.startswith("index"))
    if case == "index-absolute-shard":
        _index(model, str(outside / "canary.safetensors"))
    elif case == "index-dotdot-shard":
        _index(model, "../outside/canary.safetensors")
    elif case == "index-absolute-passwd":
        _index(model, str(outside / "passwd"))
    elif case == "index-symlinked":
        (model / INDEX).unlink()
        (model / INDEX).symlink_to(outside / INDEX)
    elif case == "index-shard-symlinked-out":
        (model / "model-2.safetensors").unlink()
        (model / "model-2.safetensors").symlink_to(outside / "canary.safetensors")
    elif case == "shard-symlinked-out":
        (model / "extra.safetensors").symlink_to(outside / "canary.safetensors")
    elif case == "shard-symlinked-passwd":
        (model / "zz.safetensors").symlink_to(outside / "passwd")
    elif case == "config-symlinked-out":
        (model / "config.json").unlink()
        (model / "config.json").symlink_to(outside / "config.json")
    elif case == "shard-relative-symlink-out":
        (model / "extra.safetensors").symlink_to(Path("..") / "outside" / "canary.safetensors")
    return model


HOSTILE = ("index-absolute-shard", "index-dotdot-shard", "index-absolute-passwd", "index-symlinked",
           "index-shard-symlinked-out", "shard-symlinked-out", "shard-symlinked-passwd", "config-symlinked-out",
           "shard-relative-symlink-out")  # fmt: skip


def _run(cli: Any, opened: Opened, target: str, *extra: str) -> Any:
    opened.recording = True
    try:
        return cli("verify", target, "--checkpoint", *extra)
    finally:
        opened.recording = False


@pytest.mark.parametrize("case", HOSTILE)
@pytest.mark.parametrize("fmt", ["table", "json"])
def test_a_hostile_checkpoint_is_refused_without_opening_outside(
    case: str, fmt: str, cli: Any, opened: Opened, tmp_path: Path, outside: Path
) -> None:
    model = _hostile(case, tmp_path, outside)
    result = _run(cli, opened, str(model), "--format", fmt)
    text = result.stdout + result.stderr
    assert result.exit_code == 3, (case, text)
    assert opened.under(outside) == [], case
    assert opened.outside(model) == [], case
    assert "CANARY" not in text and "root:x" not in text and "8,028,075" not in text
    assert "Traceback" not in text
    if fmt == "json":
        envelope = json.loads(result.stdout)
        assert envelope["status"] == "error" and envelope["problems"][0]["code"].startswith("checkpoint_")
    else:
        assert result.stdout == ""
        assert ("outside the checkpoint directory" in " ".join(result.stderr.split())) or (
            "index names files beside itself" in " ".join(result.stderr.split())
        ), result.stderr


def test_symlinks_that_stay_inside_are_followed(
    cli: Any, opened: Opened, tmp_path: Path, outside: Path
) -> None:
    model = _model(tmp_path / "model", shards=True)
    (model / "store").mkdir()
    (model / "model-2.safetensors").rename(model / "store" / "real.safetensors")
    (model / "model-2.safetensors").symlink_to(Path("store") / "real.safetensors")
    result = _run(cli, opened, str(model), "--format", "json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["results"][0]["agree"]
    assert opened.under(outside) == [] and opened.outside(model) == []


def test_a_hub_snapshot_reads_its_blobs(
    cli: Any, opened: Opened, tmp_path: Path, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(_hub(tmp_path, {})))
    result = _run(cli, opened, "org/tiny", "--format", "json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["results"][0]["agree"]
    # the snapshot named as a path works the same (its root is the repository folder, blobs included)
    snapshot = tmp_path / "hub" / "models--org--tiny" / "snapshots" / COMMIT
    assert _run(cli, opened, str(snapshot), "--format", "json").exit_code == 0
    assert opened.under(outside) == [] and opened.outside(tmp_path / "hub") == []


@pytest.mark.parametrize("case", ["shard-out", "index-out", "extra-shard-out", "snapshot-out"])
def test_a_hub_snapshot_pointing_outside_is_refused(
    case: str, cli: Any, opened: Opened, tmp_path: Path, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = {
        "shard-out": {"model.safetensors": outside / "canary.safetensors"},
        "index-out": {INDEX: outside / INDEX},
        "extra-shard-out": {"z.safetensors": outside / "canary.safetensors"},
        "snapshot-out": {},
    }[case]
    hub = _hub(tmp_path, files)
    if case == "snapshot-out":  # the whole snapshot folder is a link to a model directory outside the cache
        snapshot = hub / "models--org--tiny" / "snapshots" / COMMIT
        elsewhere = _model(outside / "model")
        for child in snapshot.iterdir():
            child.unlink()
        snapshot.rmdir()
        snapshot.symlink_to(elsewhere)
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    result = _run(cli, opened, "org/tiny", "--format", "json")
    assert result.exit_code == 3, result.stdout + result.stderr
    assert opened.under(outside) == []
    assert opened.outside(hub) == [], case
    assert "CANARY" not in result.stdout + result.stderr


def test_a_file_that_is_no_safetensors_is_not_quoted(cli: Any, tmp_path: Path) -> None:
    model = _model(tmp_path / "model")
    (model / "notes.safetensors").write_text("root:x:0:0:root:/root:/bin/bash\n")
    result = cli("verify", str(model), "--checkpoint")
    stderr = " ".join(result.stderr.split())
    assert result.exit_code == 3 and "notes.safetensors" in stderr
    assert "root" not in stderr.replace(str(tmp_path), "") and "8,028,075" not in stderr


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_shard_that_is_no_regular_file(kind: str, cli: Any, tmp_path: Path) -> None:
    model = _model(tmp_path / "model")
    if kind == "fifo":
        os.mkfifo(model / "pipe.safetensors")
    else:
        (model / "dir.safetensors").mkdir()
    result = cli("verify", str(model), "--checkpoint")
    assert result.exit_code == 3 and "regular file" in " ".join(result.stderr.split())


HOSTILE_HEADERS = {
    "nested": b"[" * 5000 + b"]" * 5000,
    "huge-integer": b'{"a": {"dtype": "F32", "shape": [' + b"9" * 5000 + b'], "data_offsets": [0, 4]}}',
    "lone-surrogate": b'{"\\ud800x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}',
    "long-dtype": b'{"a": {"dtype": "' + b"F" * 100_000 + b'", "shape": [1], "data_offsets": [0, 4]}}',
    "long-name": b'{"' + b"n" * 5000 + b'": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}',
    "deep-shape": b'{"a": {"dtype": "F32", "shape": ['
    + b",".join([b"1"] * 40)
    + b'], "data_offsets": [0, 4]}}',
    "bool-shape": b'{"a": {"dtype": "F32", "shape": [true], "data_offsets": [0, 4]}}',
    "not-utf8": b'{"\xff": 1}',
}


@pytest.mark.parametrize("case", sorted(HOSTILE_HEADERS))
@pytest.mark.parametrize("fmt", ["table", "json"])
def test_a_hostile_header_is_exit_3_before_any_output(case: str, fmt: str, cli: Any, tmp_path: Path) -> None:
    model = _model(tmp_path / "model")
    write_header(model / "model.safetensors", HOSTILE_HEADERS[case])
    result = cli("verify", str(model), "--checkpoint", "--format", fmt)
    assert result.exit_code == 3, (case, result.stdout[-300:], result.stderr[-300:])
    assert "Traceback" not in result.stderr and len(result.stderr) < 2000
    if fmt == "json":
        assert json.loads(result.stdout)["problems"][0]["code"] == "checkpoint_malformed"
    else:
        assert result.stdout == "" and "model.safetensors" in result.stderr


@pytest.mark.parametrize("value", [["int4"], {"a": 1}, 7])
def test_list_valued_quantization_and_dtype_keys_are_ignored(value: Any, cli: Any, tmp_path: Path) -> None:
    model = _model(tmp_path / "model")
    (model / "config.json").write_text(
        json.dumps(CONFIG | {"torch_dtype": value, "quantization_config": {"config_groups": [value]}})
    )
    result = cli("verify", str(model), "--checkpoint", "--format", "json")
    assert result.exit_code in (0, 3) and "Traceback" not in result.stderr, result.stderr
    assert json.loads(result.stdout)["status"] in ("ok", "mismatch", "error")


def test_a_config_with_10_to_the_29_layers_is_not_walked_layer_by_layer(cli: Any, tmp_path: Path) -> None:
    model = _model(tmp_path / "model")
    result = cli(
        "verify", str(model), "--checkpoint", "--set", f"num_layers={10**29 - 1}", "--format", "json"
    )
    assert result.exit_code == 3  # the checkpoint holds one layer: the rest are missing, and said so
    assert json.loads(result.stdout)["results"][0]["agree"] is False


def test_an_index_is_read_bounded(cli: Any, tmp_path: Path) -> None:
    model = _model(tmp_path / "model")
    with (model / INDEX).open("wb") as handle:  # sparse: 3 GiB claimed, nothing written
        handle.truncate(3 << 30)
    result = cli("verify", str(model), "--checkpoint")
    assert result.exit_code == 3 and "index" in result.stderr
