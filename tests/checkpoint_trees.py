"""Checkpoint directories for the tests of ``verify --checkpoint``: safetensors files written byte by byte (no torch,
no safetensors package), a one-layer Llama's config and tensors, the canary folder a hostile checkpoint points at,
and a hub cache laid out as huggingface_hub writes it (issue 33). Shared by tests/sources/ (confinement) and
tests/regressions/ (the issue's cases, bounded).

The safetensors format (https://github.com/huggingface/safetensors, "Format"): an 8-byte little-endian header
length, the JSON header (name -> dtype, shape, data_offsets), then the data.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

INDEX = "model.safetensors.index.json"
CANARY = "CANARY"  # the tensor names of the file outside: none may reach any output
CONFIG = {"model_type": "llama", "vocab_size": 64, "hidden_size": 16, "intermediate_size": 32,
          "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2,
          "tie_word_embeddings": True}  # fmt: skip
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def write_header(path: Path, header: bytes, data_bytes: int = 0) -> None:
    """A safetensors file holding exactly ``header`` (raw JSON bytes, hostile or not) and ``data_bytes`` zeros."""
    path.write_bytes(struct.pack("<Q", len(header)) + header + bytes(data_bytes))


def safetensors(path: Path, names: dict[str, list[int]], dtype: str = "F32") -> None:
    """A safetensors file of zeros (4 bytes an element) with these tensor names and shapes."""
    header: dict[str, Any] = {}
    offset = 0
    for name, shape in names.items():
        size = 4
        for dim in shape:
            size *= dim
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    write_header(path, json.dumps(header).encode(), offset)


def llama_tensors(prefix: str = "") -> dict[str, list[int]]:
    """The tensors of CONFIG as transformers' LlamaForCausalLM saves them (tied head: none of its own)."""
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


def model_dir(directory: Path, shards: bool = False) -> Path:
    """A valid checkpoint of CONFIG: one model.safetensors, or two shards and their index."""
    directory.mkdir(parents=True)
    (directory / "config.json").write_text(json.dumps(CONFIG))
    if shards:
        tensors = llama_tensors()
        first = dict(list(tensors.items())[:5])
        rest = dict(list(tensors.items())[5:])
        safetensors(directory / "model-1.safetensors", first)
        safetensors(directory / "model-2.safetensors", rest)
        weight_map = {n: "model-1.safetensors" for n in first} | {n: "model-2.safetensors" for n in rest}
        (directory / INDEX).write_text(json.dumps({"weight_map": weight_map}))
    else:
        safetensors(directory / "model.safetensors", llama_tensors())
    return directory


def make_outside(folder: Path) -> Path:
    """The canary folder, beside (never inside) a checkpoint: a valid safetensors whose tensors are named
    CANARY..., a config.json of another depth, a file starting ``root:x:0`` and an index."""
    folder.mkdir(parents=True)
    safetensors(folder / "canary.safetensors", {f"{CANARY}{i}": [2] for i in range(3)})
    (folder / "config.json").write_text(json.dumps(CONFIG | {"num_hidden_layers": 7}))
    (folder / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    (folder / INDEX).write_text(json.dumps({"weight_map": {CANARY: "model.safetensors"}}))
    return folder


def hub_cache(tmp: Path, snapshot_files: dict[str, Path]) -> Path:
    """A hub cache (the HF_HUB_CACHE folder) holding ``org/tiny`` at COMMIT: each file a symlink into ``blobs/``
    as huggingface_hub writes it, except where ``snapshot_files`` maps a name to a Path (a symlink to it)."""
    repo = tmp / "hub" / "models--org--tiny"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    blobs = repo / "blobs"
    model = model_dir(tmp / "staging")
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
