"""embedcalc/sources/parsing.py: the shipped presets' loader (libyaml's parser) reads every preset exactly as the strict
pure-Python loader that user files get."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from embedcalc.errors import ConfigError
from embedcalc.sources import parsing
from embedcalc.sources.presets import preset_names, presets_dir


def _typed(value: Any) -> Any:
    """``value`` with the type of every leaf beside it (``True == 1`` and ``1 == 1.0`` must not pass)."""
    if isinstance(value, dict):
        return {(type(k).__name__, k): _typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_typed(v) for v in value]
    return (type(value).__name__, repr(value))


@pytest.mark.parametrize("name", preset_names())
def test_a_preset_reads_the_same_with_both_loaders(name: str) -> None:
    path = presets_dir() / f"{name}.yaml"
    text = path.read_text(encoding="utf-8")
    strict = parsing.parse_mapping(text, path)
    shipped = parsing.parse_mapping(text, path, shipped=True)
    assert _typed(shipped) == _typed(strict)


def test_the_presets_loader_is_libyamls_where_pyyaml_has_it() -> None:
    if yaml.__with_libyaml__:
        assert issubclass(parsing.PRESET_LOADER, yaml.CSafeLoader)
    assert parsing.PRESET_LOADER.yaml_constructors is parsing._StrictLoader.yaml_constructors
    assert parsing.PRESET_LOADER.yaml_implicit_resolvers is parsing._StrictLoader.yaml_implicit_resolvers


@pytest.mark.parametrize(
    "text",
    [
        "embed_dim: 0512\nmax: 1:30\nhex: 0x10\n",  # YAML 1.1 octal, base 60, hex: not numbers here
        "a: 1e-1\nb: 1_000\nc: -0.5\nd: +3\n",
        "a: yes\nb: true\nc: null\nd: ~\ne: '12'\n",
        "layers:\n  - {attention: {num_heads: 8}, count: 2}\n  - [1, 2.0, x]\n",
    ],
)
def test_both_loaders_read_the_same_values(text: str) -> None:
    """The number rules (YAML 1.2 decimal only), the refused numbers and the nesting are the same."""
    strict = parsing.parse_mapping(text, Path("x.yaml"))
    assert _typed(parsing.parse_mapping(text, Path("x.yaml"), shipped=True)) == _typed(strict)


@pytest.mark.parametrize("shipped", [False, True])
def test_both_loaders_refuse_a_duplicate_key_and_numbers_out_of_bounds(shipped: bool) -> None:
    with pytest.raises(ConfigError, match="duplicate key 'a'"):
        parsing.parse_mapping("a: 1\na: 2\n", Path("x.yaml"), shipped=shipped)
    with pytest.raises(ConfigError, match="digits"):
        parsing.parse_mapping("a: " + "9" * 400 + "\n", Path("x.yaml"), shipped=shipped)
    with pytest.raises(ConfigError, match="infinite"):
        parsing.parse_mapping("a: .inf\n", Path("x.yaml"), shipped=shipped)


def test_a_users_file_still_refuses_anchors() -> None:
    with pytest.raises(ConfigError, match="anchors"):
        parsing.parse_mapping("a: &x 1\nb: *x\n", Path("x.yaml"))


@pytest.mark.parametrize("text", ["embed_dim: !!int\n", 'embed_dim: !!int ""\n', 'embed_dim: !!int "-"\n'])
def test_an_int_tag_with_no_digits_is_malformed_yaml_not_a_crash(text: str, tmp_path: Path) -> None:
    """PyYAML's int constructor indexes the text's first character: an `!!int` with nothing (or a sign) after it
    raised IndexError through `sweep` (the long fuzz profile found it); it is malformed YAML, exit 3."""
    with pytest.raises(ConfigError, match="an int with no digits"):
        parsing.parse_mapping(text, tmp_path / "model.txt")
