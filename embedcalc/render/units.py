"""The human units of the tables: :mod:`embedcalc.units` (counts with SI suffixes, bytes in binary units, FLOPs),
under the name render's modules import them by."""

from __future__ import annotations

from embedcalc.units import binary_bytes, count, flops, percent, seconds, si

__all__ = ["binary_bytes", "count", "flops", "percent", "seconds", "si"]
