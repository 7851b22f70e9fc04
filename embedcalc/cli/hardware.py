"""``embedcalc hardware`` lists the device catalogue; ``hardware show NAME`` prints one device with its sources.

The catalogue (pydantic models, :mod:`embedcalc.api.catalogue`) loads when a hardware command runs, not for
--help. The ``local`` measurement that ``bench --peak`` makes and caches is :func:`embedcalc.api.bench.measure_local`.
"""

from __future__ import annotations

from typing import Annotated

import typer

from embedcalc.cli import output
from embedcalc.cli.common import FormatOption, OutputFormat, handle_errors

app = typer.Typer(help="List the device catalogue (peaks, memory, bandwidths), or show one device.")


@app.callback(invoke_without_command=True)
@handle_errors("hardware")
def list_hardware(ctx: typer.Context, format: FormatOption = OutputFormat.table) -> None:
    """List the shipped devices (and `local` once `embedcalc bench --peak` has measured this machine)."""
    if ctx.invoked_subcommand is not None:
        return
    from embedcalc.api.catalogue import device_json, devices

    listed = devices()
    if format is OutputFormat.json:
        output.emit_json("hardware", [device_json(d) for d in listed.devices], local_cache=listed.local_cache)
        return
    from embedcalc.render.hardware import hardware_table

    output.stdout.print(hardware_table(listed.devices, local_measured=listed.local_measured))


@app.command("show")
@handle_errors("hardware show")
def show_hardware(
    name: Annotated[
        str, typer.Argument(help="Device name (see `embedcalc hardware`), `local`, or a device file.")
    ],
    format: FormatOption = OutputFormat.table,
) -> None:
    """Print one device: every figure with its note and datasheet source."""
    from embedcalc.api.catalogue import device, device_json

    found = device(name)
    if format is OutputFormat.json:
        output.emit_json("hardware show", [device_json(found)])
        return
    from embedcalc.render.hardware import device_table

    output.stdout.print(device_table(found))
