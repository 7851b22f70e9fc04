"""Human units: counts with SI suffixes (109.48M), bytes in binary units (417.6 MiB), FLOPs (22.35 GFLOP)."""

from __future__ import annotations

_SI = ((10**15, "P"), (10**12, "T"), (10**9, "G"), (10**6, "M"), (10**3, "k"))
_BINARY = ((1 << 50, "PiB"), (1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB"))


def si(value: int | float, unit: str = "") -> str:
    """``109482240`` -> ``109.48M``; exact below 1000."""
    for scale, suffix in _SI:
        if abs(value) >= scale:
            return f"{value / scale:,.2f}{suffix}{unit}"
    return f"{value:,}{unit}" if isinstance(value, int) else f"{value:,.3g}{unit}"


def count(value: int) -> str:
    """An exact integer with thousands separators: ``109,482,240``."""
    return f"{value:,}"


def binary_bytes(value: int | float) -> str:
    """``437928960`` -> ``417.64 MiB``."""
    for scale, suffix in _BINARY:
        if abs(value) >= scale:
            return f"{value / scale:,.2f} {suffix}"
    return f"{int(value):,} B"


def flops(value: int | float) -> str:
    return si(value, "FLOP")


def percent(fraction: float) -> str:
    return f"{100 * fraction:.1f}%"
