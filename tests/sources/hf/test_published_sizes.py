"""Published sizes (``tests/fixtures/published_sizes.yaml``), every row checked the same way: the hub file is of its
``model_type``; embedcalc counts the file's total (and active parameters, where pinned); transformers builds exactly
that total from the file on the meta device; a preset that transcribes the file gives the same numbers through
``analyze`` and names the count in its header.

The family-specific checks (KV cache, FLOPs on small eager variants, every key reported) stay in the module each
group of the data file names, parametrised over that group's rows.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hf_reference import hf_model, published_sizes, quiet_transformers, raw_fixture, trainable
from paths import HF_FIXTURES

from embedcalc.analysis.params import active_params, count_params
from embedcalc.sources.loading import load_target

ROWS = published_sizes()
PRESETS = sorted(name for name, row in ROWS.items() if row.preset is not None)


def test_every_file_is_of_its_model_type() -> None:
    assert {name: raw_fixture(name)["model_type"] for name in ROWS} == {
        name: row.model_type for name, row in ROWS.items()
    }


@pytest.mark.parametrize("name", sorted(ROWS))
def test_embedcalc_counts_the_published_size(name: str) -> None:
    row = ROWS[name]
    loaded = load_target(str(HF_FIXTURES / f"{name}.json"))
    assert loaded.source == "hf"
    assert count_params(loaded.config).total == row.total
    if row.active is not None:
        assert active_params(loaded.config) == row.active


@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(ROWS))
def test_transformers_builds_the_published_size(name: str) -> None:
    pytest.importorskip("torch")
    row = ROWS[name]
    assert trainable(hf_model(quiet_transformers(), raw_fixture(name), row.auto_class)) == row.total


@pytest.mark.parametrize("name", PRESETS)
def test_analyze_of_the_preset_gives_the_published_size(cli: Any, name: str) -> None:
    row = ROWS[name]
    result = cli("analyze", str(row.preset), "--format", "json")
    assert result.exit_code == 0, result.stderr
    params = json.loads(result.stdout)["results"][0]["params"]
    assert params["total"] == row.total
    if row.active is not None:
        assert params["active"] == row.active


@pytest.mark.parametrize("name", PRESETS)
def test_the_preset_names_its_source(name: str) -> None:
    from embedcalc.sources.presets import preset_path

    path = preset_path(str(ROWS[name].preset))
    assert path is not None
    header = "".join(line for line in path.read_text(encoding="utf-8").splitlines(keepends=True)
                     if line.startswith("#"))  # fmt: skip
    assert "config.json" in header and "transformers" in header and f"{ROWS[name].total:,}" in header


def test_presets_lists_them(cli: Any) -> None:
    result = cli("presets", "--format", "json")
    assert result.exit_code == 0, result.stderr
    rows = json.loads(result.stdout)["results"]
    assert {ROWS[name].preset for name in PRESETS} <= {row["name"] for row in rows}
