"""docs/concepts/fine-tuning.md: every row of its table is what ``analyze`` prints for the command it names."""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

import pytest
from paths import ROOT

PAGE = ROOT / "docs" / "concepts" / "fine-tuning.md"
ROW = re.compile(r"^\| `([^`]+)` \| ([\d,]+) \| ([\d,]+) \| ([\d.]+) GiB \| (—|[\d.]+ GiB) \|$", re.M)
SEQ = {"gpt2": "1024", "bert-base": "512", "t5-base": "512"}


def _rows() -> list[tuple[str, ...]]:
    return ROW.findall(PAGE.read_text())


def test_the_page_has_its_table() -> None:
    assert len(_rows()) >= 10


@pytest.mark.parametrize("row", _rows(), ids=lambda r: r[0])
def test_row_is_what_analyze_prints(cli: Any, row: tuple[str, ...]) -> None:
    args, trainable, total, device, host = row
    model = args.split()[0]
    result = cli("analyze", *shlex.split(args), "--mode", "training", "--dtype", "bf16", "--seq-len",
                 SEQ.get(model, "2048"), "--format", "json")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    tune = json.loads(result.stdout)["results"][0]["finetune"]
    assert f"{tune['trainable_params']:,}" == trainable
    assert f"{tune['all_params']:,}" == total
    assert f"{tune['memory']['device_bytes'] / 2**30:.2f}" == device
    held = tune["memory"]["host_bytes"]
    assert (f"{held / 2**30:.2f} GiB" if held else "—") == host
