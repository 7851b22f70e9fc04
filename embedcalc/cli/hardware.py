"""``embedcalc hardware`` lists the device catalogue; ``hardware show NAME`` prints one device with its sources.
(The ``local`` measurement that ``bench --peak`` makes and caches is :func:`embedcalc.api.bench.measure_local`.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from embedcalc.cli import output
from embedcalc.cli.common import FormatOption, OutputFormat, handle_errors

if TYPE_CHECKING:  # the catalogue (pydantic models) loads when a hardware command runs, not for --help
    from embedcalc.config.hardware import Device

app = typer.Typer(help="List the device catalogue (peaks, memory, bandwidths), or show one device.")


def device_json(device: Device) -> dict[str, Any]:
    """A device as JSON: the schema's fields plus every figure's citation written out."""
    out = device.model_dump(mode="json", exclude_none=True)
    out["memory_bytes"]["value"] = device.memory
    out["citations"] = {label: device.citation(figure) for label, figure in device.figures()}
    return out


@app.callback(invoke_without_command=True)
@handle_errors("hardware")
def list_hardware(ctx: typer.Context, format: FormatOption = OutputFormat.table) -> None:
    """List the shipped devices (and `local` once `embedcalc bench --peak` has measured this machine)."""
    if ctx.invoked_subcommand is not None:
        return
    from embedcalc.config.hardware import catalogue, local_path, previous_local

    devices = catalogue()
    local = previous_local()
    if local is not None:
        devices.append(local)
    if format is OutputFormat.json:
        output.emit_json("hardware", [device_json(d) for d in devices], local_cache=str(local_path()))
        return
    from embedcalc.render.hardware import hardware_table

    output.stdout.print(hardware_table(devices, local_measured=local is not None))


@app.command("show")
@handle_errors("hardware show")
def show_hardware(
    name: Annotated[
        str, typer.Argument(help="Device name (see `embedcalc hardware`), `local`, or a device file.")
    ],
    format: FormatOption = OutputFormat.table,
) -> None:
    """Print one device: every figure with its note and datasheet source."""
    from embedcalc.config.hardware import load_device

    device = load_device(name)
    if format is OutputFormat.json:
        output.emit_json("hardware show", [device_json(device)])
        return
    from embedcalc.render.hardware import device_table

    output.stdout.print(device_table(device))
