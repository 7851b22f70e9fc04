"""Resolve a TARGET (preset name, config file or Hugging Face ``config.json``) plus ``--set`` overrides into a
validated :class:`ModelConfig`.

A file with a ``model_type`` key is a Hugging Face config and goes through :mod:`embedcalc.sources.hf`, which maps
it family by family and reports what it did with every key; anything else is embedcalc's own schema.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

import yaml

from embedcalc.config.problems import did_you_mean
from embedcalc.config.records import FIELD_NAMES, TEXT_FIELDS, AttentionRecord, ConfigRecord, FFNRecord
from embedcalc.config.resolved import ResolvedShape
from embedcalc.errors import ConfigError, EmbedcalcError, ExitCode, Problem
from embedcalc.sources.aliases import ALIAS_TO_FIELD, canonical_key
from embedcalc.sources.hub import resolve_hub_id
from embedcalc.sources.parsing import (
    RefusedNumber,
    load_mapping,
    oversized_ints,
    parse_scalar,
    too_many_digits,
)
from embedcalc.sources.presets import preset_names, preset_path

if TYPE_CHECKING:  # the Hugging Face families load only for a Hugging Face config (start-up)
    from embedcalc.config.schema import ModelConfig
    from embedcalc.sources.hf import HFReport


@dataclass(frozen=True)
class LoadedConfig:
    """A validated config and where it came from."""

    target: str
    config: (
        ResolvedShape  # the schema's ModelConfig; a shipped preset's record on analyze's path (records.py)
    )
    source: str  # "preset", "file" or "hf"
    user_keys: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    hf: HFReport | None = None  # how a Hugging Face config.json was mapped (source "hf")

    @property
    def source_warnings(self) -> list[Problem]:
        """Warnings about the file itself: the keys of a Hugging Face config ignored as transformers ignores them
        (:attr:`embedcalc.sources.hf.HFReport.ignored_keys`)."""
        return self.hf.warnings() if self.hf is not None else []


def _looks_like_path(target: str) -> bool:
    if "/" in target or "\\" in target or target.endswith((".yaml", ".yml", ".json")):
        return True
    try:
        return Path(target).exists()
    except (OSError, ValueError):  # a name too long for the file system, a NUL byte: a path, reported as such
        return True


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except (OSError, ValueError):
        return False


def resolve_target(target: str) -> tuple[dict[str, Any], str, Path]:
    """The raw mapping for a preset name or a file path, with its kind and path.

    A bare name that is a preset is the preset, even if a file or folder of that name is in the working
    directory (a downloaded ``gpt2/`` checkpoint must not hide the preset); write ``./gpt2`` for the file.
    """
    try:
        path_or_none = preset_path(target) if "/" not in target and "\\" not in target else None
    except (OSError, ValueError):  # a name too long to be a file name cannot be a preset either
        path_or_none = None
    if path_or_none is None and _looks_like_path(target):
        path = Path(target)
        if not _exists(path) and (hub_path := resolve_hub_id(target)) is not None:  # ORG/NAME: the hub cache
            return load_mapping(hub_path), "file", hub_path
        return load_mapping(path), "file", path
    if path_or_none is None:
        names = preset_names()
        message = (
            f"unknown preset {target!r}{did_you_mean(target, names)}; presets: {', '.join(names)}. "
            "A config file path works too (YAML or JSON)."
        )
        raise ConfigError(message, [Problem(target, message, "unknown_preset")], "unknown_preset")
    return load_mapping(path_or_none, shipped=True), "preset", path_or_none


def normalise_keys(
    raw: dict[Any, Any], where: str = ""
) -> tuple[dict[str, Any], dict[str, str], list[Problem]]:
    """Map aliases onto canonical field names; report unknown and doubly given keys.

    Returns the canonical mapping, canonical -> key-as-written, and the problems found.
    """
    data: dict[str, Any] = {}
    user_keys: dict[str, str] = {}
    problems: list[Problem] = []
    known = list(FIELD_NAMES) + list(ALIAS_TO_FIELD)
    unknown = 0
    for key, value in raw.items():
        if not isinstance(key, str) or canonical_key(key) not in FIELD_NAMES:
            unknown += 1
            if unknown <= MAX_UNKNOWN_KEYS_LISTED:
                problems.append(_unknown_key(key, where, known))
            continue
        name = canonical_key(key)
        if name in data:
            problems.append(
                Problem(
                    f"{where}{key}",
                    f"{key!r} and {user_keys[name]!r} both set {name}; keep one",
                    "duplicate_key",
                )
            )
            continue
        data[name] = value
        user_keys[name] = key
    if unknown > MAX_UNKNOWN_KEYS_LISTED:
        more = unknown - MAX_UNKNOWN_KEYS_LISTED
        message = f"... and {more:,} more unknown keys (the first {MAX_UNKNOWN_KEYS_LISTED} are listed)"
        problems.append(Problem(f"{where}(more keys)", message, "unknown_key"))
    return data, user_keys, problems


# Unknown keys reported one by one (each with a did-you-mean); the rest are counted in one line, so a file with
# very many keys costs one dictionary lookup per key, not a fuzzy match per key.
MAX_UNKNOWN_KEYS_LISTED = 20


def _unknown_key(key: object, where: str, known: list[str]) -> Problem:
    if not isinstance(key, str):
        shown = f"{key!r:.60}"
        return Problem(f"{where}{shown}", f"key {shown} is not a string", "key_not_string")
    shown = key if len(key) <= 60 else key[:60] + "..."
    hint = did_you_mean(key, known)
    if not hint and where == "--set ":  # a field of the layer model's specs: --set top_k=2 means ffn.top_k
        nested = [f"{spec}.{name}" for spec, fields in _SPEC_FIELDS.items() for name in fields if name == key]
        hint = f" (did you mean {' or '.join(repr(n) for n in nested)}?)" if nested else ""
    return Problem(f"{where}{shown}", f"unknown key {shown!r}{hint}", "unknown_key")


# the fields ``--set attention.X`` / ``--set ffn.X`` reach (config/block_spec.py)
_SPEC_FIELDS = {"attention": tuple(AttentionRecord.model_fields), "ffn": tuple(FFNRecord.model_fields)}


def canonical_mapping(
    raw: dict[Any, Any], origin: str, path: Path | None = None
) -> tuple[dict[str, Any], dict[str, str], list[Problem], HFReport | None]:
    """The canonical mapping of a parsed target: a Hugging Face config mapped by its family (raising ConfigError
    for an unsupported family or key), anything else normalised as embedcalc's schema (problems returned)."""
    # every Hugging Face config has a model_type or lacks architecture (is_hf_config); embedcalc's own files and
    # the presets have architecture and no model_type, so they skip importing the families
    if "model_type" in raw or "architecture" not in raw:
        from embedcalc.sources.hf import is_hf_config, map_hf_config

        if is_hf_config(raw):
            mapping = map_hf_config(raw, origin, path)
            return dict(mapping.data), dict(mapping.user_keys), [], mapping.report
    data, user_keys, problems = normalise_keys(raw)
    return data, user_keys, problems, None


