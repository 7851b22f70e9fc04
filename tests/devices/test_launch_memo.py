"""The eager model's launch counts on ``local`` are counted once per config and workload, then read back
(embedcalc/devices/launch_memo.py): the same numbers, without torch's import and a meta build each time."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from embedcalc.devices import launch_memo
from embedcalc.devices.launch_memo import MAX_ENTRIES, memo_key, memo_path, recall, remember


def test_a_count_is_read_back_under_its_key() -> None:
    key = memo_key({"embed_dim": 768}, 1, 128, "sdpa")
    assert recall(key) is None
    remember(key, (285, 309))
    assert recall(key) == (285, 309)
    assert memo_key({"embed_dim": 768}, 1, 129, "sdpa") != key  # another prompt length, another count


def test_the_memo_keeps_the_newest_entries_only() -> None:
    for i in range(MAX_ENTRIES + 5):
        remember(memo_key({}, 1, i + 1, "sdpa"), (i, i))
    assert len(json.loads(memo_path().read_text())) == MAX_ENTRIES
    assert recall(memo_key({}, 1, 1, "sdpa")) is None  # the oldest went first
    assert recall(memo_key({}, 1, MAX_ENTRIES + 5, "sdpa")) == (MAX_ENTRIES + 4,) * 2


@pytest.mark.parametrize("damage", ["not json", "[1, 2]", '{"k": [1, -2]}', '{"k": "x"}', "directory"])
def test_a_damaged_memo_is_ignored_never_an_error(damage: str) -> None:
    path = memo_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    if damage == "directory":
        path.mkdir()
    else:
        path.write_text(damage)
    assert recall("k") is None
    remember("k", (1, 2))  # replaces a damaged file; leaves a directory of that name alone
    assert recall("k") == (None if damage == "directory" else (1, 2))


def test_analyze_on_local_counts_once_then_reads_the_memo(
    cli: Any, measured_local: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("torch")
    from embedcalc.modeling import launches

    first = cli("analyze", "gpt2", "--hardware", "local", "--format", "json")
    assert first.exit_code == 0, first.output
    assert len(json.loads(memo_path().read_text())) == 1
    monkeypatch.setattr(launches, "eager_launches", lambda *a: pytest.fail("counted again"))
    again = cli("analyze", "gpt2", "--hardware", "local", "--format", "json")
    assert json.loads(again.stdout)["results"] == json.loads(first.stdout)["results"]
    assert memo_path().stat().st_size < launch_memo.MAX_BYTES
