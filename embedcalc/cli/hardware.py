"""``embedcalc hardware`` lists the device catalogue; ``hardware show NAME`` prints one device with its sources.

Also the ``local`` measurement that ``bench --peak`` makes and caches (:func:`measure_local`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from embedcalc.cli import output
from embedcalc.cli.common import FormatOption, OutputFormat, handle_errors

if TYPE_CHECKING:  # the catalogue (pydantic models) loads when a hardware command runs, not for --help
    from embedcalc.config.hardware import Device
    from embedcalc.reconcile.peak import LocalMeasurement

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


def measure_local(dev: Any, name: str, dtype: str, peak: Any) -> LocalMeasurement:
    """Measure this device's memory bandwidth (STREAM copy/triad), merge the matmul ``peak`` just measured, and
    cache it all as the ``local`` device; returns what ``bench --peak`` reports beside the peak."""
    from embedcalc.config.hardware import LOCAL, local_device, peak_dtype, previous_local, save_local
    from embedcalc.modeling.bandwidth import measure_memory_bandwidth, total_memory_bytes
    from embedcalc.reconcile.peak import LocalMeasurement
    from embedcalc.render.progress import step_progress

    with step_progress(output.stderr, "memory bandwidth") as on_step:
        bandwidth = measure_memory_bandwidth(dev, on_step=on_step)
    how = f"best of {peak.repeat} {peak.size}x{peak.size} {peak.dtype} matmuls"
    device = local_device(
        name, "gpu" if dev.type == "cuda" else "cpu", {peak_dtype(dtype): (peak.flops_per_s, how)},
        total_memory_bytes(dev), (bandwidth.bytes_per_s, bandwidth.method), bandwidth.torch_version, previous_local(),
    )  # fmt: skip
    path = save_local(device)
    measured = device.measured
    return LocalMeasurement(
        memory_bandwidth_bytes_per_s=bandwidth.bytes_per_s,
        copy_bytes_per_s=bandwidth.copy_bytes_per_s,
        triad_bytes_per_s=bandwidth.triad_bytes_per_s,
        bandwidth_method=bandwidth.method,
        memory_bytes=device.memory,
        catalogue_match=measured.matches if measured else None,
        efficiency=measured.efficiency if measured else {},
        cached_as=LOCAL,
        cache_path=str(path),
    )
