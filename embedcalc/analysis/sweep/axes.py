"""Sweep axis values: the ``--embed-dim 128,256,512`` / ``384:12288:+384`` / ``64:16384:x2`` syntax parsed into the
values of one axis (bounds inclusive), with the per-axis limit. :mod:`embedcalc.analysis.sweep` combines the axes
into a grid.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Iterable

from embedcalc.config.limits import INT_BOUND, MAX_INT_DIGITS

MAX_AXIS_VALUES = 100_000
AXIS_SYNTAX = "a list 128,256,512, an arithmetic range 384:12288:+384 or a geometric one 64:16384:x2"


class AxisError(ValueError):
    """An axis value string that does not parse; the CLI reports it as a bad flag value (exit 2)."""


def _positive(text: str, what: str) -> int:
    text = text.strip()
    if len(text) > MAX_INT_DIGITS:
        raise AxisError(f"{what} has {len(text):,} characters; values have at most {MAX_INT_DIGITS} digits")
    if not re.fullmatch(r"[0-9]+", text) or int(text) < 1:
        raise AxisError(f"{what} {text!r} is not a positive integer")
    return int(text)


def _no_repeats(values: list[int], shown: str) -> None:
    duplicates = sorted(v for v, n in Counter(values).items() if n > 1)
    if duplicates:
        raise AxisError(f"{shown} repeats {', '.join(map(str, duplicates[:10]))}")


def axis_values(values: Iterable[object]) -> tuple[int, ...]:
    """A Python caller's axis: an iterable of positive ints (at most MAX_AXIS_VALUES are read, so a long list or
    an endless generator is refused before anything is built from it), or a string in the CLI's syntax."""
    if isinstance(values, str):
        return parse_axis(values)
    if isinstance(values, bytes) or not isinstance(values, Iterable):
        raise AxisError(f"expected a list of ints or {AXIS_SYNTAX}, got {type(values).__name__}")
    taken = list(itertools.islice(values, MAX_AXIS_VALUES + 1))
    if len(taken) > MAX_AXIS_VALUES:
        raise AxisError(f"more than {MAX_AXIS_VALUES:,} values; at most {MAX_AXIS_VALUES:,} per axis")
    if not taken:
        raise AxisError(f"empty; expected {AXIS_SYNTAX}")
    for value in taken:
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value < INT_BOUND:
            shown = (
                f"{value!r:.40}" if not isinstance(value, int) or abs(value) < INT_BOUND else "a huge integer"
            )
            raise AxisError(f"{shown} is not a positive integer of at most {MAX_INT_DIGITS} digits")
    ints = [int(v) for v in taken]  # type: ignore[call-overload]
    _no_repeats(ints, "the axis")
    return tuple(ints)


def parse_axis(text: str) -> tuple[int, ...]:
    """``128,256,512`` | ``start:stop:+step`` | ``start:stop:xfactor`` -> the values, bounds inclusive.

    A range stops at the last value that does not pass ``stop``; ``1:10:+4`` is 1, 5, 9.
    """
    spec = text.strip()
    if not spec:
        raise AxisError(f"empty; expected {AXIS_SYNTAX}")
    if ":" not in spec:
        if spec.count(",") >= MAX_AXIS_VALUES:
            raise AxisError(f"{spec.count(',') + 1:,} values; at most {MAX_AXIS_VALUES:,} per axis")
        values = [_positive(part, "value") for part in spec.split(",")]
        _no_repeats(values, f"{text[:60]!r}")
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
