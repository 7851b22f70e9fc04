"""A checkpoint on disk, headers only: the ``*.safetensors`` files of a model directory (or a hub-cache snapshot)
and, per tensor, its name, shape, dtype and bytes. No tensor is loaded and torch is never imported.

The safetensors format (https://github.com/huggingface/safetensors, "Format"): 8 bytes, a little-endian unsigned
64-bit header length N; N bytes of JSON mapping each tensor name to ``{"dtype", "shape", "data_offsets": [begin,
end]}`` (offsets into the data that follows, so ``end - begin`` is the tensor's bytes on disk) and an optional
``__metadata__`` of strings. The header is read here directly (the same bound as the safetensors library: at most
100 MB); the tests check the result against ``safetensors.safe_open``.

Which files: those ``model.safetensors.index.json``'s ``weight_map`` names (a sharded checkpoint), else every
``*.safetensors`` of the directory (one file, or shards without an index). Each is opened only when it resolves
inside the directory (:mod:`embedcalc.sources.confine`), and what a header may declare is bounded (tensor count,
name and dtype lengths, rank: the constants below, docs/concepts/bounds.md).
"""

from __future__ import annotations

import json
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from embedcalc.errors import ConfigError, Problem, UnsupportedEnvironmentError
from embedcalc.sources.confine import checkpoint_root, inside, member_name_problem, open_regular
from embedcalc.sources.reading import read_bytes_bounded, read_up_to

MAX_HEADER_BYTES = 100_000_000  # safetensors' own limit on the JSON header
INDEX = "model.safetensors.index.json"
# Bounds on what a checkpoint may declare (docs/concepts/bounds.md): each far above any published checkpoint and
# far below what would make verify slow or large. The largest published checkpoints by tensor count are FP8 MoEs
# storing a scale beside each weight: DeepSeek-V3 (58 MoE layers x 256 experts x 3 x 2, ~92k in its ~9 MB index),
# Kimi K2 (60 x 384 x 3 x 2, ~140k). 200,000 tensors verify in a few seconds (docs/concepts/bounds.md).
MAX_INDEX_BYTES = 64 << 20
MAX_TENSORS = 200_000
MAX_NAME_CHARS = 1024  # transformers' names are < 200 characters
MAX_RANK = 16  # tensors of published models have rank <= 5
MAX_DIM = 1 << 63  # safetensors stores shapes and offsets as u64 / usize
_DTYPE = re.compile(r"[A-Z][A-Z0-9_]{0,15}")  # safetensors' dtype names: BF16, F8_E4M3, F4, C64, ...


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


def _sizes(value: Any, most: int) -> list[int] | None:
    """``value`` when it is a list of at most ``most`` integers in [0, 2^63), else None."""
    if not isinstance(value, list) or len(value) > most:
        return None
    for x in value:  # a plain loop: called twice for each of up to 200,000 tensors
        if type(x) is not int or not 0 <= x < MAX_DIM:
            return None
    return value


