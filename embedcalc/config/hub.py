"""Hub ids (``Qwen/Qwen3-8B``) as targets: the model's ``config.json`` from the local Hugging Face cache, offline;
or, only when the user allows the network, that one file fetched with ``huggingface_hub``.

The cache is the one huggingface_hub writes: ``HF_HUB_CACHE``, else ``HF_HOME/hub``, else
``~/.cache/huggingface/hub``; in it ``models--ORG--NAME/refs/REVISION`` holds a commit hash and
``models--ORG--NAME/snapshots/COMMIT/config.json`` the file. The revision is ``--revision`` (or ``ORG/NAME@REV``),
default ``main``. The network is allowed by ``--online`` or ``EMBEDCALC_ONLINE=1``, never when ``HF_HUB_OFFLINE``
is set, and needs the ``hub`` extra (``pip install 'embedcalc[hub]'``); huggingface_hub reads the token of a gated
repository itself (``HF_TOKEN`` or ``huggingface-cli login``). Anything else is exit 4 with the command that
fetches the file.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from embedcalc.errors import UnsupportedEnvironmentError

_HUB_ID = re.compile(
    r"(?P<repo>[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*)(?:@(?P<rev>[\w./-]+))?"
)
_TRUE = ("1", "true", "yes", "on")


@dataclass
class HubSettings:
    """What the command line said: the revision and whether the network may be used."""

    revision: str | None = None
    online: bool = False


SETTINGS = HubSettings()


def configure(revision: str | None = None, online: bool = False) -> None:
    """Set the hub options for this process (the CLI's ``--revision`` / ``--online``)."""
    SETTINGS.revision, SETTINGS.online = revision, online


def parse_hub_id(target: str) -> tuple[str, str | None] | None:
    """(ORG/NAME, revision or None) when ``target`` has the shape of a hub id, else None."""
    match = _HUB_ID.fullmatch(target)
    if match is None or target.endswith((".json", ".yaml", ".yml")):
        return None
    return match["repo"], match["rev"]


def cache_dir() -> Path:
    """The Hugging Face hub cache, as huggingface_hub resolves it."""
    for variable in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(variable):
            return Path(os.environ[variable]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    return Path("~/.cache/huggingface/hub").expanduser()


def cached_config(repo: str, revision: str = "main") -> Path | None:
    """The cached ``config.json`` of ``repo`` at ``revision`` (a branch or tag in refs/, or a commit), or None."""
    base = cache_dir() / ("models--" + repo.replace("/", "--"))
    ref = base / "refs" / revision
    try:
        commit = ref.read_text(encoding="utf-8").strip() if ref.is_file() else revision
        path = base / "snapshots" / commit / "config.json"
        return path if path.is_file() else None
    except (OSError, ValueError):
        return None


def online_allowed() -> bool:
    return SETTINGS.online or os.environ.get("EMBEDCALC_ONLINE", "").strip().lower() in _TRUE


def _fetch_command(repo: str, revision: str) -> str:
    rev = "" if revision == "main" else f" --revision {revision}"
    return f"huggingface-cli download {repo} config.json{rev}"


def _not_available(repo: str, revision: str, why: str) -> UnsupportedEnvironmentError:
    return UnsupportedEnvironmentError(
        f"{repo}: {why}. Fetch it with `{_fetch_command(repo, revision)}` (then it is read offline from the cache "
        f"at {cache_dir()}), or allow embedcalc to fetch it: --online or EMBEDCALC_ONLINE=1 with "
        "`pip install 'embedcalc[hub]'`",
        "hub_config_not_cached",
    )


def fetch_config(repo: str, revision: str) -> Path:
    """Download just ``config.json`` of ``repo`` into the cache with huggingface_hub and return its path."""
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in _TRUE:
        raise _not_available(
            repo, revision, "its config.json is not in the local cache and HF_HUB_OFFLINE is set"
        )
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        raise _not_available(repo, revision, "not cached, and --online needs huggingface_hub") from None
    try:
        return Path(hf_hub_download(repo_id=repo, filename="config.json", revision=revision))
    except Exception as exc:  # network, 401/403 for gated repositories, 404: all are the environment's
        raise UnsupportedEnvironmentError(
            f"{repo}: fetching config.json at revision {revision} failed ({type(exc).__name__}: {exc}). For a "
            "gated repository accept its terms on the hub and log in (`huggingface-cli login` or HF_TOKEN)",
            "hub_fetch_failed",
        ) from None


def resolve_hub_id(target: str) -> Path | None:
    """The local path of ``target``'s config.json when it is a hub id (cache, else the network if allowed);
    None when ``target`` is not shaped like one. Raises exit 4 when it is one but cannot be had."""
    parsed = parse_hub_id(target)
    if parsed is None:
        return None
    repo, suffix = parsed
    revision = suffix or SETTINGS.revision or "main"
    path = cached_config(repo, revision)
    if path is not None:
        return path
    if online_allowed():
        return fetch_config(repo, revision)
    raise _not_available(repo, revision, f"its config.json (revision {revision}) is not in the local Hugging Face "
                         "cache, and the network is not allowed")  # fmt: skip
