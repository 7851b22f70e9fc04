"""Loading a target into a validated config: :func:`load` (the public verb) and the CLI's form of it, which keeps
the name TARGET was given by (:func:`load_target`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeAlias

from embedcalc.config.limits import plain_numbers
from embedcalc.config.resolved import ResolvedShape
from embedcalc.errors import ConfigError
from embedcalc.sources.loading import LoadedConfig, Overrides, load_parsed, resolve_target, target_origin

ConfigLike: TypeAlias = str | Path | Mapping[str, Any] | LoadedConfig | ResolvedShape  # a ResolvedShape

__all__ = ["ConfigLike", "as_loaded", "label", "load", "load_target", "without_dropout"]


def load(target: ConfigLike, overrides: Overrides = None) -> LoadedConfig:
    """Load and validate a config, as the CLI's TARGET and ``--set``.

    ``target`` is a preset name (``"bert-base"``), a path to a YAML/JSON config or a Hugging Face ``config.json``,
    a mapping of config fields (aliases such as ``n_head`` work; a mapping with ``model_type`` is read as a Hugging
    Face config), or an already loaded config. ``overrides`` is a mapping ``{"num_heads": 16}`` or a list of
    ``"key=value"`` strings (values read as ``--set`` reads them). Raises :class:`ConfigError` listing every
    problem found.

    >>> import embedcalc
    >>> cfg = embedcalc.load("bert-base", overrides={"num_heads": 16})
    >>> cfg.config.num_heads, cfg.config.embed_dim
    (16, 768)
    >>> small = {"architecture": "decoder", "embed_dim": 512, "n_head": 8, "num_layers": 6, "vocab_size": 32000,
    ...          "max_seq_len": 2048}
    >>> embedcalc.load(small).config.num_heads
    8
    >>> try:
    ...     embedcalc.load("bert-base", overrides=["num_heads=7"])
    ... except embedcalc.ConfigError as exc:
    ...     print(exc.problems[0].path, "|", exc.problems[0].code)
    --set num_heads | heads_indivisible
    """
    if isinstance(target, LoadedConfig | ResolvedShape):
        loaded = as_loaded(target)
        if not overrides:
            return loaded
        raw: dict[str, Any] = loaded.config.model_dump(exclude_unset=True)
        origin = loaded.target
        return load_parsed(raw, loaded.source, origin, target=origin, overrides=overrides, rename=True)
    if isinstance(target, Mapping):  # numpy numbers in it are Python ones first (the API's integer contract)
        name = str(target.get("name") or "config")
        plain = plain_numbers(dict(target))
        try:
            return load_parsed(plain, "python", name, target=name, overrides=overrides, rename=True)
        except ConfigError as exc:
            return _derived(exc, name, name, plain, overrides)
    if not isinstance(target, str | Path):
        from embedcalc.api.workload import usage

        raise usage(f"a config is a preset name, a file path, a mapping of fields or a loaded config, got "
                    f"{type(target).__name__}", "target")  # fmt: skip
    return _load_named(str(target), overrides, rename=True)


def load_target(
    target: str, overrides: Sequence[str] | None = None, *, records: bool = False
) -> LoadedConfig:
    """TARGET as the CLI loads it (``--set`` strings): results keep the name TARGET was given by, even when an
    override sets ``name``. With ``records`` a shipped preset without ``--set`` is its record, not a validated
    model (:func:`embedcalc.sources.loading.load_parsed`): for the commands that only count (analyze, compare)."""
    return _load_named(target, list(overrides or []), rename=False, records=records)


def _load_named(name: str, overrides: Overrides, rename: bool, records: bool = False) -> LoadedConfig:
    raw, source, path = resolve_target(name)
    origin = target_origin(name, source, path)
    try:
        return load_parsed(
            raw, source, origin, path, target=name, overrides=overrides, rename=rename, records=records
        )
    except ConfigError as exc:
        return _derived(exc, name, origin, raw, overrides)


def _derived(
    refusal: ConfigError, target: str, origin: str, raw: dict[str, Any], overrides: Overrides
) -> LoadedConfig:
    """A Hugging Face family without a native mapping: its layer model derived through transformers (DESIGN §19,
    :func:`embedcalc.api.derived.derived_load`), or the refusal."""
    from embedcalc.api.derived import derived_load
    from embedcalc.api.general import GENERAL_CODES

    if refusal.code not in GENERAL_CODES or not isinstance(overrides, list | tuple | type(None)):
        raise refusal

    return derived_load(refusal, target, origin, raw, overrides)


def as_loaded(config: ConfigLike) -> LoadedConfig:
    """Any form :func:`load` accepts, loaded (a loaded config as it is)."""
    if isinstance(config, LoadedConfig):
        return config
    if isinstance(config, ResolvedShape):
        return LoadedConfig(target=config.name or "config", config=config, source="python")
    return load(config)


def label(config: ConfigLike) -> str:
    """How messages name a config: its TARGET, its file, or its ``name``."""
    if isinstance(config, str | Path):
        return str(config)
    if isinstance(config, LoadedConfig):
        return config.target
    if isinstance(config, ResolvedShape):
        return config.name or "config"
    if isinstance(config, Mapping):
        return str(config.get("name") or "config")
    return f"{config!r:.60}"  # not a config at all: load says so, naming it


def without_dropout(loaded: LoadedConfig) -> LoadedConfig:
    """The config a measurement runs: embedcalc's torch model for timing has no dropout layers (no masks), so
    every prediction placed beside a measurement is made for dropout 0."""
    return replace(loaded, config=loaded.config.model_copy(update={"dropout": 0.0}))
