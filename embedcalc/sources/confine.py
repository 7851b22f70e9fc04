"""Files a checkpoint names, opened only inside the directory the user named (issue 33).

A checkpoint directory is data someone else wrote: its ``model.safetensors.index.json`` names shard files, its
``*.safetensors`` may be symlinks, the directory may be a hub-cache snapshot whose files are symlinks into the
repository's ``blobs/``. None of that may make embedcalc read a file the user did not name. The rule, one function
for every file of a checkpoint (the index, each shard, ``config.json``):

- the *root* is the directory the user named, every symlink in it resolved; for a hub-cache snapshot
  (``models--ORG--NAME/snapshots/COMMIT``, named as a hub id or as a path) it is the repository's folder
  ``models--ORG--NAME``, because huggingface_hub stores each snapshot file as a relative symlink to ``../../blobs/``;
- a file is opened only by its resolved path (``os.path.realpath``, strict), and only when that path lies inside
  the root: a symlink is followed when its target stays inside, refused (exit 3, naming the link, never what it
  points at) otherwise; an absolute or ``..`` name in an index is refused before anything is resolved;
- it must be a regular file (checked on the open descriptor too, which is opened non-blocking, so a FIFO never
  blocks) and is read bounded (:func:`embedcalc.sources.reading.read_bytes_bounded` or a header read of a stated
  length).

Between the check and the open a local attacker able to rewrite the directory could swap a path component; that
race is outside what a file reader can close without ``openat2(RESOLVE_BENEATH)`` and is not claimed here.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path, PurePosixPath

from embedcalc.errors import ConfigError, Problem, UnsupportedEnvironmentError


def _error(path: Path | str, why: str, code: str) -> ConfigError:
    message = f"{path}: {why}"
    return ConfigError(message, [Problem(str(path), message, code)], code)


def checkpoint_root(directory: Path) -> Path:
    """The folder no file of ``directory``'s checkpoint may resolve outside of (module docstring)."""
    try:
        resolved = Path(os.path.realpath(directory, strict=True))
    except (OSError, ValueError, RuntimeError) as exc:
        raise _error(directory, f"cannot be resolved ({_why(exc)})", "checkpoint_unreadable") from None
    lexical = Path(os.path.abspath(directory))
    for candidate in (lexical, resolved):
        if candidate.parent.name == "snapshots" and candidate.parent.parent.name.startswith("models--"):
            try:
                return Path(os.path.realpath(candidate.parent.parent, strict=True))
            except (OSError, ValueError, RuntimeError):
                continue
    return resolved


def _why(exc: BaseException) -> str:
    if isinstance(exc, OSError):
        return exc.strerror or type(exc).__name__
    if isinstance(exc, RuntimeError):
        return "a symlink loop"
    return "the name holds a NUL byte" if "null" in str(exc).lower() else str(exc)[:80]


def member_name_problem(name: str) -> str | None:
    """Why ``name`` (a file name written in an index) cannot name a file beside the index, or None."""
    if not name or "\x00" in name:
        return "is empty or holds a NUL byte"
    if len(name) > 255:
        return f"is {len(name):,} characters long (a file name is at most 255)"
    pure = PurePosixPath(name.replace("\\", "/"))
    if pure.is_absolute() or (len(name) > 1 and name[1] == ":"):
        return "is an absolute path; an index names files beside itself"
    if ".." in pure.parts:
        return "holds '..'; an index names files beside itself"
    return None


def inside(path: Path, root: Path, what: str) -> Path:
    """``path`` resolved (symlinks followed) when it lies inside ``root``; else exit 3 naming ``path`` only."""
    try:
        resolved = Path(os.path.realpath(path, strict=True))
    except FileNotFoundError:
        raise UnsupportedEnvironmentError(
            f"{path}: {what} is not on disk (a partial download, or a broken symlink)", "checkpoint_not_found"
        ) from None
    except (OSError, ValueError, RuntimeError) as exc:
        raise _error(path, f"{what} cannot be resolved ({_why(exc)})", "checkpoint_unreadable") from None
    if not resolved.is_relative_to(root):
        raise _error(
            path,
            f"{what} resolves outside the checkpoint directory {root}; embedcalc reads only files inside the "
            "directory it is given (copy the file in, or name the directory that holds it)",
            "checkpoint_path_outside",
        )
    return resolved


def open_regular(path: Path, shown: Path) -> int:
    """A non-blocking read-only descriptor of the regular file ``path`` (already confined); ``shown`` names it in
    errors. The caller closes it."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise _error(shown, f"cannot be read ({_why(exc)})", "checkpoint_unreadable") from None
    try:
        mode = os.fstat(fd).st_mode
    except OSError as exc:
        os.close(fd)
        raise _error(shown, f"cannot be read ({_why(exc)})", "checkpoint_unreadable") from None
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file (a FIFO, device or socket)"
        raise _error(shown, f"is {kind}; a checkpoint file must be a regular file", "checkpoint_unreadable")
    return fd
