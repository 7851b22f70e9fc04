"""``verify --checkpoint`` opens nothing outside the directory (or hub-cache snapshot) it is given (issue 33).

A tree of hostile checkpoints is built here, each beside an ``outside/`` folder holding a *canary*: a valid
safetensors file whose tensors are named ``CANARY...``, a config.json, and a text file starting ``root:x:0``. Each
case names the canary another way (an absolute or ``..`` path in the index's weight_map, a symlinked shard, a
symlinked index, a symlinked config.json, a hub snapshot or its files pointing out of the cache). Every case must
exit 3 naming the file at fault, print no canary tensor and no byte of a canary file, and open no file under
``outside/``: an audit hook (``sys.addaudithook``, the ``open`` event every ``open()``/``os.open`` raises) records
every path the process opens while the case runs, and none may resolve under ``outside/``.
Symlinks that stay inside (a shard linked from a subfolder; the hub cache's own ``../../blobs/`` links) still work.
"""

from __future__ import annotations

import json
import os
import struct
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from embedcalc.sources.checkpoint import INDEX

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="symlinks and FIFOs")

CONFIG = {"model_type": "llama", "vocab_size": 64, "hidden_size": 16, "intermediate_size": 32,
          "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2,
          "tie_word_embeddings": True}  # fmt: skip
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _safetensors(path: Path, names: dict[str, list[int]]) -> None:
    """A safetensors file of F32 zeros with these tensor names and shapes (written directly, no torch)."""
    header: dict[str, Any] = {}
    offset = 0
    for name, shape in names.items():
        size = 4
        for dim in shape:
            size *= dim
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + bytes(offset))


def _llama_tensors(prefix: str = "") -> dict[str, list[int]]:
    d, f, v = 16, 32, 64
    layer = f"{prefix}model.layers.0."
    return {
        f"{prefix}model.embed_tokens.weight": [v, d],
        f"{prefix}model.norm.weight": [d],
        f"{layer}input_layernorm.weight": [d],
        f"{layer}post_attention_layernorm.weight": [d],
        **{f"{layer}self_attn.{p}_proj.weight": [d, d] for p in "qkvo"},
        f"{layer}mlp.gate_proj.weight": [f, d],
        f"{layer}mlp.up_proj.weight": [f, d],
        f"{layer}mlp.down_proj.weight": [d, f],
    }


class _Opened:
    """Every path opened while ``recording`` (an audit hook cannot be removed: it is installed once, switched)."""

    def __init__(self) -> None:
        self.recording = False
        self.paths: list[str] = []
        sys.addaudithook(self._hook)

    def _hook(self, event: str, args: tuple[Any, ...]) -> None:
        if self.recording and event == "open" and args and isinstance(args[0], str | bytes | os.PathLike):
            path = os.fsdecode(args[0])
            self.paths.append(path)

    def under(self, folder: Path) -> list[str]:
        root = os.path.realpath(folder)
        return [p for p in self.paths if os.path.realpath(p).startswith(root + os.sep)]


_OPENED: _Opened | None = None


