"""A Hugging Face config's layer counts are bounded (issue 33): families with layer patterns expand them layer by
layer, so 10^29 layers (inside the 30-digit bound) grew ``check`` to a MemoryError. Every shipped fixture, its
layer counts set to 10^29, is refused (exit 3) naming the key; at the bound (100,000) the readers still work."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from paths import HF_FIXTURES

import embedcalc
from embedcalc.errors import ConfigError
from embedcalc.sources.hf import MAX_HF_LAYERS

LAYER_KEYS = ("num_hidden_layers", "num_layers", "n_layer", "n_layers", "num_decoder_layers", "decoder_layers",
              "encoder_layers", "num_encoder_layers")  # fmt: skip
FIXTURES = sorted(HF_FIXTURES.glob("*.json"))


def _deepen(raw: dict[str, Any], layers: int) -> bool:
    """Every layer count of ``raw`` (and of its text_config) set to ``layers``; whether there was one."""
    found = False
    for config in (raw, raw.get("text_config")):
        if isinstance(config, dict):
            for key in LAYER_KEYS:
                if type(config.get(key)) is int:
                    config[key], found = layers, True
    return found


def test_every_fixture_at_10_to_the_29_layers_is_refused_naming_the_key(tmp_path: Path) -> None:
    refused = 0
    for fixture in FIXTURES:
        raw = json.loads(fixture.read_text())
        if not _deepen(raw, 10**29):
            continue
        path = tmp_path / fixture.name
        path.write_text(json.dumps(raw))
        with pytest.raises(ConfigError) as info:
            embedcalc.load(str(path))
        assert any(p.code == "hf_too_many_layers" for p in info.value.problems), (fixture.name, info.value)
        refused += 1
    assert refused >= 100


@pytest.mark.parametrize("name", ["gemma-2-9b.json", "deepseek-v3.json", "gemma-3-27b.json"])
def test_at_the_bound_the_layer_patterns_are_read(name: str, tmp_path: Path) -> None:
    raw = json.loads((HF_FIXTURES / name).read_text())
    raw.pop("layer_types", None)  # a listed pattern has the fixture's own length
    assert _deepen(raw, MAX_HF_LAYERS)
    path = tmp_path / name
    path.write_text(json.dumps(raw))
    assert embedcalc.load(str(path)).config.num_layers == MAX_HF_LAYERS
