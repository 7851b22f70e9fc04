"""``verify --checkpoint`` on a model transformers saves: the check the family parity tests share."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

BUFFER = "a buffer, not a parameter"


def verify_saved(cli: Any, model: Any, directory: Path, buffers: bool = True) -> dict[str, int]:
    """``model.save_pretrained(directory)``, then ``verify --checkpoint`` of it: every tensor placed, none missing or
    misshapen, anything left over a buffer (nothing at all without ``buffers``), stored = analytic = transformers'
    numel. Returns the stored count per component, checked equal to ``analyze``'s breakdown of the saved file."""
    model.save_pretrained(directory)
    result = cli("verify", str(directory), "--checkpoint", "--format", "json")
    assert result.exit_code == 0, result.stderr
    check = json.loads(result.stdout)["results"][0]
    assert check["agree"] and check["missing"] == [] and check["shape_errors"] == []
    assert {e["reason"] for e in check["extra"]} <= ({BUFFER} if buffers else set())
    assert check["stored_params"] == check["analytic_params"] == sum(p.numel() for p in model.parameters())
    components = {c["key"]: c["stored_params"] for c in check["components"]}
    analyze = json.loads(cli("analyze", str(directory / "config.json"), "--format", "json").stdout)[
        "results"
    ][0]
    assert analyze["reader"] == "native"
    assert components == analyze["params"]["breakdown"]
    return components
