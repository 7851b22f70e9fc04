"""What an importable transformers says about a family's keys: the one derivation behind both the shipped data
(``scripts/hf_accept_list.py`` writes ``accept_list.json`` and ``modeling_reads.json`` from the newest release) and
the run-time consult of the *installed* transformers (:mod:`embedcalc.sources.hf.accept`, only when its version is
not the shipped data's and the shipped data cannot clear a key).

Two derivations:

- :func:`class_entry`: a configuration class's ``__init__`` parameters (its dataclass fields in transformers 5) with
  their JSON defaults, the keys ``to_dict()`` writes, the fate of each key it derives (``recomputed``: the class
  overwrites the file's value on load; ``unread`` / ``read``: kept, and read or not by modeling code) and its
  ``attribute_map``;
- :func:`modeling_reads`: the attributes transformers' modeling code reads off a config object, found in the source
  (Python's ``ast``, never a regular expression): ``config.KEY`` / ``self.config.KEY`` / ``text_config.KEY`` (a
  plain read), ``getattr(config, "KEY")`` and ``hasattr(config, "KEY")`` (plain), ``getattr(config, "KEY",
  literal)`` (a read with that fallback: a file giving the fallback's value builds the model the key's absence
  builds). Per family: its ``modeling_<family>.py`` and the modeling modules of other families it imports
  (``from ..llama.modeling_llama import ...``), transitively, and its ``configuration_<family>.py``, where
  ``self.KEY`` reads count too (a parameter the class turns into another attribute, as Qwen2's
  ``max_window_layers`` becomes ``layer_types``, is read there), and so do ``kwargs.get("KEY")`` /
  ``kwargs.pop`` / ``kwargs["KEY"]`` (a leftover key the class turns into an attribute: GlmMoeDsaConfig's
  ``num_experts``); shared: transformers' modules outside ``models/`` (masks, caches, RoPE, the base model class,
  generation, integrations).

Importing transformers (and with it torch) happens inside these functions only.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import json
import logging
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_SKIP_PARAMS = {"self", "kwargs", "args"}


def quiet_import() -> Any:
    """transformers, imported with its warnings and logging off (what the derivations print is no user's concern)."""
    import transformers

    logging.getLogger("transformers").setLevel(logging.ERROR)
    transformers.logging.set_verbosity_error()  # type: ignore[no-untyped-call]
    return transformers


def weight_conversions() -> list[str]:
    """The model types and class names the installed transformers has a checkpoint conversion mapping for
    (``conversion_mapping.py``'s table, each alias included; not the ``legacy`` renamings every model gets)."""
    quiet_import()
    from transformers import conversion_mapping

    table = conversion_mapping._build_checkpoint_conversion_mapping()  # type: ignore[no-untyped-call]
    return sorted(name for name, transforms in table.items() if transforms and name != "legacy")


def _json_value(value: Any) -> tuple[bool, Any]:
    """(whether ``value`` is a plain JSON value, the value)."""
    try:
        return json.loads(json.dumps(value)) == value, value
    except (TypeError, ValueError):
        return False, None


def params(cls: type) -> dict[str, Any]:
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
    for name, p in inspect.signature(cls.__init__).parameters.items():  # type: ignore[misc]
        if name not in _SKIP_PARAMS and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
            out[name] = p.default
    return out


def _others(value: Any) -> tuple[Any, ...]:
    """Two values of the type of ``value`` that differ from it (to see what a key changes on load)."""
    if isinstance(value, bool):
        return (not value,)
    if isinstance(value, int):
        return (value + 7, value + 13)
    if isinstance(value, float):
        return (value + 0.5, value + 1.5)
    if isinstance(value, str):
        return (value + "_x", value + "_y")
    if isinstance(value, list):
        return (list(value) + list(value[:1]), list(value[1:]))
    return (None, 12345)


def _loaded(cls: type, data: dict[str, Any]) -> dict[str, Any] | None:
    """``to_dict()`` of the class loaded from ``data``; None when the class refuses the data."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out: dict[str, Any] = cls.from_dict(data).to_dict()  # type: ignore[attr-defined]
    except Exception:  # a value the class rejects outright is not silently kept either
        return None
    return out


def _kept(cls: type, written: dict[str, Any], key: str) -> bool:
    """Whether the class keeps a file's other value of ``key`` (two tried), rather than computing its own."""
    for other in _others(written[key]):
        loaded = _loaded(cls, {**written, key: other})
        if loaded is not None and loaded.get(key) != written[key]:
            return True
    return False


def _default_dict(cls: type) -> dict[str, Any]:
    """``cls().to_dict()``. A class whose own defaults fail its class validators (Gemma4AssistantConfig: its default
    text config has the per-layer embeddings its ``validate_architecture`` refuses) is built by the ``__init__`` that
    huggingface_hub's ``@strict`` wraps (``__wrapped__``), the validators not run: the same keys are written."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            out: dict[str, Any] = cls().to_dict()
        except Exception:
            unvalidated = getattr(cls.__init__, "__wrapped__", None)  # type: ignore[misc]
            if unvalidated is None:
                raise
            instance = cls.__new__(cls)  # type: ignore[call-overload]
            unvalidated(instance)
            out = instance.to_dict()
    return out


def class_entry(cls: type, base_written: set[str], reads: set[str]) -> dict[str, Any]:
    """The accept-list entry of one configuration class (module docstring); ``reads``: every attribute the family's
    modeling modules and transformers' shared modules read off a config (:func:`modeling_reads`; a derived key the
    class keeps is ``read`` when they read it, whatever the configuration module does with it)."""
    declared = params(cls)
    written = _default_dict(cls)
    defaults = {}
    for name, default in declared.items():
        plain, value = _json_value(default)
        if plain and default is not inspect.Parameter.empty:
            defaults[name] = value
    derived: dict[str, str] = {}
    for key in sorted(set(written) - set(declared) - base_written):
        derived[key] = "read" if _kept(cls, written, key) and key in reads else (
            "unread" if _kept(cls, written, key) else "recomputed")  # fmt: skip
    entry: dict[str, Any] = {
        "class": cls.__name__,
        "params": sorted(declared),
        "defaults": defaults,
        "written": sorted(set(written) - base_written),
        "derived": derived,
        "attribute_map": dict(sorted(getattr(cls, "attribute_map", {}).items())),
    }
    subs = getattr(cls, "sub_configs", {}) or {}
    # a sub-config of AutoConfig (Gemma4AssistantConfig's text_config) is its model_type's class, listed on its own
    subs = {name: sub for name, sub in subs.items() if isinstance(sub, type) and hasattr(sub, "to_dict")}
    if subs:
        entry["sub_configs"] = {
            name: class_entry(sub, base_written, reads) for name, sub in sorted(subs.items())
        }
    return entry


# --- what modeling code reads off a config ---------------------------------------------------------------------


def _is_config(node: ast.expr, self_is_config: bool) -> bool:
    """``config``, ``self.config``, ``text_config``, ``self.model.config``: an expression naming a config object
    (and ``self`` in a configuration module)."""
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    if name.lower().endswith("generation_config"):  # decoding settings (a GenerationConfig), not the model's
        return False
    return name.lower().endswith("config") or (
        self_is_config and isinstance(node, ast.Name) and name == "self"
    )


def scan(
    source: str, self_is_config: bool = False, kwargs_reads: bool = False
) -> tuple[set[str], dict[str, list[Any]]]:
    """(keys read plainly, keys read only through ``getattr(config, KEY, fallback)`` -> their fallbacks) of one
    module's source (module docstring); ``kwargs_reads``: a family's configuration module, whose ``kwargs.get``
    reads count."""
    plain: set[str] = set()
    fallbacks: dict[str, list[Any]] = {}
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Load)
            and _is_config(node.value, self_is_config)
        ):
            plain.add(node.attr)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
            and len(node.args) >= 2
            and _is_config(node.args[0], self_is_config)
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            key = node.args[1].value
            fallback = _literal(node.args[2]) if node.func.id == "getattr" and len(node.args) == 3 else None
            if fallback is None:
                plain.add(key)
            else:
                fallbacks.setdefault(key, []).append(fallback[0])
        elif kwargs_reads and (found := _kwargs_read(node)) is not None:
            key, fallback = found
            if fallback is None:
                plain.add(key)
            else:
                fallbacks.setdefault(key, []).append(fallback[0])
    return plain, fallbacks


def _kwargs_read(node: ast.AST) -> tuple[str, tuple[Any] | None] | None:
    """(key, its literal fallback or None) of ``kwargs.get("KEY"[, fallback])``, ``kwargs.pop(...)`` or
    ``kwargs["KEY"]`` in a configuration module: a key the class takes from the file's leftovers and turns into
    an attribute (GlmMoeDsaConfig's ``num_experts`` sets ``n_routed_experts``)."""
    if (
        isinstance(node, ast.Subscript)
        and isinstance(node.value, ast.Name)
        and node.value.id == "kwargs"
        and isinstance(node.slice, ast.Constant)
        and isinstance(node.slice.value, str)
    ):
        return node.slice.value, None
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("get", "pop")
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "kwargs"
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    ):
        fallback = _literal(node.args[1]) if len(node.args) == 2 else (None,)
        return node.args[0].value, fallback
    return None


