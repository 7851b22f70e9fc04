"""The shipped presets' records (embedcalc/config/record_base.py, issue 22 start-up): `analyze PRESET` builds a plain
record instead of validating the preset with the schema, so each record must be the validated config, exactly.

For every shipped preset: the record's dumps (JSON and Python, all fields and the fields set) equal the schema's
``model_dump``, and the resolved layer model (blocks, both stacks' plans, ``derived``) is equal. The two generated
modules are what scripts/config_records.py writes from the schema (one source of truth for fields and defaults).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from paths import SCRIPTS, load_script

from embedcalc.config.records import FIELD_NAMES, TEXT_FIELDS, ConfigRecord
from embedcalc.config.schema import ModelConfig
from embedcalc.sources.loading import canonical_mapping, load_parsed, load_target, resolve_target
from embedcalc.sources.presets import preset_names

SCRIPT = SCRIPTS / "config_records.py"


def _record(name: str) -> ConfigRecord:
    raw, source, path = resolve_target(name)
    loaded = load_parsed(raw, source, name, path, target=name, records=True)
    assert isinstance(loaded.config, ConfigRecord), name
    return loaded.config


@pytest.mark.parametrize("name", preset_names())
def test_the_record_of_a_preset_is_the_validated_preset(name: str) -> None:
    record, model = _record(name), load_target(name).config
    assert isinstance(model, ModelConfig)
    for mode in ("json", "python"):
        for exclude_unset in (False, True):
            assert record.model_dump(mode=mode, exclude_unset=exclude_unset) == model.model_dump(
                mode=mode, exclude_unset=exclude_unset
            ), (name, mode, exclude_unset)
    assert record.model_fields_set == model.model_fields_set
    assert record.named_blocks == model.named_blocks
    for stack in ("encoder", "decoder"):
        assert record.stack_plan(stack) == model.stack_plan(stack)
    assert record.derived() == model.derived()
    # explain finds a preset among the presets by equality, both ways
    assert record == model and model == record
    assert not (record != model)  # noqa: SIM202 - the != operator itself
    # validated by the schema, the fields the record set make the model again
    assert ModelConfig.model_validate(record.model_dump(exclude_unset=True)) == model


def test_the_generated_modules_are_current() -> None:
    """scripts/config_records.py writes embedcalc/config/fields.py and records.py from the schema; a field added to
    ModelConfig or a spec needs them rewritten (`python scripts/config_records.py`)."""
    stale = [
        str(path)
        for path, text in load_script("config_records").expected().items()
        if path.read_text(encoding="utf-8") != text
    ]
    assert not stale, f"stale: {stale}; run `python scripts/config_records.py`"


def test_the_check_flag_passes_on_the_current_files() -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]


def test_the_field_lists_are_the_schemas() -> None:
    assert tuple(ModelConfig.model_fields) == FIELD_NAMES
    assert tuple(ConfigRecord.model_fields) == FIELD_NAMES
    assert {"name"} <= TEXT_FIELDS
    for name, info in ModelConfig.model_fields.items():
        default = ConfigRecord.model_fields[name].make_default()
        if info.default_factory is not None:
            assert default == info.default_factory()  # type: ignore[call-arg]
        elif not info.is_required():
            assert default == info.default, name


def test_a_record_is_frozen_and_copies_like_a_model() -> None:
    record, model = _record("bert-base"), load_target("bert-base").config
    with pytest.raises(AttributeError, match="frozen"):
        record.num_heads = 16  # type: ignore[misc]
    copy, model_copy = record.model_copy(update={"dropout": 0.0}), model.model_copy(update={"dropout": 0.0})
    assert copy.dropout == 0.0 and record.dropout == 0.1
    assert copy.model_dump(exclude_unset=True) == model_copy.model_dump(exclude_unset=True)
    assert copy.model_fields_set == model_copy.model_fields_set
    assert copy != record and record == _record("bert-base")


def test_only_a_preset_without_overrides_is_a_record(tmp_path: Path) -> None:
    raw, source, path = resolve_target("bert-base")
    overridden = load_parsed(raw, source, "bert-base", path, target="bert-base", overrides=["num_heads=16"],
                             records=True)  # fmt: skip
    assert isinstance(overridden.config, ModelConfig) and overridden.config.num_heads == 16
    data, _, _, _ = canonical_mapping(raw, "bert-base", path)
    as_file = load_parsed(dict(data), "file", "x.yaml", path, target="x.yaml", records=True)
    assert isinstance(as_file.config, ModelConfig)
    assert isinstance(load_target("bert-base").config, ModelConfig)  # records only when asked for
