"""The eager model's launch counts on ``local`` remembered between runs (``$XDG_CACHE_HOME/embedcalc/launches.json``).

Counting them (:mod:`embedcalc.modeling.launches`) imports torch and builds the model on the meta device: seconds,
where the rest of ``analyze --hardware local`` takes a fraction of one. The count depends only on the resolved
config, the batch, the prompt length, the attention implementation and embedcalc's version, so it is kept under a
digest of those, the newest :data:`MAX_ENTRIES` of them. The memo is a cache: an unreadable, foreign or damaged
file (a directory, a FIFO, bad JSON) is ignored and replaced, never an error, and it is written atomically.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

from embedcalc.devices.local import local_path

MAX_ENTRIES = 256  # configs x workloads remembered; the oldest go first
MAX_BYTES = 1 << 20  # a memo larger than this is not read (it cannot be one embedcalc wrote)


def memo_path() -> Path:
    return local_path().with_name("launches.json")


def memo_key(config: dict[str, Any], batch_size: int, seq_len: int, attention: str) -> str:
    """A digest of what the count depends on (module docstring)."""
    try:
        version = metadata.version("embedcalc")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        version = "unknown"
    what = [config, batch_size, seq_len, attention, version]
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()


def _entries(path: Path) -> dict[str, list[int]]:
    try:
        if not path.is_file() or path.stat().st_size > MAX_BYTES:
            return {}
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if isinstance(v, list) and len(v) == 2
            and all(type(n) is int and 0 <= n < 1 << 40 for n in v)}  # fmt: skip


def recall(key: str) -> tuple[int, int] | None:
    """The (prefill, decode) counts remembered under ``key``, or None."""
    found = _entries(memo_path()).get(key)
    return None if found is None else (found[0], found[1])


def remember(key: str, counts: tuple[int, int]) -> None:
    """Keep ``counts`` under ``key`` (best effort: a cache that cannot be written is left as it is)."""
    path = memo_path()
    entries = _entries(path)
    entries.pop(key, None)
    entries[key] = list(counts)
    kept = dict(list(entries.items())[-MAX_ENTRIES:])
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        if os.path.lexists(path) and not path.is_file():
            return  # someone else's directory or FIFO under our name: leave it
        fd, tmp = tempfile.mkstemp(prefix=".launches.", suffix=".json.tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump(kept, out)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
