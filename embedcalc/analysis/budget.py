"""Budgets for CI (``--max-params``, ``--max-memory``, ``--max-flops``): strict parsing of human sizes and the check.

Sizes: a plain integer (``2000000``), scientific notation (``2e12``), or a number with a suffix. Counts take SI
suffixes K/M/B/G/T/P (``400M``, ``1.3B``; B = billion, as model sizes are quoted); memory takes bytes with decimal
(``16GB`` = 16·10⁹) or binary (``16GiB`` = 16·2³⁰) units, or a bare number of bytes. Token lengths (``--seq-len
8k``) read as vLLM reads ``--max-model-len`` (``human_readable_int`` in vllm/engine/arg_utils.py): a lower-case
k/m/g is decimal (``8k`` = 8,000, ``25.6k`` = 25,600), an upper-case K/M/G binary (``8K`` = 8,192, ``128K`` =
131,072: a "128K context" as model cards write it), with no fraction before a binary suffix. Anything else is
refused: a malformed size is a usage error, never a guess.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Context, Decimal, DecimalException, Inexact, localcontext

_COUNT_SUFFIX = {"": 1, "K": 10**3, "M": 10**6, "B": 10**9, "G": 10**9, "T": 10**12, "P": 10**15}
_BYTE_SUFFIX = {
    "": 1, "B": 1,
    "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "PB": 10**15,
    "KIB": 1 << 10, "MIB": 1 << 20, "GIB": 1 << 30, "TIB": 1 << 40, "PIB": 1 << 50,
}  # fmt: skip
_MAX_DIGITS = 60  # 10^60 bytes or FLOPs: far beyond any budget, small enough to parse exactly and at once
_SIZE = re.compile(r"^\s*(?P<number>[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)\s*(?P<unit>[A-Za-z]*)\s*$")


_LENGTH = re.compile(r"^\s*(?P<number>[0-9]+(?:\.[0-9]+)?)\s*(?P<unit>[kmgKMG]?)\s*$")
_LENGTH_UNIT = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


class SizeError(ValueError):
    """A size string that does not parse; the message says what is accepted."""


def parse_size(text: str, kind: str) -> int:
    """``text`` as an integer count (kind ``count``) or number of bytes (kind ``bytes``)."""
    match = _SIZE.match(text)
    table = _BYTE_SUFFIX if kind == "bytes" else _COUNT_SUFFIX
    examples = "16GiB, 16GB, 80e9" if kind == "bytes" else "400M, 1.3B, 2e12"
    if not match:
        raise SizeError(f"{text!r} is not a size; write a number with an optional unit, e.g. {examples}")
    unit = match["unit"].upper()
    if kind == "count" and match["unit"] != match["unit"].upper():
        unit = "?"  # lower-case suffixes (m, b) are ambiguous (milli? bytes?) and refused
    if unit not in table:
        units = ", ".join(u for u in table if u) if kind == "count" else "B, KB..PB, KiB..PiB"
        raise SizeError(f"{text!r}: unknown unit {match['unit']!r}; use one of {units}, e.g. {examples}")
    try:
        with localcontext(
            Context(prec=_MAX_DIGITS + 20, Emax=_MAX_DIGITS + 20, Emin=-_MAX_DIGITS - 20)
        ) as ctx:
            ctx.traps[Inexact] = False
            value = Decimal(match["number"]) * table[unit]
            too_big = value.adjusted() > _MAX_DIGITS
    except DecimalException:
        too_big = True
    if too_big:
        raise SizeError(f"{text!r} is larger than 10^{_MAX_DIGITS}; no model or device is that big")
    if value != value.to_integral_value():
        raise SizeError(f"{text!r} is {value} — not a whole number")
    if value <= 0:
        raise SizeError(f"{text!r} must be positive")
    return int(value)


def parse_length(text: str) -> int:
    """A token length as vLLM reads one (module docstring): ``4096``, ``8k`` (8,000), ``8K`` (8,192)."""
    match = _LENGTH.match(text)
    if not match or len(match["number"]) > _MAX_DIGITS:
        raise SizeError(
            f"{text!r} is not a token count; write a whole number, or k/m/g (x1,000) or K/M/G (x1,024) after it, "
            "e.g. 4096, 8k = 8,000, 8K = 8,192, as vLLM reads --max-model-len"
        )
    number, unit = Decimal(match["number"]), match["unit"]
    if unit.isupper() and number != number.to_integral_value():
        raise SizeError(f"{text!r}: a fraction with a binary suffix is ambiguous; write "
                        f"{match['number']}{unit.lower()} (x1,000) or a whole number of {unit}")  # fmt: skip
    value = number * _LENGTH_UNIT[unit]
    if value != value.to_integral_value():
        raise SizeError(f"{text!r} is {value} — not a whole number of tokens")
    return int(value)


@dataclass(frozen=True)
class Budget:
    """Upper limits; None means no limit."""

    max_params: int | None = None
    max_memory_bytes: int | None = None
    max_flops: int | None = None

    @property
    def empty(self) -> bool:
        return self.max_params is None and self.max_memory_bytes is None and self.max_flops is None


@dataclass(frozen=True)
class BudgetViolation:
    """One exceeded limit: which flag, the limit, the value and the excess."""

    flag: str
    limit: int
    value: int

    @property
    def excess(self) -> int:
        return self.value - self.limit

    @property
    def excess_fraction(self) -> float:
        return self.excess / self.limit


def check_budget(budget: Budget, params: int, memory_bytes: int, flops: int) -> list[BudgetViolation]:
    """The limits of ``budget`` that the values exceed."""
    out = []
    for flag, limit, value in (
        ("--max-params", budget.max_params, params),
        ("--max-memory", budget.max_memory_bytes, memory_bytes),
        ("--max-flops", budget.max_flops, flops),
    ):
        if limit is not None and value > limit:
            out.append(BudgetViolation(flag, limit, value))
    return out