def parse_override(text: str) -> tuple[str, Any]:
    """``key=value`` -> (key, value), the value read as a YAML scalar (``16`` is an int, ``true`` a bool)."""
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise EmbedcalcError(
            f"--set {text!r}: expected key=value, e.g. --set num_heads=16",
            ExitCode.USAGE,
            [Problem(f"--set {text}", "expected key=value", "bad_override")],
            "bad_override",
        )
    try:
        parsed = parse_scalar(value) if value.strip() else None
    except (yaml.YAMLError, ValueError, RecursionError):
        parsed = value
    if isinstance(parsed, dict | list):
        parsed = value  # a scalar was meant; let validation report the type
    return key, parsed


def apply_overrides(data: dict[str, Any], user_keys: dict[str, str], overrides: list[str]) -> list[Problem]:
    """Apply ``--set`` overrides in order (in place); an override's key is reported as ``--set key``."""
    problems: list[Problem] = []
    known = list(FIELD_NAMES) + list(ALIAS_TO_FIELD)
    for text in overrides:
        key, value = parse_override(text)
        raw_value = text.partition("=")[2].strip()
        head, dot, rest = key.partition(".")
        # --set ffn.top_k=4, --set blocks.local.attention.chunk_size=8
        if dot and canonical_key(head) in NESTED_FIELDS:
            problem = _set_nested(data, canonical_key(head), rest.split("."), value, key)
            if problem is not None:
                problems.append(problem)
            else:
                user_keys[canonical_key(head)] = f"--set {head}"  # error paths add the rest: --set ffn.top_k
            continue
        name = canonical_key(key)
        if name not in FIELD_NAMES:
            problems.append(_unknown_key(key, "--set ", known))
            continue
        if isinstance(value, RefusedNumber) and name not in TEXT_FIELDS:
            problems.append(Problem(f"--set {key}", value.reason, value.code))
            continue
        if value is not None and name in TEXT_FIELDS:
            value = raw_value  # a text field stays text even when it looks like a number or a boolean
        data[name] = value
        user_keys[name] = f"--set {key}"
    return problems


