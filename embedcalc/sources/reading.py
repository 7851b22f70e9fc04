"""Reading a config file's text off disk safely: regular files only, a bounded number of bytes, UTF-8 text.

Every failure becomes a :class:`~embedcalc.errors.ConfigError` naming the file (:func:`file_error`); nothing here
raises a bare exception for bad input. Only regular files are read: a FIFO, a device such as ``/dev/zero`` or
``/dev/urandom``, a socket or a directory is refused before it is opened for reading, and again on the open
descriptor, and at most ``MAX_CONFIG_BYTES + 1`` bytes are read whatever the file claims its size is. Parsing the
text (YAML/JSON syntax and the numbers in it) is :mod:`embedcalc.sources.parsing`.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from embedcalc.errors import ConfigError, Problem

# a model config is a few hundred bytes and a HF config.json a few KiB, but a quantized checkpoint's may list every
# quantized layer: NVIDIA's MiniMax-M3-NVFP4 config.json is 3.1 MB (2.4 MB of quantization_config.quantized_layers)
MAX_CONFIG_BYTES = 8 << 20


def file_error(path: Path, message: str, code: str) -> ConfigError:
    """A ConfigError for ``path`` whose message and single problem both name the file."""
    return ConfigError(f"{path}: {message}", [Problem(str(path), message, code)], code)


def _kind(mode: int) -> str | None:
    """What a non-regular file is, for the message (None for a regular file)."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISFIFO(mode):
        return "named pipe (FIFO)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "special file"


def _refuse_kind(path: Path, kind: str) -> ConfigError:
    if kind == "directory":
        return file_error(path, "is a directory, not a config file", "file_is_directory")
    return file_error(path, f"is a {kind}, not a regular file; embedcalc reads configs only from regular files",
                 "file_not_regular")  # fmt: skip


def _os_failure(path: Path, exc: OSError) -> ConfigError:
    if exc.errno in (errno.ENOENT, errno.ENOTDIR):
        return file_error(
            path, "no such file (and not a preset name; see `embedcalc presets`)", "file_missing"
        )
    if exc.errno == errno.ENAMETOOLONG:
        return file_error(path, "cannot be read: the file name is too long", "file_unreadable")
    return file_error(path, f"cannot be read: {exc.strerror or exc}", "file_unreadable")


def read_up_to(fd: int, count: int) -> bytes:
    """Up to ``count`` bytes from the descriptor ``fd`` (fewer only at the end of the file), in 64 KiB reads."""
    chunks: list[bytes] = []
    left = count
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 16))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_bytes_bounded(path: Path, limit: int = MAX_CONFIG_BYTES, what: str = "a model config") -> bytes:
    """At most ``limit`` bytes of the regular file ``path``; ConfigError for anything else or anything larger.

    The type is checked before opening (``open`` on a FIFO would block) and again on the descriptor, which is
    opened non-blocking; at most ``limit + 1`` bytes are read, so a size the file does not report (a device, a
    file growing while read) cannot make the read unbounded.
    """
    try:
        kind = _kind(os.stat(path).st_mode)
    except (OSError, ValueError) as exc:  # ValueError: an embedded NUL in the name
        if isinstance(exc, ValueError):
            raise file_error(
                path, "cannot be read: the file name contains a NUL byte", "file_unreadable"
            ) from None
        raise _os_failure(path, exc) from None
    if kind is not None:
        raise _refuse_kind(path, kind)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise _os_failure(path, exc) from None
    try:
        kind = _kind(os.fstat(fd).st_mode)
        if kind is not None:
            raise _refuse_kind(path, kind)
        data = read_up_to(fd, limit + 1)
    except OSError as exc:
        raise _os_failure(path, exc) from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise file_error(path, f"is more than {limit:,} bytes; {what} is at most {limit:,}", "file_too_big")
    return data


def read_text(path: Path) -> str:
    """The file's text, or a ConfigError for a missing file, a directory or other non-regular file, a binary or
    oversized file (read through :func:`read_bytes_bounded`)."""
    data = read_bytes_bounded(path)
    if b"\x00" in data:
        raise file_error(path, "is a binary file, not YAML or JSON text", "file_binary")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise file_error(
            path, f"is not UTF-8 text (byte {exc.start}); expected YAML or JSON", "file_binary"
        ) from exc
    if not text.strip():
        raise file_error(
            path,
            "is empty; expected a mapping of config keys (see `embedcalc presets show bert-base`)",
            "file_empty",
        )
    return text
