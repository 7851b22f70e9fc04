"""The JSON of every command is what it was before the issue 14 refactors (the record in tests/golden/json/).

The default suite compares the cases that name one of ``QUICK_PRESETS`` (and the catalogue commands); the slow
suite compares all of them, ``verify`` on every preset included. After an intended change, regenerate with
``python tests/golden_json.py`` and review the diff of tests/golden/json/.
"""

from __future__ import annotations

from typing import Any

import pytest
from golden_json import QUICK_PRESETS, cases, command_of, load_golden, run


def quick(args: list[str]) -> bool:
    names = [a for a in args[1:] if not a.startswith("-")]
    return args[0] != "verify" and (not names or any(n in QUICK_PRESETS for n in names))


ALL = cases()
_golden: dict[str, dict[str, Any]] = {}


def golden(args: list[str]) -> Any:
    command = command_of(args)
    if command not in _golden:
        _golden[command] = load_golden(command)
    return _golden[command].get(" ".join(args))


def compare(args: list[str]) -> None:
    expected = golden(args)
    assert expected is not None, f"{' '.join(args)} has no record; run python tests/golden_json.py"
    assert run(args) == expected, f"the JSON of {' '.join(args)} changed"


@pytest.mark.parametrize("args", [a for a in ALL if quick(a)], ids=" ".join)
def test_json_unchanged(args: list[str]) -> None:
    compare(args)


@pytest.mark.slow
@pytest.mark.parametrize("args", [a for a in ALL if not quick(a)], ids=" ".join)
def test_json_unchanged_everywhere(args: list[str]) -> None:
    compare(args)


def test_no_stale_records() -> None:
    """Every recorded case is still generated (a case dropped from the list must leave the record too)."""
    keys = {" ".join(a) for a in ALL}
    for command in {command_of(a) for a in ALL}:
        assert set(load_golden(command)) <= keys
