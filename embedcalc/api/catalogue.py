"""The shipped catalogues: presets (each with its size) and devices (each figure with its citation), as
``embedcalc presets`` and ``embedcalc hardware`` list and show them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from embedcalc.api.load import load_target
from embedcalc.errors import ConfigError, Problem

if TYPE_CHECKING:
    from pathlib import Path

    from embedcalc.devices.catalogue import Device

__all__ = ["DeviceList", "device", "device_json", "devices", "preset_file", "preset_rows"]


def preset_rows() -> list[dict[str, Any]]:
    """Every shipped preset: name, architecture, parameters, width, heads and layers (both stacks)."""
    from embedcalc.analysis.params import count_params
    from embedcalc.sources.presets import preset_names

    rows = []
    for name in preset_names():
        config = load_target(name).config
        rows.append({"name": name, "architecture": config.architecture, "params": count_params(config).total,
                     "embed_dim": config.embed_dim, "num_heads": config.num_heads,
                     "num_layers": config.total_layers})  # fmt: skip
    return rows


def preset_file(name: str) -> Path:
    """The YAML file of preset ``name``; an unknown name is a ConfigError with a did-you-mean."""
    from embedcalc.config.problems import did_you_mean
    from embedcalc.sources.presets import preset_names, preset_path

    path = preset_path(name)
    if path is None:
        names = preset_names()
        message = f"unknown preset {name!r}{did_you_mean(name, names)}; presets: {', '.join(names)}"
        raise ConfigError(message, [Problem(name, message, "unknown_preset")], "unknown_preset")
    return path


@dataclass(frozen=True)
class DeviceList:
    """The catalogue's devices, then ``local`` when this machine was measured, and where ``local`` is cached."""

    devices: list[Device]
    local_measured: bool
    local_cache: str


def devices() -> DeviceList:
    """``embedcalc hardware``: the shipped devices (and ``local`` once ``bench --peak`` measured this machine)."""
    from embedcalc.devices.catalogue import catalogue
    from embedcalc.devices.local import local_path, previous_local

    found = catalogue()
    local = previous_local()
    if local is not None:
        found.append(local)
    return DeviceList(found, local is not None, str(local_path()))


def device(name: str) -> Device:
    """One device: a catalogue name, ``local``, or a device file."""
    from embedcalc.devices.resolve import load_device

    return load_device(name)


def device_json(device: Device) -> dict[str, Any]:
    """A device as JSON: the schema's fields plus every figure's citation written out."""
    out = device.model_dump(mode="json", exclude_none=True)
    out["memory_bytes"]["value"] = device.memory
    out["citations"] = {label: device.citation(figure) for label, figure in device.figures()}
    return out
