"""Regenerate (or with --check, verify) ``embedcalc/sources/hf/accept_list.json``: the keys transformers' own
configuration classes declare and write, for every ``model_type`` embedcalc reads.

For each supported family (``embedcalc.sources.hf.registry.FAMILIES``) and each configuration class it nests
(``sub_configs``, such as DBRX's ``attn_config``), read from the installed transformers:

- ``params``: the class's ``__init__`` parameters (its dataclass fields in transformers 5), with their defaults
  where a default is a JSON value (``defaults``);
- ``written``: every key ``to_dict()`` writes for a config built with the defaults, minus the keys every
  ``PreTrainedConfig`` writes (``base``);
- ``derived``: the written keys that are no parameter (``qk_head_dim`` of DeepSeek, ``_sliding_window_pattern`` of
  Gemma 3, ``num_key_value_heads`` of GPT-BigCode), each ``recomputed`` when loading a file with two other values
  of it gives the value the class computes (the file's value is overwritten, so it cannot change the model);
  else ``unread`` when the config object keeps the file's value but neither the family's ``modeling_*.py`` nor
  transformers' shared modules read it off a config (``config.KEY``, ``getattr(config, "KEY"``), or ``read``
  (then only a family rule may accept it);
- ``attribute_map``: the class's aliases.

``base`` holds ``PreTrainedConfig``'s own parameters and written keys. The file records the transformers version it
was generated from; CI installs that version for ``--check``. :mod:`embedcalc.sources.hf.accept` reads the file, so
embedcalc itself never imports transformers.

    python scripts/hf_accept_list.py            # rewrite the file from the installed transformers
    python scripts/hf_accept_list.py --check    # exit 1 (with a diff) when the file is not what it would write
    python scripts/hf_accept_list.py --version  # the transformers version the file was generated from
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import inspect
import json
import logging
import re
import sys
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "embedcalc" / "sources" / "hf" / "accept_list.json"
_SKIP_PARAMS = {"self", "kwargs", "args"}


def _json_value(value: Any) -> tuple[bool, Any]:
    """(whether ``value`` is a plain JSON value, the value)."""
    try:
        return json.loads(json.dumps(value)) == value, value
    except (TypeError, ValueError):
        return False, None


def _params(cls: type) -> dict[str, Any]:
    """The ``__init__`` parameters of ``cls`` -> their default (``inspect.Parameter.empty`` when none)."""
    out: dict[str, Any] = {}
    if dataclasses.is_dataclass(cls):
        for f in dataclasses.fields(cls):
            if not f.init:
                continue
            if f.default is not dataclasses.MISSING:
                out[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                out[f.name] = f.default_factory()
            else:
                out[f.name] = inspect.Parameter.empty
        return out
    for name, p in inspect.signature(cls.__init__).parameters.items():
        if name not in _SKIP_PARAMS and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
            out[name] = p.default
    return out


def _others(value: Any) -> tuple[Any, Any]:
    """Two values of the type of ``value`` that differ from it (to see whether the class overwrites a key)."""
    if isinstance(value, bool):
        return (not value, not value)
    if isinstance(value, int):
        return (value + 7, value + 13)
    if isinstance(value, float):
        return (value + 0.5, value + 1.5)
    if isinstance(value, str):
        return (value + "_x", value + "_y")
    if isinstance(value, list):
        return (list(value) + list(value[:1]), list(value[1:]))
    return (None, 12345)


@functools.cache
def _shared_sources() -> str:
    """transformers' modules outside ``models/`` that read a config (masks, caches, RoPE, the base model class,
    generation, integrations)."""
    import transformers

    package = Path(transformers.__file__).parent
    paths = sorted(package.glob("*.py")) + sorted(package.glob("integrations/*.py"))
    paths += sorted(package.glob("generation/*.py"))
    return "\n".join(p.read_text(encoding="utf-8") for p in paths)


def _modeling_sources(cls: type) -> str:
    """The family's ``modeling_*.py`` (beside its ``configuration_*.py``) and the shared modules."""
    own = Path(sys.modules[cls.__module__].__file__ or "")
    modeling = own.with_name(own.name.replace("configuration_", "modeling_", 1))
    return (modeling.read_text(encoding="utf-8") if modeling.is_file() else "") + "\n" + _shared_sources()


