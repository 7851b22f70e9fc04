"""A checkpoint on disk, headers only: the ``*.safetensors`` files of a model directory (or a hub-cache snapshot)
and, per tensor, its name, shape, dtype and bytes. No tensor is loaded and torch is never imported.

The safetensors format (https://github.com/huggingface/safetensors, "Format"): 8 bytes, a little-endian unsigned
64-bit header length N; N bytes of JSON mapping each tensor name to ``{"dtype", "shape", "data_offsets": [begin,
end]}`` (offsets into the data that follows, so ``end - begin`` is the tensor's bytes on disk) and an optional
``__metadata__`` of strings. The header is read here directly (the same bound as the safetensors library: at most
100 MB); the tests check the result against ``safetensors.safe_open``.

Which files: those ``model.safetensors.index.json``'s ``weight_map`` names (a sharded checkpoint), else every
``*.safetensors`` of the directory (one file, or shards without an index).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from embedcalc.errors import ConfigError, Problem, UnsupportedEnvironmentError

MAX_HEADER_BYTES = 100_000_000  # safetensors' own limit on the JSON header
INDEX = "model.safetensors.index.json"


@dataclass(frozen=True)
class StoredTensor:
    """One tensor of a checkpoint, as its header describes it."""

    name: str
    shape: tuple[int, ...]
    dtype: str  # safetensors' name: BF16, F32, F8_E4M3, I32, ...
    nbytes: int
    file: str

    @property
    def numel(self) -> int:
        out = 1
        for size in self.shape:
            out *= size
        return out


@dataclass(frozen=True)
class Checkpoint:
    """The tensors of every safetensors file of a model directory, and the raw ``config.json`` beside them."""

    directory: Path
    files: tuple[str, ...]
    tensors: tuple[StoredTensor, ...]
    sharded: bool
    raw_config: dict[str, Any]

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.tensors)


def _bad(path: Path, why: str) -> ConfigError:
    message = f"{path}: {why}; a safetensors file starts with an 8-byte header length and a JSON header"
    return ConfigError(
        message, [Problem(str(path.name), message, "checkpoint_malformed")], "checkpoint_malformed"
    )


def _sizes(value: Any) -> list[int] | None:
    """``value`` when it is a list of non-negative integers, else None."""
    if isinstance(value, list) and all(
        isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in value
    ):
        return value
    return None


def _entry(path: Path, name: str, value: Any) -> StoredTensor:
    if not isinstance(value, dict):
        raise _bad(path, f"tensor {name!r} has no dtype/shape/data_offsets record")
    dtype, shape, offsets = value.get("dtype"), _sizes(value.get("shape")), _sizes(value.get("data_offsets"))
    if not isinstance(dtype, str) or shape is None or offsets is None or len(offsets) != 2:
        raise _bad(path, f"tensor {name!r} has a malformed record {value!r:.120}")
    if offsets[1] < offsets[0]:
        raise _bad(path, f"tensor {name!r} ends before it begins ({offsets})")
    return StoredTensor(name, tuple(shape), dtype, offsets[1] - offsets[0], path.name)


def read_header(path: Path) -> list[StoredTensor]:
    """The tensors ``path``'s safetensors header lists (nothing else of the file is read)."""
    try:
        with path.open("rb") as handle:
            head = handle.read(8)
            if len(head) < 8:
                raise _bad(path, f"is {len(head)} bytes long")
            (length,) = struct.unpack("<Q", head)
            if length > MAX_HEADER_BYTES:
                raise _bad(path, f"declares a {length:,}-byte header (at most {MAX_HEADER_BYTES:,})")
            text = handle.read(length)
    except OSError as exc:
        raise UnsupportedEnvironmentError(
            f"{path}: cannot be read ({exc.strerror or exc})", "checkpoint_io"
        ) from None
    if len(text) < length:
        raise _bad(path, f"ends inside its {length:,}-byte header")
    try:
        header = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _bad(path, f"has a header that is not JSON ({exc})") from None
    if not isinstance(header, dict):
        raise _bad(path, "has a header that is not a JSON object")
    return [_entry(path, name, value) for name, value in header.items() if name != "__metadata__"]


def _files(directory: Path) -> tuple[list[str], bool]:
    index = directory / INDEX
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8")).get("weight_map")
        except (OSError, ValueError, AttributeError):
            weight_map = None
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            message = f"{index}: expected a JSON object with a weight_map of tensor name -> shard file"
            raise ConfigError(
                message, [Problem(INDEX, message, "checkpoint_malformed")], "checkpoint_malformed"
            )
        return sorted(set(weight_map.values())), True
    return sorted(p.name for p in directory.glob("*.safetensors")), False


def read_checkpoint(directory: Path) -> Checkpoint:
    """Every tensor header of the checkpoint in ``directory`` (exit 4 when it holds no safetensors file)."""
    names, sharded = _files(directory)
    if not names:
        others = sorted(p.name for p in directory.glob("*.bin")) + sorted(
            p.name for p in directory.glob("*.pt*")
        )
        found = (
            f" (it has {', '.join(others[:3])}: pickles, which are not read without running them)"
            if others
            else ""
        )
        raise UnsupportedEnvironmentError(
            f"{directory}: no *.safetensors checkpoint here{found}. Download the weights' headers with the files, "
            "e.g. `huggingface-cli download ORG/NAME --include '*.safetensors' '*.json'`",
            "checkpoint_not_found",
        )
    tensors: list[StoredTensor] = []
    for name in names:
        path = directory / name
        if not path.is_file():
            raise UnsupportedEnvironmentError(f"{path}: named by {INDEX} but not on disk (a partial download?)",
                                              "checkpoint_not_found")  # fmt: skip
        tensors += read_header(path)
    raw: dict[str, Any] = {}
    config = directory / "config.json"
    if config.is_file():
        try:
            loaded = json.loads(config.read_text(encoding="utf-8"))
            raw = loaded if isinstance(loaded, dict) else {}
        except (OSError, ValueError):
            raw = {}
    return Checkpoint(directory, tuple(names), tuple(tensors), sharded, raw)