# fields that hold mappings (layers as data): ``--set`` reaches inside them with a dotted key
NESTED_FIELDS = frozenset({"attention", "ffn", "mixer", "blocks"})


def _set_nested(data: dict[str, Any], field: str, path: list[str], value: Any, key: str) -> Problem | None:
    """Set ``data[field][path...]`` to ``value``, making the mappings on the way; a Problem if one is not a mapping."""
    if any(not part for part in path):
        return Problem(f"--set {key}", "an empty segment in the dotted key", "bad_override")
    node = data.get(field)
    if node is None:
        node = data[field] = {}
    for part in path[:-1]:
        if not isinstance(node, dict):
            break
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        node = child
    if not isinstance(node, dict):
        return Problem(f"--set {key}", f"{field} has no mapping at {key!r} to set a field in", "bad_override")
    node[path[-1]] = value
    return None


def validate_config(
    data: dict[str, Any], user_keys: dict[str, str], problems: list[Problem], origin: str
) -> ModelConfig:
    """Validate the canonical mapping; raise one ConfigError carrying every problem found.

    Integers of more than ``MAX_INT_DIGITS`` digits are refused here too (they can come from a Python mapping or be
    derived by a Hugging Face family), before the schema's arithmetic sees them.
    """
    from pydantic import ValidationError

    from embedcalc.config.problems import problems_from_validation
    from embedcalc.config.schema import ModelConfig  # pydantic's model machinery, on the first validation

    huge = oversized_ints(data)
    config = None
    if huge:
        problems = problems + [_oversized(where, value, user_keys) for where, value in huge]
    else:
        try:
            config = ModelConfig.model_validate(data, context={"keys": user_keys})
        except ValidationError as exc:
            problems = problems + problems_from_validation(exc, user_keys)
    if problems or config is None:
        lines = "\n".join(
            f"  {p.path}: {p.message}" if not p.message.startswith(p.path) else f"  {p.message}"
            for p in problems
        )
        noun = "problem" if len(problems) == 1 else "problems"
        raise ConfigError(f"{origin}: {len(problems)} {noun}\n{lines}", problems)
    return config


def _oversized(where: str, value: int, user_keys: dict[str, str]) -> Problem:
    head, sep, rest = where.partition(".")
    key = user_keys.get(head, head) + sep + rest
    digits = len(str(abs(value))) if value.bit_length() < 14_000 else value.bit_length() * 3 // 10
    return Problem(key, too_many_digits(digits), "number_too_long")


# overrides as the Python API takes them: a mapping of fields, or ``key=value`` strings read as ``--set`` reads them
Overrides: TypeAlias = Mapping[str, Any] | Sequence[str] | None


def target_origin(target: str, source: str, path: Path) -> str:
    """How error messages name a resolved target: a preset by its name, a file by its path."""
    return target if source == "preset" else str(path)


