"""Tables for ``embedcalc hardware``: the catalogue at a glance, one device with every source, the local cache."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.markup import escape
from rich.table import Table

from embedcalc.devices.catalogue import PEAK_DTYPES, Device
from embedcalc.devices.figures import Figure
from embedcalc.render import units
from embedcalc.render.fit import FitTable

if TYPE_CHECKING:  # the catalogue tables need no reconcile code
    from embedcalc.reconcile.peak import PeakResult

CATALOGUE_CAPTION = (
    "Dense peaks (no 2:4 sparsity), TFLOP/s (int8: TOP/s); memory in binary units; links per direction; $/h: a "
    "dated default on-demand price per device-hour (override with --price-per-hour). `embedcalc hardware show "
    "NAME` prints every source. — : the device has no such rate (or no public hourly price)."
)


def _tera(figure: Figure | None) -> str:
    return "—" if figure is None else f"{figure.value / 1e12:,.1f}"


def _rate(value: float) -> str:
    return units.si(value, "B/s")


def _dollars(value: float) -> str:
    return f"${value:,.2f}"


def hardware_table(devices: list[Device], local_measured: bool) -> Table:
    """One row per device: peaks by dtype, memory, bandwidth, interconnect."""
    caption = CATALOGUE_CAPTION + (
        "" if local_measured else " `local` appears after `embedcalc bench --peak`."
    )
    table = FitTable(title="Hardware catalogue", caption=caption, title_justify="left",
                     drop=("device", "interconnect", "$/h", "fp4", "int8", "tf32", "fp8", "fp16"))  # fmt: skip
    table.add_column("name", whole=True)
    table.add_column("device")
    for dtype in PEAK_DTYPES:
        table.add_column(dtype, justify="right", whole=True)
    for name in ("memory", "bandwidth", "interconnect", "$/h"):
        table.add_column(name, justify="right", whole=name != "interconnect")
    for d in devices:
        link = d.interconnect or d.host_link
        table.add_row(
            d.name, escape(d.title), *(_tera(d.peak_flops_per_s.get(t)) for t in PEAK_DTYPES),
            units.binary_bytes(d.memory), _rate(d.bandwidth),
            "—" if link is None else f"{link.kind} {_rate(link.per_direction_bytes_per_s.value)}",
            "—" if d.price_per_hour is None else _dollars(d.price_per_hour.value),
        )  # fmt: skip
    return table


def _figure_row(table: Table, device: Device, label: str, shown: str, figure: Figure) -> None:
    table.add_row(label, shown, escape(figure.note or ""), escape(device.citation(figure)))


def device_table(device: Device) -> Table:
    """Every figure of one device with its note and full citation."""
    table = FitTable(title=escape(f"{device.name} — {device.title}"), title_justify="left", drop=("note",),
                  caption="Peaks are dense; links per direction; the price is a dated default "
                  "(--price-per-hour overrides).")  # fmt: skip
    table.add_column("quantity")
    table.add_column("value", justify="right", prefer_whole=True)
    table.add_column("note")
    table.add_column("source")
    for dtype, figure in device.peak_flops_per_s.items():
        unit = "OP/s" if dtype == "int8" else "FLOP/s"
        _figure_row(table, device, f"peak {dtype} (dense)", units.si(figure.value, unit), figure)
    _figure_row(table, device, "memory", f"{units.binary_bytes(device.memory)} ({device.memory:,} B)",
                device.memory_bytes)  # fmt: skip
    _figure_row(
        table, device, "memory bandwidth", _rate(device.bandwidth), device.memory_bandwidth_bytes_per_s
    )
    for dtype, rate in device.gemv_bytes_per_s.items():
        _figure_row(table, device, f"GEMV {dtype} (one row, weights from memory)", _rate(rate.value), rate)
    for label, fraction in (("max achievable matmul", device.matmul_fraction),
                            ("serving attention kernel", device.inference_attention_fraction)):  # fmt: skip
        if fraction is not None:
            _figure_row(table, device, f"{label} (of the BF16 peak)", units.percent(fraction.value), fraction)
    for label, link in (("interconnect", device.interconnect), ("network", device.network),
                        ("host link", device.host_link)):  # fmt: skip
        if link is not None:
            fig = link.per_direction_bytes_per_s
            domain = f", {link.domain_size} devices" if link.domain_size else ""
            _figure_row(table, device, f"{label} ({link.kind}, per direction{domain})", _rate(fig.value), fig)
            if link.latency_s is not None:
                lat = link.latency_s
                _figure_row(table, device, f"{label} latency per hop", units.seconds(lat.value), lat)
    price = device.price_per_hour
    if price is not None:
        shown = f"{_dollars(price.value)} / h"
        _figure_row(table, device, f"price (default, read {price.date})", shown, price)
    else:
        table.add_row(
            "price", "—", "no public on-demand hourly price in the catalogue: give --price-per-hour", ""
        )
    if device.measured is not None:
        m = device.measured
        table.add_section()
        table.add_row("measured", escape(m.measured_at), "", escape(f"{m.device}, torch {m.torch_version}"))
        if m.matches:
            eff = ", ".join(f"{k} {units.percent(v)}" for k, v in m.efficiency.items())
            table.add_row("of datasheet", escape(m.matches), "", escape(eff))
    return table


def local_summary(result: PeakResult) -> Table:
    """What ``bench --peak`` measured for memory and kernel overhead, and where it cached ``local``."""
    local = result.local
    table = FitTable(
        title=escape(f"Memory bandwidth and kernel overhead — {result.device}"),
        title_justify="left",
        caption=escape(
            f"{local.bandwidth_method}. Kernel overhead: {local.kernel_overhead_method}. GEMV: {local.gemv_method}."
            + (f" GEMM rows: {local.gemm_rows_method}." if local.gemm_rows_method else "")
        ),
    )
    table.add_column("quantity")
    table.add_column("value", justify="right")
    table.add_row("copy", _rate(local.copy_bytes_per_s))
    table.add_row("triad", _rate(local.triad_bytes_per_s))
    table.add_row("kernel overhead", f"{local.kernel_overhead_s * 1e6:.2f} µs per kernel")
    table.add_row(f"GEMV ({result.dtype}, one row, weights from memory)", _rate(local.gemv_bytes_per_s))
    if local.gemm_rows_method is not None:
        half = local.gemm_half_rows
        table.add_row("GEMM rows at half rate", "not fitted" if half is None else f"{half:.3g}")
    link = result.loopback
    if link is not None:
        m = link.measured
        table.add_row(f"all-reduce, {m.nproc} processes, {m.small_bytes:,} B", units.seconds(m.small_s))
        table.add_row(
            f"all-reduce, {m.nproc} processes, {units.binary_bytes(m.large_bytes)}", units.seconds(m.large_s)
        )
        table.add_row("loopback link per direction", "not determined" if link.per_direction_bytes_per_s is None
                      else _rate(link.per_direction_bytes_per_s))  # fmt: skip
        table.add_row("loopback hop latency", units.seconds(link.latency_s))
    table.add_row("memory", units.binary_bytes(local.memory_bytes))
    for key, value in local.efficiency.items():
        table.add_row(f"of {local.catalogue_match} datasheet ({key})", units.percent(value))
    table.add_row("cached as --hardware local", escape(local.cache_path))
    return table