def _printable(name: str) -> bool:
    """Whether ``name`` can be printed and written as UTF-8 (no lone surrogate)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _entry(path: Path, file_name: str, name: str, value: Any) -> StoredTensor:
    if len(name) > MAX_NAME_CHARS or not _printable(name):
        shown = name[:60].encode("utf-8", "backslashreplace").decode("ascii", "backslashreplace")
        raise _bad(path, f"tensor name {shown!r}... is over {MAX_NAME_CHARS} characters or not UTF-8 text")
    if not isinstance(value, dict):
        raise _bad(path, f"tensor {name!r} has no dtype/shape/data_offsets record")
    dtype, shape = value.get("dtype"), _sizes(value.get("shape"), MAX_RANK)
    offsets = _sizes(value.get("data_offsets"), 2)
    if not isinstance(dtype, str) or _DTYPE.fullmatch(dtype) is None:
        raise _bad(
            path, f"tensor {name!r} has dtype {str(dtype)[:20]!r}, not a safetensors dtype (BF16, F32, ...)"
        )
    if shape is None or offsets is None or len(offsets) != 2:
        raise _bad(path, f"tensor {name!r} has a malformed shape or data_offsets (at most {MAX_RANK} "
                   "non-negative integers below 2^63; two offsets)")  # fmt: skip
    if offsets[1] < offsets[0]:
        raise _bad(path, f"tensor {name!r} ends before it begins ({offsets})")
    return StoredTensor(name, tuple(shape), dtype, offsets[1] - offsets[0], file_name)


def _parse_json(text: bytes, path: Path, what: str) -> Any:
    """``text`` as JSON; a ConfigError naming ``path`` for anything else (deep nesting and huge integers too)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise _bad(path, f"has a {what} nested too deeply to be JSON a checkpoint writes") from None
    except UnicodeDecodeError as exc:
        raise _bad(path, f"has a {what} that is not UTF-8 (at byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise _bad(path, f"has a {what} that is not JSON ({exc.msg} at character {exc.pos})") from None
    except ValueError:  # an integer of more than sys.get_int_max_str_digits() digits
        raise _bad(path, f"has a {what} holding an integer too long to be a size") from None


def read_header(path: Path, shown: Path | None = None) -> list[StoredTensor]:
    """The tensors ``path``'s safetensors header lists (nothing else of the file is read). ``path`` must already be
    confined (:func:`embedcalc.sources.confine.inside`); ``shown`` is the name errors give (default ``path``)."""
    shown = shown or path
    fd = open_regular(path, shown)
    try:
        head = read_up_to(fd, 8)
        if len(head) < 8:
            raise _bad(shown, f"is {len(head)} bytes long")
        (length,) = struct.unpack("<Q", head)
        if length > MAX_HEADER_BYTES:  # the number is not shown: it is whatever 8 bytes the file starts with
            raise _bad(
                shown, f"declares a header longer than {MAX_HEADER_BYTES:,} bytes (safetensors' limit)"
            )
        text = read_up_to(fd, length)
    except OSError as exc:
        raise UnsupportedEnvironmentError(
            f"{shown}: cannot be read ({exc.strerror or exc})", "checkpoint_io"
        ) from None
    finally:
        os.close(fd)
    if len(text) < length:
        raise _bad(shown, f"ends inside its {length:,}-byte header")
    header = _parse_json(text, shown, "header")
    if not isinstance(header, dict):
        raise _bad(shown, "has a header that is not a JSON object")
    if len(header) > MAX_TENSORS:
        raise _bad(shown, f"lists {len(header):,} tensors (at most {MAX_TENSORS:,})")
    file_name = shown.name
    return [_entry(shown, file_name, name, value) for name, value in header.items() if name != "__metadata__"]


def _index_error(index: Path, why: str) -> ConfigError:
    message = f"{index}: {why}; expected a JSON object with a weight_map of tensor name -> shard file"
    return ConfigError(message, [Problem(INDEX, message, "checkpoint_malformed")], "checkpoint_malformed")


def _files(directory: Path, root: Path) -> tuple[list[str], bool]:
    index = directory / INDEX
    if os.path.lexists(index):
        resolved = inside(index, root, "the index")
        try:
            data = read_bytes_bounded(resolved, MAX_INDEX_BYTES, "a checkpoint index")
        except ConfigError as exc:
            why = exc.problems[0].message if exc.problems else exc.message
            raise _index_error(index, why) from None
        loaded = _parse_json(data, index, "index")
        weight_map = loaded.get("weight_map") if isinstance(loaded, dict) else None
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise _index_error(index, "no weight_map of strings")
        if len(weight_map) > MAX_TENSORS:
            raise _index_error(index, f"it maps {len(weight_map):,} tensors (at most {MAX_TENSORS:,})")
        names = sorted(set(weight_map.values()))
        for name in names:
            wrong = member_name_problem(name) or (
                None if name.endswith(".safetensors") else "is not a *.safetensors file"
            )
            if wrong is not None:
                shown = name[:80].encode("utf-8", "backslashreplace").decode("ascii", "backslashreplace")
                raise _index_error(index, f"the weight_map names {shown!r}, which {wrong}")
        return names, True
    return sorted(p.name for p in directory.glob("*.safetensors")), False


def _raw_config(directory: Path, root: Path) -> dict[str, Any]:
    """``config.json`` beside the checkpoint as a dict ({} when absent or not an object); confined like the rest."""
    config = directory / "config.json"
    if not os.path.lexists(config):
        return {}
    data = read_bytes_bounded(inside(config, root, "config.json"))
    loaded = _parse_json(data, config, "config.json")
    return loaded if isinstance(loaded, dict) else {}


def read_checkpoint(directory: Path) -> Checkpoint:
    """Every tensor header of the checkpoint in ``directory`` (exit 4 when it holds no safetensors file). Every
    file opened resolves inside ``directory`` (:mod:`embedcalc.sources.confine`)."""
    root = checkpoint_root(directory)
    names, sharded = _files(directory, root)
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
            "e.g. `hf download ORG/NAME --include '*.safetensors' '*.json'`",
            "checkpoint_not_found",
        )
    tensors: list[StoredTensor] = []
    for name in names:
        path = directory / name
        what = f"a shard named by {INDEX}" if sharded else "a safetensors file"
        tensors += read_header(inside(path, root, what), path)
        if len(tensors) > MAX_TENSORS:
            raise _bad(path, f"brings the checkpoint to {len(tensors):,} tensors (at most {MAX_TENSORS:,})")
    return Checkpoint(directory, tuple(names), tuple(tensors), sharded, _raw_config(directory, root))