def _read_by(source: str, key: str) -> bool:
    """Whether ``source`` reads ``key`` off a config object (``config.key``, ``getattr(config, "key"``)."""
    name = re.escape(key)
    return (
        re.search(rf"config\.{name}\b|getattr\(\s*[\w.]*config\w*\s*,\s*[\"']{name}[\"']", source) is not None
    )


def _derived_fate(cls: type, defaults: dict[str, Any], key: str, source: str) -> str:
    """What happens to a derived ``key`` a file sets: ``recomputed`` when the class overwrites it on load (two
    other values tried); else ``unread`` when the config keeps it but no modeling code reads it off a config, or
    ``read``."""
    base = defaults[key]
    for other in _others(base):
        try:
            value = cls.from_dict({**defaults, key: other}).to_dict().get(key)
        except Exception:  # a value the class rejects outright is not silently kept either
            continue
        if value != base:
            return "read" if _read_by(source, key) else "unread"
    return "recomputed"


def _class_entry(cls: type, base_written: set[str]) -> dict[str, Any]:
    params = _params(cls)
    written = cls().to_dict()
    defaults = {}
    for name, default in params.items():
        plain, value = _json_value(default)
        if plain and default is not inspect.Parameter.empty:
            defaults[name] = value
    derived = sorted(set(written) - set(params) - base_written)
    source = _modeling_sources(cls) if derived else ""
    entry: dict[str, Any] = {
        "class": cls.__name__,
        "params": sorted(params),
        "defaults": defaults,
        "written": sorted(set(written) - base_written),
        "derived": {key: _derived_fate(cls, written, key, source) for key in derived},
        "attribute_map": dict(sorted(getattr(cls, "attribute_map", {}).items())),
    }
    subs = getattr(cls, "sub_configs", {}) or {}
    if subs:
        entry["sub_configs"] = {name: _class_entry(sub, base_written) for name, sub in sorted(subs.items())
                                if isinstance(sub, type)}  # fmt: skip
    return entry


def generate() -> dict[str, Any]:
    """The accept-list as the installed transformers' configuration classes define it."""
    sys.path.insert(0, str(ROOT))
    import transformers
    from transformers import CONFIG_MAPPING, PretrainedConfig

    from embedcalc.sources.hf.registry import CONFIG_TYPE, FAMILIES, REMOTE_CODE

    logging.getLogger("transformers").setLevel(logging.ERROR)
    transformers.logging.set_verbosity_error()
    base_params = _params(PretrainedConfig)
    base_written = set(PretrainedConfig().to_dict())
    families: dict[str, Any] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for model_type in sorted(set(FAMILIES) - REMOTE_CODE):  # no transformers class to read
            families[model_type] = _class_entry(
                CONFIG_MAPPING[CONFIG_TYPE.get(model_type, model_type)], base_written
            )
    return {
        "transformers_version": transformers.__version__,
        "generated_by": "scripts/hf_accept_list.py",
        "base": {"class": PretrainedConfig.__name__, "params": sorted(base_params),
                 "written": sorted(base_written)},
        "families": families,
    }  # fmt: skip


def render(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


def main(argv: list[str]) -> int:
    if argv == ["--version"]:
        print(json.loads(OUTPUT.read_text(encoding="utf-8"))["transformers_version"])
        return 0
    text = render(generate())
    if argv == ["--check"]:
        current = OUTPUT.read_text(encoding="utf-8") if OUTPUT.is_file() else ""
        if current == text:
            return 0
        diff = difflib.unified_diff(
            current.splitlines(), text.splitlines(), str(OUTPUT), "regenerated", lineterm=""
        )
        print("\n".join(list(diff)[:200]))
        print(f"{OUTPUT.relative_to(ROOT)} is stale: run `python scripts/hf_accept_list.py`", file=sys.stderr)
        return 1
    if argv:
        print("usage: python scripts/hf_accept_list.py [--check | --version]", file=sys.stderr)
        return 2
    OUTPUT.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