def load_parsed(
    raw: dict[Any, Any],
    source: str,
    origin: str,
    path: Path | None = None,
    *,
    target: str,
    overrides: Overrides = None,
    rename: bool = False,
    records: bool = False,
) -> LoadedConfig:
    """The loading pipeline after a target is read: canonical mapping -> overrides -> validation.

    ``raw`` is the parsed mapping, ``source`` its kind (``preset``, ``file``, ``python``; a Hugging Face config
    becomes ``hf``), ``origin`` the name error messages give it, ``target`` the name results carry. With
    ``rename`` an override that sets ``name`` renames ``target`` too (the Python API); the CLI keeps its TARGET.
    With ``records`` a shipped preset without overrides is built as its record (:mod:`embedcalc.config.record_base`),
    not validated by the schema: ``analyze``'s path, which then never loads pydantic's model machinery.
    Raises ConfigError carrying every problem found.
    """
    data, user_keys, problems, report = canonical_mapping(raw, origin, path)
    if report is not None and isinstance(data, dict):
        data.setdefault("family", report.family)  # names the modules adapters attach to (analysis/finetune)
    before = data.get("name")
    problems += _apply_any(data, user_keys, overrides)
    if rename and data.get("name") != before and isinstance(data.get("name"), str):
        target = data["name"]
    if source == "preset" and "name" not in data:
        data["name"] = target
    config: ResolvedShape
    if records and source == "preset" and not overrides and not problems:
        config = ConfigRecord.model_validate(
            data
        )  # trusted data (config/record_base.py): no pydantic model built
    else:
        config = validate_config(data, user_keys, problems, origin)
    return LoadedConfig(
        target=target,
        config=config,
        source="hf" if report is not None else source,
        user_keys=user_keys,
        hf=report,
    )


def _apply_any(data: dict[str, Any], user_keys: dict[str, str], overrides: Overrides) -> list[Problem]:
    """Apply overrides in either form (in place); a mapping's keys are reported as ``overrides: key``."""
    if overrides is None:
        return []
    if isinstance(overrides, Mapping):
        extra, extra_keys, problems = normalise_keys(dict(overrides), "overrides: ")
        data.update(extra)
        user_keys.update(extra_keys)
        return problems
    if isinstance(overrides, str):
        overrides = [overrides]
    if not isinstance(overrides, Sequence) or isinstance(overrides, bytes):
        raise _overrides_error(f"overrides must be a mapping {{'num_heads': 16}} or a list of 'key=value' strings, "
                               f"got {type(overrides).__name__}")  # fmt: skip
    if len(overrides) > MAX_OVERRIDES:
        raise _overrides_error(f"{len(overrides):,} overrides; at most {MAX_OVERRIDES:,}")
    bad = next((item for item in overrides if not isinstance(item, str)), None)
    if bad is not None:
        raise _overrides_error(
            f"every override is a 'key=value' string, got {type(bad).__name__} {bad!r:.60}"
        )
    return apply_overrides(data, user_keys, list(overrides))


MAX_OVERRIDES = 10_000  # one per field, many times over


def _overrides_error(message: str) -> EmbedcalcError:
    """A Python caller's ``overrides`` argument of the wrong type (exit 2, like a malformed --set)."""
    return EmbedcalcError(
        message, ExitCode.USAGE, [Problem("overrides", message, "bad_override")], "bad_override"
    )


def load_target(target: str, overrides: list[str] | None = None) -> LoadedConfig:
    """Load, override and validate TARGET (a preset name, a YAML/JSON config file or a Hugging Face config.json)."""
    raw, source, path = resolve_target(target)
    origin = target_origin(target, source, path)
    return load_parsed(raw, source, origin, path, target=target, overrides=overrides)


def raw_config(target: str, overrides: list[str] | None = None) -> dict[str, Any]:
    """TARGET's mapping with canonical keys and ``--set`` overrides applied, not validated (for suggestions).

    Raises ConfigError only when the target itself cannot be read.
    """
    raw, source, path = resolve_target(target)
    data, user_keys, _, _ = canonical_mapping(raw, target_origin(target, source, path), path)
    apply_overrides(data, user_keys, overrides or [])
    return data