@pytest.fixture
def opened() -> Iterator[_Opened]:
    global _OPENED
    if _OPENED is None:
        _OPENED = _Opened()
    _OPENED.paths.clear()
    yield _OPENED
    _OPENED.recording = False


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """The canary folder, beside (never inside) every checkpoint directory of the test."""
    folder = tmp_path / "outside"
    folder.mkdir()
    _safetensors(folder / "canary.safetensors", {f"CANARY{i}": [2] for i in range(3)})
    (folder / "config.json").write_text(json.dumps(CONFIG | {"num_hidden_layers": 7}))
    (folder / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    (folder / INDEX).write_text(json.dumps({"weight_map": {"CANARY": "model.safetensors"}}))
    return folder


def _model(directory: Path, shards: bool = False) -> Path:
    directory.mkdir(parents=True)
    (directory / "config.json").write_text(json.dumps(CONFIG))
    if shards:
        tensors = _llama_tensors()
        first = dict(list(tensors.items())[:5])
        rest = dict(list(tensors.items())[5:])
        _safetensors(directory / "model-1.safetensors", first)
        _safetensors(directory / "model-2.safetensors", rest)
        weight_map = {n: "model-1.safetensors" for n in first} | {n: "model-2.safetensors" for n in rest}
        (directory / INDEX).write_text(json.dumps({"weight_map": weight_map}))
    else:
        _safetensors(directory / "model.safetensors", _llama_tensors())
    return directory


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


def _run(cli: Any, opened: _Opened, target: str, *extra: str) -> Any:
    opened.recording = True
    try:
        return cli("verify", target, "--checkpoint", *extra)
    finally:
        opened.recording = False


@pytest.mark.parametrize("case", HOSTILE)
@pytest.mark.parametrize("fmt", ["table", "json"])
def test_a_hostile_checkpoint_is_refused_without_opening_outside(
    case: str, fmt: str, cli: Any, opened: _Opened, tmp_path: Path, outside: Path
) -> None:
    model = _hostile(case, tmp_path, outside)
    result = _run(cli, opened, str(model), "--format", fmt)
    text = result.stdout + result.stderr
    assert result.exit_code == 3, (case, text)
    assert opened.under(outside) == [], case
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
    cli: Any, opened: _Opened, tmp_path: Path, outside: Path
) -> None:
    model = _model(tmp_path / "model", shards=True)
    (model / "store").mkdir()
    (model / "model-2.safetensors").rename(model / "store" / "real.safetensors")
    (model / "model-2.safetensors").symlink_to(Path("store") / "real.safetensors")
    result = _run(cli, opened, str(model), "--format", "json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["results"][0]["agree"]
    assert opened.under(outside) == []


def _hub(tmp: Path, snapshot_files: dict[str, Any]) -> Path:
    """A hub cache holding ``org/tiny`` at COMMIT: each file a symlink into ``blobs/`` as huggingface_hub writes
    it, except where ``snapshot_files`` maps a name to a Path (a symlink target outside)."""
    repo = tmp / "hub" / "models--org--tiny"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    blobs = repo / "blobs"
    model = _model(tmp / "staging")
    blobs.mkdir()
    snapshot = repo / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    for name in ("config.json", "model.safetensors"):
        target = snapshot_files.get(name)
        if target is None:
            blob = blobs / f"blob-{name}"
            (model / name).rename(blob)
            (snapshot / name).symlink_to(Path("..") / ".." / "blobs" / blob.name)
        else:
            (snapshot / name).symlink_to(target)
    for name, target in snapshot_files.items():
        if name not in ("config.json", "model.safetensors"):
            (snapshot / name).symlink_to(target)
    return tmp / "hub"


def test_a_hub_snapshot_reads_its_blobs(
    cli: Any, opened: _Opened, tmp_path: Path, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(_hub(tmp_path, {})))
    result = _run(cli, opened, "org/tiny", "--format", "json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["results"][0]["agree"]
    # the snapshot named as a path works the same (its root is the repository folder, blobs included)
    snapshot = tmp_path / "hub" / "models--org--tiny" / "snapshots" / COMMIT
    assert _run(cli, opened, str(snapshot), "--format", "json").exit_code == 0
    assert opened.under(outside) == []


@pytest.mark.parametrize("case", ["shard-out", "index-out", "extra-shard-out", "snapshot-out"])
def test_a_hub_snapshot_pointing_outside_is_refused(
    case: str, cli: Any, opened: _Opened, tmp_path: Path, outside: Path, monkeypatch: pytest.MonkeyPatch
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


def _raw_header(path: Path, text: bytes) -> None:
    path.write_bytes(struct.pack("<Q", len(text)) + text)


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
    _raw_header(model / "model.safetensors", HOSTILE_HEADERS[case])
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
