"""The human units of the tables: :mod:`embedcalc.units` (counts with SI suffixes, bytes in binary units, FLOPs),
under the name render's modules import them by, and :func:`predicted`, the one cell a prediction beside a
measurement is drawn as."""

from __future__ import annotations

from embedcalc.units import binary_bytes, count, flops, percent, seconds, si

__all__ = ["binary_bytes", "count", "flops", "percent", "predicted", "seconds", "si"]


def predicted(value: str | None, error_pct: float | None) -> str:
    """A prediction and the measurement's error against it: ``12.30 ms (measured +4.1%)``; ``—`` without one."""
    if value is None:
        return "—"
    return value if error_pct is None else f"{value} (measured {error_pct:+.1f}%)"
