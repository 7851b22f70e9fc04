"""Hub ids (``Qwen/Qwen3-8B``) as targets: the model's ``config.json`` from the local Hugging Face cache, offline;
or, only when the user allows the network, that one file fetched (bounded in time and size, :func:`fetch_config`)
with the URL, endpoint and token ``huggingface_hub`` gives, and stored in its cache layout.

The cache is the one huggingface_hub writes: ``HF_HUB_CACHE``, else ``HF_HOME/hub``, else
``~/.cache/huggingface/hub``; in it ``models--ORG--NAME/refs/REVISION`` holds a commit hash and
``models--ORG--NAME/snapshots/COMMIT/config.json`` the file. The revision is ``--revision`` (or ``ORG/NAME@REV``),
default ``main``. The network is allowed by ``--online`` or ``EMBEDCALC_ONLINE=1``, never when ``HF_HUB_OFFLINE``
is set, and needs the ``hub`` extra (``pip install 'embedcalc[hub]'``); huggingface_hub reads the token of a gated
repository itself (``HF_TOKEN`` or ``hf auth login``). Anything else is exit 4 with the command that
fetches the file.

Reading the cache is strict (issue 24): ids follow huggingface_hub's own grammar and revisions git's ref-name rules
(no ``..``, no absolute path, no component starting with ``.``; exit 3, or 2 for ``--revision``); a ref file is
read bounded and must hold a commit hash; the config.json found must resolve, symlinks followed, to a file inside
the cache. A file the cache has but that cannot be read (a directory, a FIFO, no permission, a broken ref) is
"found but unreadable" (exit 3), never "not in the cache".
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from embedcalc.errors import ConfigError, Problem, UnsupportedEnvironmentError
from embedcalc.sources.reading import MAX_CONFIG_BYTES, read_bytes_bounded

# huggingface_hub's own grammar (utils/_validators.py validate_repo_id): ORG/NAME, each 1-96 of [A-Za-z0-9_.-],
# starting and ending with a letter or digit, no "--" or "..", not ending in ".git"
_REPO_PART = r"(?=[A-Za-z0-9_])[A-Za-z0-9_.-]{1,96}(?<=[A-Za-z0-9_])"
_HUB_ID = re.compile(rf"(?P<repo>{_REPO_PART}/{_REPO_PART})(?:@(?P<rev>.*))?", re.ASCII | re.DOTALL)
_COMMIT = re.compile(r"[0-9a-f]{40}")  # a snapshot folder's name: huggingface_hub's REGEX_COMMIT_HASH
MAX_REVISION_CHARS = 255
MAX_REF_BYTES = 4096  # a refs/ file holds one 40-character commit hash (and maybe a newline)
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


def revision_problem(revision: str) -> str | None:
    """Why ``revision`` is not a git ref name or commit (``git check-ref-format``'s rules, which the hub's
    branches and tags follow), or None when it is one. A ref name never climbs out of ``refs/`` or names an
    absolute path: no ``..``, no component starting with ``.``, no leading or doubled ``/``."""
    if not revision:
        return "is empty"
    if len(revision) > MAX_REVISION_CHARS:
        return f"is {len(revision):,} characters long; a git ref name is at most {MAX_REVISION_CHARS}"
    bad = sorted({c for c in revision if ord(c) < 0x20 or ord(c) == 0x7F or c in " ~^:?*[\\"})
    if bad:
        return "contains " + ", ".join(repr(c) for c in bad) + ", which git ref names cannot hold"
    rules = (
        (".." in revision, "holds '..'"),
        (revision.startswith("/"), "is an absolute path"),
        (revision.endswith("/") or "//" in revision, "ends with '/' or holds '//'"),
        (revision.endswith((".", ".lock")), "ends with '.' or '.lock'"),
        ("@{" in revision or revision == "@", "holds '@{' or is '@'"),
        (any(part.startswith(".") for part in revision.split("/")), "has a component starting with '.'"),
    )
    return next((f"{why}, which a git ref name cannot" for broken, why in rules if broken), None)


def _revision_error(target: str, revision: str, why: str) -> ConfigError:
    message = (
        f"{target}: revision {revision[:80]!r} {why}; give a branch or tag name (main, v1.0, refs/pr/1) or a "
        "40-character commit hash"
    )
    return ConfigError(message, [Problem(target, message, "hub_revision_invalid")], "hub_revision_invalid")


def parse_hub_id(target: str) -> tuple[str, str | None] | None:
    """(ORG/NAME, revision or None) when ``target`` has the shape of a hub id, else None. A hub id whose
    ``@REVISION`` is not a ref name or commit (``org/m@../../x``) is a ConfigError naming it (exit 3)."""
    match = _HUB_ID.fullmatch(target)
    if match is None or target.endswith((".json", ".yaml", ".yml")):
        return None
    repo, revision = match["repo"], match["rev"]
    if "--" in repo or ".." in repo or repo.endswith(".git"):
        return None  # not a repository the hub can have (huggingface_hub refuses these): a path, if anything
    if revision is not None and (why := revision_problem(revision)) is not None:
        raise _revision_error(target, revision, why)
    return repo, revision


def cache_dir() -> Path:
    """The Hugging Face hub cache, as huggingface_hub resolves it."""
    for variable in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(variable):
            return Path(os.environ[variable]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    return Path("~/.cache/huggingface/hub").expanduser()


def _inside(path: Path, root: Path) -> bool:
    """Whether ``path``, every symlink followed, stays inside ``root`` (itself resolved)."""
    try:
        return path.resolve().is_relative_to(root.resolve())
    except (OSError, RuntimeError, ValueError):  # RuntimeError: a symlink loop (Python 3.11's resolve)
        return False


def _cache_error(path: Path, why: str, code: str) -> ConfigError:
    message = (
        f"{path}: found in the Hugging Face cache but {why}; repair the cache entry (delete the folder and fetch "
        "the file again with `hf download`)"
    )
    return ConfigError(message, [Problem(str(path), message, code)], code)


def _commit_of(ref: Path, root: Path) -> str | None:
    """The commit hash ``refs/REVISION`` holds; None when there is no such ref. The read is bounded (a ref holds 40
    characters) and the content must be a commit hash, so a ref naming ``../..`` or ``/etc`` leads nowhere."""
    if not os.path.lexists(ref):
        return None
    if not _inside(ref, root):
        raise _cache_error(ref, f"it resolves outside the cache ({root})", "hub_path_outside_cache")
    try:
        data = read_bytes_bounded(ref, MAX_REF_BYTES, "a ref (one commit hash)")
    except ConfigError as exc:
        why = exc.problems[0].message if exc.problems else exc.message
        raise _cache_error(ref, f"unreadable as a ref ({why})", "hub_ref_unreadable") from None
    text = data.decode("ascii", errors="replace").strip()
    if _COMMIT.fullmatch(text) is None:
        raise _cache_error(ref, f"it holds {text[:60]!r}, not a 40-character commit hash", "hub_ref_invalid")
    return text


def cached_config(repo: str, revision: str = "main") -> Path | None:
    """The cached ``config.json`` of ``repo`` at ``revision`` (a branch or tag in refs/, or a commit hash), or None
    when the cache does not hold it. Anything the cache holds but embedcalc must not or cannot read (a path
    leading out of the cache, a ref that is no commit hash, a config.json that is a directory, FIFO or unreadable)
    is a ConfigError naming the file (exit 3), never "not cached"."""
    if (why := revision_problem(revision)) is not None:
        raise _revision_error(repo, revision, why)
    root = cache_dir()
    base = root / ("models--" + repo.replace("/", "--"))
    commit = _commit_of(base / "refs" / revision, root)
    if commit is None:
        if _COMMIT.fullmatch(revision) is None:
            return None  # a branch or tag this cache has never seen
        commit = revision
    path = base / "snapshots" / commit / "config.json"
    if not os.path.lexists(path):
        return None
    if not _inside(path, root):
        raise _cache_error(path, f"it resolves outside the cache ({root})", "hub_path_outside_cache")
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        raise _cache_error(path, f"unreadable ({exc.strerror or exc})", "hub_config_unreadable") from None
    if not stat.S_ISREG(mode):
        raise _cache_error(path, "it is not a regular file", "hub_config_unreadable")
    if not os.access(path, os.R_OK):
        raise _cache_error(path, "unreadable (permission denied)", "hub_config_unreadable")
    return path


def online_allowed() -> bool:
    return SETTINGS.online or os.environ.get("EMBEDCALC_ONLINE", "").strip().lower() in _TRUE


def _fetch_command(repo: str, revision: str) -> str:
    rev = "" if revision == "main" else f" --revision {revision}"
    return f"hf download {repo} config.json{rev}"


def _not_available(repo: str, revision: str, why: str) -> UnsupportedEnvironmentError:
    return UnsupportedEnvironmentError(
        f"{repo}: {why}. Fetch it with `{_fetch_command(repo, revision)}` (then it is read offline from the cache "
        f"at {cache_dir()}), or allow embedcalc to fetch it: --online or EMBEDCALC_ONLINE=1 with "
        "`pip install 'embedcalc[hub]'`",
        "hub_config_not_cached",
    )


# --online's bounds (issue 33: a server that never answered held the command 389 s; a 300 MB answer left 629 MB in
# the cache before the size bound refused it): the whole fetch (name lookup, connect, headers, body) finishes within
# ONLINE_DEADLINE_S or is abandoned, each socket operation waits at most that long too, and the body is read in
# memory up to the config bound (1 MiB) before anything is written, so a refused answer leaves nothing in the cache.
# A config.json is a few kB: on any working link the hub answers in well under a second.
ONLINE_DEADLINE_S = 5.0


def _fetch_failed(repo: str, revision: str, why: str) -> UnsupportedEnvironmentError:
    return UnsupportedEnvironmentError(
        f"{repo}: fetching config.json at revision {revision} failed ({why}). For a gated repository accept its "
        "terms on the hub and log in (`huggingface-cli login` or HF_TOKEN)",
        "hub_fetch_failed",
    )


def _headers() -> dict[str, str]:
    """embedcalc's user agent and, as huggingface_hub sends it, the token it finds (``HF_TOKEN``, else the saved
    login) unless ``HF_HUB_DISABLE_IMPLICIT_TOKEN`` is set. Not ``huggingface_hub.utils.build_hf_headers``: in
    huggingface_hub 2.4 its user agent first fetches ``{HF_ENDPOINT}/api/agent-harnesses`` (utils/_detect_agent.py),
    read whole whatever its size (an endpoint answering 300 MB grew the process to 900 MB) and cached in HF_HOME,
    outside the hub cache."""
    import importlib.metadata

    import huggingface_hub
    from huggingface_hub import constants, get_token

    try:
        version = importlib.metadata.version("embedcalc")
    except importlib.metadata.PackageNotFoundError:  # a checkout on sys.path, not installed
        version = "unknown"
    headers = {"user-agent": f"embedcalc/{version}; hf_hub/{huggingface_hub.__version__}"}
    token = None if constants.HF_HUB_DISABLE_IMPLICIT_TOKEN else get_token()
    if token:
        headers["authorization"] = f"Bearer {token}"
    return headers


def _download(repo: str, revision: str) -> tuple[bytes, str | None]:
    """config.json's bytes and the commit the hub says they are from (X-Repo-Commit), fetched within
    :data:`ONLINE_DEADLINE_S` (the fetch runs in a daemon thread, abandoned at the deadline: a name lookup or a
    server trickling its headers is bounded too) and read up to the config bound; huggingface_hub gives the URL
    and the endpoint (``HF_ENDPOINT``)."""
    import threading

    from huggingface_hub import constants, hf_hub_url

    url = hf_hub_url(repo, "config.json", revision=revision, endpoint=os.environ.get("HF_ENDPOINT") or None)
    headers = _headers()
    answer: list[tuple[bytes, str | None] | BaseException] = []

    def fetch() -> None:
        try:
            answer.append(
                _read_bounded(url, headers, repo, revision, constants.HUGGINGFACE_HEADER_X_REPO_COMMIT)
            )
        except BaseException as exc:  # handed to the caller, never raised in the thread
            answer.append(exc)

    worker = threading.Thread(target=fetch, name="embedcalc-online", daemon=True)
    worker.start()
    worker.join(ONLINE_DEADLINE_S)
    if not answer:
        raise _fetch_failed(repo, revision, f"no complete answer within {ONLINE_DEADLINE_S:g} s")
    if isinstance(answer[0], BaseException):
        raise answer[0]
    return answer[0]


def _read_bounded(url: str, headers: dict[str, str], repo: str, revision: str, commit_header: str) -> tuple[
        bytes, str | None]:  # fmt: skip
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, headers=headers)
    try:
        # each socket operation waits a little past the deadline: the caller's deadline, not a socket's, decides
        with urllib.request.urlopen(request, timeout=ONLINE_DEADLINE_S + 1) as response:
            chunks: list[bytes] = []
            size = 0
            while size <= MAX_CONFIG_BYTES:
                chunk = response.read1(min(1 << 16, MAX_CONFIG_BYTES + 1 - size))
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
            if size > MAX_CONFIG_BYTES:
                raise _fetch_failed(repo, revision, f"the answer is over {MAX_CONFIG_BYTES:,} bytes, the bound "
                                    "of a config; nothing was written to the cache")  # fmt: skip
            commit = response.headers.get(commit_header)
    except urllib.error.HTTPError as exc:
        raise _fetch_failed(repo, revision, f"HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:  # no route, refused, timed out, a bad URL
        reason = getattr(exc, "reason", None) or exc
        raise _fetch_failed(repo, revision, f"{type(exc).__name__}: {str(reason)[:200]}") from None
    return b"".join(chunks), commit


def _store(repo: str, revision: str, data: bytes, commit: str) -> Path:
    """Write ``data`` into the cache as huggingface_hub lays it out (blobs/, snapshots/COMMIT/config.json linking
    to its blob, refs/REVISION holding the commit) and return the snapshot's path."""
    base = cache_dir() / ("models--" + repo.replace("/", "--"))
    blob = base / "blobs" / hashlib.sha256(data).hexdigest()
    snapshot = base / "snapshots" / commit / "config.json"
    for folder in (blob.parent, snapshot.parent, base / "refs"):
        folder.mkdir(parents=True, exist_ok=True)
    partial = blob.with_name(blob.name + f".{os.getpid()}.incomplete")
    partial.write_bytes(data)
    os.replace(partial, blob)
    if os.path.lexists(snapshot):
        snapshot.unlink()
    try:
        snapshot.symlink_to(Path("..") / ".." / "blobs" / blob.name)
    except OSError:  # a filesystem without symlinks: huggingface_hub copies too
        snapshot.write_bytes(data)
    if revision != commit:
        ref = base / "refs" / revision
        ref.parent.mkdir(parents=True, exist_ok=True)
        ref.write_text(commit)
    return snapshot


def fetch_config(repo: str, revision: str) -> Path:
    """Download just ``config.json`` of ``repo`` into the cache (bounded: :data:`ONLINE_DEADLINE_S`, 1 MiB) and
    return its path."""
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in _TRUE:
        raise _not_available(
            repo, revision, "its config.json is not in the local cache and HF_HUB_OFFLINE is set"
        )
    try:
        import huggingface_hub  # noqa: F401 (the URL, the endpoint and the token come from it)
    except ImportError:
        raise _not_available(repo, revision, "not cached, and --online needs huggingface_hub") from None
    data, commit = _download(repo, revision)
    if commit is None or _COMMIT.fullmatch(commit.strip()) is None:
        if _COMMIT.fullmatch(revision) is None:
            raise _fetch_failed(repo, revision, "the server did not say which commit the file is from")
        commit = revision
    return _store(repo, revision, data, commit.strip())


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
