"""``--hardware TARGET`` -> a device (DESIGN.md §10): a catalogue name (:mod:`embedcalc.devices.catalogue`),
``local`` (this machine as ``embedcalc bench --peak`` measured it, :mod:`embedcalc.devices.local`), or the path of
a device file in the catalogue's schema."""

from __future__ import annotations

from pathlib import Path

from embedcalc.config.problems import did_you_mean
from embedcalc.devices.catalogue import LOCAL, Device, hardware_dir, hardware_names, parse_device
from embedcalc.devices.local import load_local
from embedcalc.errors import EmbedcalcError, ExitCode, Problem
from embedcalc.sources.parsing import load_mapping


def _looks_like_path(target: str) -> bool:
    return "/" in target or "\\" in target or target.endswith((".yaml", ".yml", ".json"))


def load_device(target: str) -> Device:
    """A catalogue name, ``local``, or a device file path -> the validated device.

    ``local`` before any ``embedcalc bench --peak`` is an environment error (exit 4); an unknown name is a bad
    flag value (exit 2, with a did-you-mean); a bad file is exit 3.
    """
    if target == LOCAL:
        return load_local()
    if target in hardware_names():
        return parse_device(load_mapping(hardware_dir() / f"{target}.yaml"), target)
    if _looks_like_path(target) or Path(target).is_file():
        return parse_device(load_mapping(Path(target)), target)
    raise UnknownDeviceError(target)


class UnknownDeviceError(EmbedcalcError):
    """``--hardware`` names no shipped device, not ``local`` and no file: a bad flag value (exit 2)."""

    def __init__(self, target: str) -> None:
        names = [*hardware_names(), LOCAL]
        starting = [n for n in names if n.startswith(target.lower())] if target else []
        hint = f" (did you mean {' or '.join(starting)}?)" if starting else did_you_mean(target, names)
        message = (f"--hardware {target!r}: no such device{hint}; `embedcalc hardware` lists them, "
                   "or give the path of a device YAML file")  # fmt: skip
        super().__init__(
            message, ExitCode.USAGE, [Problem("--hardware", message, "unknown_device")], "unknown_device"
        )
