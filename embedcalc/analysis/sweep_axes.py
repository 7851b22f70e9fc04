"""Sweep axis values: the ``--embed-dim 128,256,512`` / ``384:12288:+384`` / ``64:16384:x2`` syntax parsed into the
values of one axis (bounds inclusive), with the per-axis limit. :mod:`embedcalc.analysis.sweep` combines the axes
into a grid.
"""

from __future__ import annotations

import re

MAX_AXIS_VALUES = 100_000
AXIS_SYNTAX = "a list 128,256,512, an arithmetic range 384:12288:+384 or a geometric one 64:16384:x2"


class AxisError(ValueError):
    """An axis value string that does not parse; the CLI reports it as a bad flag value (exit 2)."""


def _positive(text: str, what: str) -> int:
    text = text.strip()
    if not re.fullmatch(r"[0-9]+", text) or int(text) < 1:
        raise AxisError(f"{what} {text!r} is not a positive integer")
    return int(text)


def parse_axis(text: str) -> tuple[int, ...]:
    """``128,256,512`` | ``start:stop:+step`` | ``start:stop:xfactor`` -> the values, bounds inclusive.

    A range stops at the last value that does not pass ``stop``; ``1:10:+4`` is 1, 5, 9.
    """
    spec = text.strip()
    if not spec:
        raise AxisError(f"empty; expected {AXIS_SYNTAX}")
    if ":" not in spec:
        values = [_positive(part, "value") for part in spec.split(",")]
        duplicates = sorted({v for v in values if values.count(v) > 1})
        if duplicates:
            raise AxisError(f"{text!r} repeats {', '.join(map(str, duplicates))}")
        if len(values) > MAX_AXIS_VALUES:
            raise AxisError(f"{len(values)} values; at most {MAX_AXIS_VALUES:,} per axis")
        return tuple(values)
    parts = spec.split(":")
    if len(parts) != 3:
        raise AxisError(f"{text!r}: a range is start:stop:+step or start:stop:xfactor (e.g. 64:16384:x2)")
    start, stop, step = _positive(parts[0], "start"), _positive(parts[1], "stop"), parts[2].strip()
    if start > stop:
        raise AxisError(f"{text!r}: start {start} is above stop {stop}")
    if step[:1] == "+":
        increment = _positive(step[1:], "step")
        count = (stop - start) // increment + 1
        if count > MAX_AXIS_VALUES:
            raise AxisError(f"{text!r} has {count:,} values; at most {MAX_AXIS_VALUES:,} per axis")
        return tuple(range(start, stop + 1, increment))
    if step[:1] in ("x", "X", "*"):
        factor = _positive(step[1:], "factor")
        if factor < 2:
            raise AxisError(f"{text!r}: a geometric factor must be at least 2")
        values = []
        value = start
        while value <= stop:
            values.append(value)
            value *= factor
        return tuple(values)
    raise AxisError(f"{text!r}: the step must be +N (arithmetic) or xN (geometric), got {step!r}")
