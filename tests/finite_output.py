"""Whether a successful output holds a non-finite number (issue 33's stricter judge: no ``inf`` in a result), for
the fuzz suite and the issue's cases."""

from __future__ import annotations

import json
import re

# A non-finite number as embedcalc would print one: Python writes a float inf/nan as "inf"/"nan" (a table, CSV,
# "$inf"), JSON as a bare Infinity/NaN (found by parsing). Words are not numbers: "ZeRO-Infinity"
# in a help text, "(the upper bound may be Infinity)" in check's reason for an ignored key, an input's own value
# quoted back ('Infinity').
NON_FINITE = re.compile(r"(?<![A-Za-z_'\"-])-?(inf|nan)(?![A-Za-z_'\"])")


def non_finite(stdout: str, json_output: bool) -> str | None:
    """The non-finite number in a successful output, with its context, or None."""
    if json_output:
        found: list[str] = []
        try:
            json.loads(stdout, parse_constant=found.append)
        except ValueError:
            return None  # not JSON: the invariant reports it
        return f"a bare {found[0]} in the JSON" if found else None
    match = NON_FINITE.search(stdout)
    return None if match is None else repr(stdout[max(0, match.start() - 80) : match.end() + 40])
