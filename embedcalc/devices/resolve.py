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
    if _looks_like_path(target):
        return parse_device(load_mapping(Path(target)), target)
    name = device_name(target)
    if name == LOCAL:
        return load_local()
    if name in hardware_names():
        return parse_device(load_mapping(hardware_dir() / f"{name}.yaml"), name)
    try:
        is_file = Path(target).is_file()
    except (OSError, ValueError):  # a name too long for a file name, a NUL byte: no file, so an unknown name
        is_file = False
    if is_file:
        return parse_device(load_mapping(Path(target)), target)
    raise UnknownDeviceError(target)


def device_name(target: str) -> str:
    """A device name as people type it -> the catalogue's spelling: case, spaces and underscores aside
    (``H100 SXM``, ``h100_sxm`` and ``H100-SXM`` are ``h100-sxm``)."""
    return "-".join(target.strip().casefold().replace("_", " ").replace("-", " ").split())


def _family(name: str) -> str:
    """The part of a device name before its variant: ``h100`` of ``h100-sxm`` and of ``h100-80gb``."""
    return name.split("-", 1)[0]


class UnknownDeviceError(EmbedcalcError):
    """``--hardware`` names no shipped device, not ``local`` and no file: a bad flag value (exit 2). ``flag``: the
    argument as the caller spells it (the Python API's ``hardware``)."""

    def __init__(self, target: str, flag: str = "--hardware") -> None:
        self.target = target
        names = [*hardware_names(), LOCAL]
        typed = device_name(target)
        # a bare family (H100) or a variant the catalogue spells otherwise (h100-80gb): the family's devices,
        # never a near spelling of another family (a100-80gb); else the closest names
        starting = [n for n in names if n.startswith(typed)] if typed else []
        family = [n for n in names if typed and _family(n) == _family(typed)]
        choices = starting or family
        hint = f" (did you mean {' or '.join(choices)}?)" if choices else did_you_mean(typed, names)
        message = (f"{flag} {target!r}: no such device{hint}; `embedcalc hardware` lists them, "
                   "or give the path of a device YAML file")  # fmt: skip
        super().__init__(
            message, ExitCode.USAGE, [Problem(flag, message, "unknown_device")], "unknown_device"
        )
