"""``verify --checkpoint``: a model directory or hub-cache snapshot, its config loaded as any target is, and its
safetensors headers reconciled with the analytic counts (no torch: headers only)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from embedcalc.api.load import load_target
from embedcalc.errors import ConfigError, Problem
from embedcalc.reconcile.checkpoint import CheckpointCheck, reconcile_checkpoint
from embedcalc.reconcile.checkpoint_loaded import place_as_loaded
from embedcalc.sources.checkpoint import read_checkpoint
from embedcalc.sources.confine import checkpoint_root, inside
from embedcalc.sources.hub import resolve_hub_id

__all__ = ["checkpoint_directory", "verify_checkpoint"]


def checkpoint_directory(target: str) -> Path:
    """The directory of TARGET's checkpoint: TARGET itself, the directory of a ``config.json``, or the snapshot of
    a hub id in the local Hugging Face cache (exit 4 when it is not there)."""
    path = Path(target).expanduser()
    try:
        if path.is_dir():
            return path
        if path.is_file():
            return path.parent
    except (OSError, ValueError) as exc:  # a name too long, a NUL byte
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not a usable path"
        message = f"{target[:200]}: cannot be read ({why}); --checkpoint reads a model directory"
        raise ConfigError(
            message, [Problem("target", message, "checkpoint_not_found")], "checkpoint_not_found"
        ) from None
    snapshot = resolve_hub_id(target)
    if snapshot is not None:
        return snapshot.parent
    message = f"{target}: no such directory or file, and not a hub id (ORG/NAME); --checkpoint reads a model directory"
    raise ConfigError(message, [Problem("target", message, "checkpoint_not_found")], "checkpoint_not_found")


def verify_checkpoint(target: str, overrides: Sequence[str] | None = None) -> CheckpointCheck:
    """The checkpoint of ``target`` (a directory with ``config.json`` and ``*.safetensors``, or a cached hub id)
    reconciled with the analytic counts of its config, component by component (``embedcalc verify
    --checkpoint``). ``result.agree`` is False when a shape, a count or a component disagrees."""
    directory = checkpoint_directory(target)
    config = directory / "config.json"
    if os.path.lexists(config):
        inside(config, checkpoint_root(directory), "config.json")  # read below by its name, once confined
    if not config.is_file():
        message = f"{directory}: no config.json beside the checkpoint; the counts come from it"
        raise ConfigError(
            message, [Problem("config.json", message, "checkpoint_no_config")], "checkpoint_no_config"
        )
    loaded = load_target(str(config), overrides)
    checkpoint = read_checkpoint(directory)
    check = reconcile_checkpoint(target, loaded.config, checkpoint)
    # a checkpoint in its family's original format: placed again under the names transformers loads it by
    return place_as_loaded(target, loaded.config, checkpoint, check)
