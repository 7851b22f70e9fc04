"""The accept-list derived from transformers' configuration classes (``accept_list.json``, written by
``scripts/hf_accept_list.py`` from an installed transformers, whose version it records): what each supported
family's class declares and writes, so a key that class writes is never "unknown".

How :class:`~embedcalc.sources.hf.reader.KeyReader` uses it, for a key no family rule consumed and no common reason
covers (:func:`classify`):

- a key the class derives on load (``derived``): ``recomputed`` (the class overwrites the file's value) or
  ``unread`` (kept on the config object, but no modeling code of transformers reads it) is ignored; ``read`` needs
  a family rule, else it is a problem (``hf_unmapped_key``);
- a parameter of the class at the class's default is ignored: the family's counts were checked against
  transformers with that default (a key at its default builds the same model as the key left out);
- a parameter of the class at another value is a problem (``hf_unmapped_key``): it may change the shape;
- anything else is not the class's key: the caller reports it as unknown (``hf_unknown_key``).

The file is read once, on the first key that needs it; embedcalc never imports transformers.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PATH = Path(__file__).with_name("accept_list.json")


@dataclass(frozen=True)
class ClassKeys:
    """One transformers configuration class: its parameters (with their JSON defaults), the keys ``to_dict()``
    writes beyond ``PreTrainedConfig``'s, what happens to each derived key, and the classes it nests."""

    config_class: str
    params: frozenset[str]
    defaults: dict[str, Any]
    written: frozenset[str]
    derived: dict[str, str]
    sub_configs: dict[str, ClassKeys]


@dataclass(frozen=True)
class Verdict:
    """The fate of one key: ignored with ``reason``, or a problem with ``message``."""

    ignored: bool
    text: str


@functools.cache
def _data() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(PATH.read_text(encoding="utf-8"))
    return data


def transformers_version() -> str:
    """The transformers version the accept-list was generated from."""
    return str(_data()["transformers_version"])


def base_keys() -> frozenset[str]:
    """The keys every ``PreTrainedConfig`` declares or writes."""
    base = _data()["base"]
    return frozenset(base["params"]) | frozenset(base["written"])


def _entry(raw: dict[str, Any]) -> ClassKeys:
    subs = {name: _entry(sub) for name, sub in raw.get("sub_configs", {}).items()}
    return ClassKeys(raw["class"], frozenset(raw["params"]), dict(raw["defaults"]), frozenset(raw["written"]),
                     dict(raw["derived"]), subs)  # fmt: skip


@functools.cache
def class_keys(model_type: str) -> ClassKeys | None:
    """The accept-list entry of ``model_type``; None for a family the file does not list (regenerate it)."""
    raw = _data()["families"].get(model_type)
    return None if raw is None else _entry(raw)


def same_value(value: Any, default: Any) -> bool:
    """JSON equality that keeps booleans apart from numbers (``1`` is not ``true``) and lets ``0`` equal ``0.0``."""
    if isinstance(value, bool) or isinstance(default, bool):
        return isinstance(value, bool) and isinstance(default, bool) and value == default
    if isinstance(value, int | float) and isinstance(default, int | float):
        return value == default
    return type(value) is type(default) and bool(value == default)


def classify(keys: ClassKeys, key: str, value: Any, version: str) -> Verdict | None:
    """The fate of ``key`` = ``value`` by the class ``keys`` describes (module docstring); None when it is not a
    key of that class."""
    cls = keys.config_class
    fate = keys.derived.get(key)
    if fate == "recomputed":
        return Verdict(True, f"{cls} computes it from other keys on load and overwrites the file's value "
                             f"(transformers {version}): no effect on the model")  # fmt: skip
    if fate == "unread":
        return Verdict(True, f"{cls} writes it on save, and no modeling code of transformers {version} reads it "
                             "off the config: no effect on the model")  # fmt: skip
    if fate == "read":
        return Verdict(False, f"{key} = {value!r} is a key {cls} derives and transformers' modeling code reads, "
                              "and embedcalc does not check it for this family")  # fmt: skip
    if key not in keys.params:
        return None
    if key in keys.defaults and same_value(value, keys.defaults[key]):
        return Verdict(True, f"{key} = {value!r}: {cls}'s default, with which this family's counts are checked "
                             "against transformers")  # fmt: skip
    default = f" (default {keys.defaults[key]!r})" if key in keys.defaults else ""
    return Verdict(False, f"{key} = {value!r} is a parameter of transformers' {cls}{default} that embedcalc does "
                          "not map for this family: it may change the model's size or cost, so the file is "
                          "refused rather than miscounted")  # fmt: skip


def sub_config_reason(model_type: str, parent: str, key: str, value: Any) -> str | None:
    """Why ``key`` of the nested config ``parent`` (DBRX's ``attn_config``) is harmless, or None: the attributes
    every ``PreTrainedConfig`` writes (a nested config writes them too), or the nested class's own verdict."""
    outer = class_keys(model_type)
    keys = None if outer is None else outer.sub_configs.get(parent)
    if keys is None:
        return None
    if key in base_keys():
        return (
            f"an attribute every PreTrainedConfig writes, here of the nested {keys.config_class}; no effect"
        )
    verdict = classify(keys, key, value, transformers_version())
    return verdict.text if verdict is not None and verdict.ignored else None