def _literal(node: ast.expr) -> tuple[Any] | None:
    """(the JSON value of a literal fallback,), or None for an expression (any value of the key may matter)."""
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    plain, value = _json_value(list(value) if isinstance(value, tuple) else value)
    return (value,) if plain else None


def _merge(paths: list[Path], root: Path) -> dict[str, Any]:
    plain: set[str] = set()
    fallbacks: dict[str, list[Any]] = {}
    for path in paths:
        # ``self`` is the model's config in a configuration module, but a GenerationConfig in generation's
        self_is_config = path.name.startswith("configuration_") and path.parent.name != "generation"
        # a family's configuration class takes leftover keys from kwargs (GlmMoeDsaConfig's num_experts); the base
        # class's kwargs are from_pretrained's arguments (revision, cache_dir), no keys of a config.json
        kwargs_reads = self_is_config and "models" in path.relative_to(root).parts
        p, f = scan(path.read_text(encoding="utf-8"), self_is_config, kwargs_reads)
        plain |= p
        for key, values in f.items():
            fallbacks.setdefault(key, []).extend(v for v in values if v not in fallbacks.get(key, []))
    return {
        "sources": [str(p.relative_to(root)) for p in paths],
        "plain": sorted(plain),
        # a key read plainly somewhere keeps its fallbacks too (a null value is absent where every fallback is null)
        "fallbacks": dict(sorted(fallbacks.items())),
    }


