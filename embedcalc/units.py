"""Human units: counts with SI suffixes (109.48M), bytes in binary units (417.6 MiB), FLOPs (22.35 GFLOP).

Plain string formatting, below every layer (like :mod:`embedcalc.errors`): the tables of ``render/`` and the
messages of errors raised anywhere (a run that does not fit names its bytes) write sizes the same way.
"""

from __future__ import annotations

_SI = ((10**15, "P"), (10**12, "T"), (10**9, "G"), (10**6, "M"), (10**3, "k"))
_BINARY = ((1 << 50, "PiB"), (1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB"))


def si(value: int | float, unit: str = "") -> str:
    """``109482240`` -> ``109.48M``; exact below 1000; scientific beyond peta (and for ints too big for a float)."""
    if isinstance(value, int) and abs(value) >= 10**18:
        digits = str(abs(value))
        sign = "-" if value < 0 else ""
        return f"{sign}{digits[0]}.{digits[1:3]}e{len(digits) - 1}{unit}"
    for scale, suffix in _SI:
        if abs(value) >= scale:
            return f"{value / scale:,.2f}{suffix}{unit}"
    return f"{value:,}{unit}" if isinstance(value, int) else f"{value:,.3g}{unit}"


def count(value: int) -> str:
    """An exact integer with thousands separators: ``109,482,240``."""
    return f"{value:,}"


def binary_bytes(value: int | float) -> str:
    """``437928960`` -> ``417.64 MiB``; beyond PiB in PiB with scientific notation when huge."""
    if isinstance(value, int) and value >= 1 << 80:
        return f"{si(value // (1 << 50))} PiB"
    for scale, suffix in _BINARY:
        if abs(value) >= scale:
            return f"{value / scale:,.2f} {suffix}"
    return f"{int(value):,} B"


def flops(value: int | float) -> str:
    return si(value, "FLOP")


def percent(fraction: float) -> str:
    return f"{100 * fraction:.1f}%"


def seconds(value: float | None) -> str:
    """``0.00399`` -> ``3.99 ms``; None -> ``—``."""
    if value is None:
        return "—"
    for scale, unit in ((3600 * 24, "d"), (3600, "h"), (60, "min"), (1, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if abs(value) >= scale:
            return f"{value / scale:,.2f} {unit}"
    return f"{value * 1e9:,.1f} ns"


def dollars(value: float) -> str:
    """``59377.0`` -> ``$59,377.00``; below a cent with 3 significant digits (``$0.00412``), never ``$0.00``."""
    if 0 < abs(value) < 0.01:
        return f"${value:.3g}"
    return f"${value:,.2f}"


def amount(value: float) -> str:
    """A count that is a float (tokens/s, device-hours): whole above 100 (``14,881``), 3 significant digits below
    (``0.0256``, ``42.7``), never a bare ``0`` for a positive value."""
    return f"{value:,.0f}" if abs(value) >= 100 or value == 0 else f"{value:.3g}"
