"""The shipped presets: ``presets/*.yaml`` in a checkout, ``embedcalc/presets/*.yaml`` inside a wheel; and where
any shipped YAML folder is (the device catalogue's ``hardware/`` too, :mod:`embedcalc.devices.catalogue`)."""

from __future__ import annotations

from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent.parent


def shipped_dir(folder: str) -> Path:
    """Where the shipped YAML files of ``folder`` are: inside the installed package, else the source checkout's."""
    packaged = _PACKAGE_DIR / folder
    if packaged.is_dir():
        return packaged
    return _PACKAGE_DIR.parent / folder


def shipped_names(folder: str) -> list[str]:
    """The names (file stems) of the shipped YAML files of ``folder``, sorted."""
    return sorted(p.stem for p in shipped_dir(folder).glob("*.yaml"))


def presets_dir() -> Path:
    """Where the preset YAML files are: inside the installed package, else the source checkout's ``presets/``."""
    return shipped_dir("presets")


def preset_names() -> list[str]:
    """Names of all shipped presets, sorted."""
    return shipped_names("presets")


MAX_PRESET_NAME = 100  # characters; the longest shipped name is a fraction of it


def preset_name(name: str) -> str | None:
    """The shipped preset ``name`` stands for, as people type it: case aside (``Llama-3.1-8B`` is
    ``llama-3.1-8b``, as a model card writes it); None if there is none."""
    if not name or len(name) > MAX_PRESET_NAME:
        return None
    return {n.casefold(): n for n in preset_names()}.get(name.casefold())


def preset_path(name: str) -> Path | None:
    """The preset file for ``name`` (case aside, :func:`preset_name`), or None if there is no such preset."""
    if not name or name.startswith(".") or "/" in name or "\\" in name or len(name) > MAX_PRESET_NAME:
        return None  # a name longer than any preset's would only reach the file system to fail there
    shipped = preset_name(name)
    if shipped is None:
        return None
    path = presets_dir() / f"{shipped}.yaml"
    try:
        return path if path.is_file() else None
    except OSError:  # e.g. a name the file system refuses
        return None