def _package() -> Path:
    return Path(quiet_import().__file__).parent


def _imported_modeling(path: Path, models: Path) -> Iterator[Path]:
    """The modeling modules of other families ``path`` imports (``from ..llama.modeling_llama import ...``)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.ImportFrom)
            and node.level == 2
            and node.module
            and ".modeling_" in node.module
        ):
            target = models / (node.module.replace(".", "/") + ".py")
            if target.is_file():
                yield target


def _configuration_path(cls: type) -> Path:
    return Path(sys.modules[cls.__module__].__file__ or "")


def modeling_paths(cls: type) -> list[Path]:
    """The family's ``modeling_*.py`` (beside its ``configuration_*.py``) and, transitively, the modeling modules
    of other families it imports."""
    own = _configuration_path(cls)
    start = own.with_name(own.name.replace("configuration_", "modeling_", 1))
    models = _package() / "models"
    seen: list[Path] = []
    todo = [start] if start.is_file() else []
    while todo:
        path = todo.pop()
        if path not in seen:
            seen.append(path)
            todo += list(_imported_modeling(path, models))
    return seen


def modeling_reads(cls: type) -> dict[str, Any]:
    """What the family of configuration class ``cls`` reads off a config (module docstring): ``{"modeling":
    {"sources", "plain", "fallbacks"}, "configuration": {...}}``, its modeling modules and its configuration module
    (where ``self.KEY`` counts)."""
    package = _package()
    return {"modeling": _merge(modeling_paths(cls), package),
            "configuration": _merge([_configuration_path(cls)], package)}  # fmt: skip


@functools.cache
def shared_reads() -> dict[str, Any]:
    """What transformers' modules outside ``models/`` read off a config: ``{"sources", "plain", "fallbacks"}``."""
    package = _package()
    paths = sorted(package.glob("*.py")) + sorted(package.glob("integrations/*.py"))
    paths += sorted(package.glob("generation/*.py"))
    return _merge(paths, package)


def all_reads(entry: dict[str, Any]) -> set[str]:
    """Every key one ``{"sources", "plain", "fallbacks"}`` entry reads."""
    return set(entry["plain"]) | set(entry["fallbacks"])
