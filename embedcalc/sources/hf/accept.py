"""What transformers says about a key no family rule consumed: the shipped data derived from the newest transformers
(``accept_list.json``: what each family's configuration class declares and writes; ``modeling_reads.json``: what
its modeling code reads off a config; both written by ``scripts/hf_accept_list.py``, which records the version),
and, when the installed transformers is another version, that transformers itself (:mod:`.derive`).

How :class:`~embedcalc.sources.hf.reader.KeyReader` uses it (:func:`classify`), for a key no family rule consumed
and no common reason covers. transformers keeps a key its class does not declare as a plain attribute and builds the
same model, so a key is refused only where it could change the count:

- a key the class derives on load: ``recomputed`` (the class overwrites the file's value) or ``unread`` (kept, but
  no modeling code reads it) is ignored; ``read`` needs a family rule, else it is a problem (``hf_unmapped_key``);
- a parameter of the class at the class's default is ignored: the family's counts were checked against
  transformers with that default;
- any other key the family's modeling code (or the class's own code, or transformers' shared modules) reads is a
  problem (``hf_unmapped_key``): embedcalc does not map it, and it may change the model. A read with a literal
  fallback (``getattr(config, "KEY", 1.0)``) is harmless at that value: the model the key's absence builds;
- a key nothing reads is ignored and reported (``warn``): a parameter at another value than the default, or a key
  the class does not even declare (a typo, a field of remote code); the report lists them (``ignored_keys``) and
  each becomes a warning.

The shipped data is read once, on the first key that needs it. The installed transformers is consulted only when
its version differs from the shipped data's and the shipped data does not clear the key: importing it (and torch)
costs seconds, and a key the newest release clears needs no second opinion.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

PATH = Path(__file__).with_name("accept_list.json")
READS_PATH = Path(__file__).with_name("modeling_reads.json")

Fate = Literal["ignored", "warn", "problem"]


SHARED_LABEL = "its shared modules (caches, masks, generation, integrations)"


@dataclass(frozen=True)
class Reads:
    """What modeling code reads off a config: keys read plainly, and keys read only with literal fallbacks."""

    sources: tuple[str, ...]
    plain: frozenset[str]
    fallbacks: dict[str, tuple[Any, ...]]

    @property
    def shared(self) -> bool:
        """Whether these are transformers' shared modules (outside ``models/``), not a family's."""
        return not all(s.startswith("models/") for s in self.sources)

    @property
    def label(self) -> str:
        """The modules, as a message names them: a family's by file name, the shared ones in a word."""
        if not self.shared:
            return ", ".join(s.rsplit("/", 1)[-1] for s in self.sources)
        return SHARED_LABEL

    def how(self, key: str) -> Literal["plain", "fallback", "no"]:
        return "plain" if key in self.plain else "fallback" if key in self.fallbacks else "no"


@dataclass(frozen=True)
class ClassKeys:
    """One transformers configuration class: its parameters (with their JSON defaults), the keys ``to_dict()``
    writes beyond ``PreTrainedConfig``'s, what happens to each derived key, the classes it nests, what the family's
    code reads, and the transformers version all of it comes from."""

    config_class: str
    params: frozenset[str]
    defaults: dict[str, Any]
    written: frozenset[str]
    derived: dict[str, str]
    sub_configs: dict[str, ClassKeys]
    # the family's modeling and configuration modules, transformers' shared ones
    reads: tuple[Reads, ...] = ()
    version: str = ""
    aliases: dict[str, str] = field(default_factory=dict)  # the class's attribute_map: alias -> attribute


@dataclass(frozen=True)
class Verdict:
    """The fate of one key: ignored (with the reason), ignored and reported (``warn``), or a problem."""

    fate: Fate
    text: str
    # a problem whose only reader is transformers' shared modules (caches, masks): whether it changes this family's
    # model depends on paths the family may never take, so the general reader, which runs them, can count the file
    shared: bool = False
    # a problem's reason without the refusal's advice (errors.Problem.reason): what the general reader's note quotes
    reason: str = ""

    @property
    def ignored(self) -> bool:
        return self.fate != "problem"


@functools.cache
def _data() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(PATH.read_text(encoding="utf-8"))
    return data


@functools.cache
def _reads_data() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(READS_PATH.read_text(encoding="utf-8"))
    return data


def transformers_version() -> str:
    """The transformers version the shipped data was generated from."""
    return str(_data()["transformers_version"])


def layer_type_renames() -> dict[str, str]:
    """Older layer-type names transformers renames on load, for every family (``"attention"`` is
    ``"full_attention"``, ``"deepseek_sparse_attention"`` is ``"indexed_attention"``)."""
    return dict(_data().get("layer_type_renames", {}))


def weight_conversions() -> frozenset[str]:
    """The model types and class names transformers has a checkpoint conversion mapping for (its
    ``conversion_mapping.py``, beyond the legacy renamings every model gets): a checkpoint of one of them may be
    stored in the family's original format, renamed and converted on load."""
    return frozenset(_data().get("weight_conversions", ()))


def base_keys() -> frozenset[str]:
    """The keys every ``PreTrainedConfig`` declares or writes."""
    base = _data()["base"]
    return frozenset(base["params"]) | frozenset(base["written"])


def _reads(raw: dict[str, Any]) -> Reads:
    fallbacks = {key: tuple(values) for key, values in raw["fallbacks"].items()}
    return Reads(tuple(raw["sources"]), frozenset(raw["plain"]), fallbacks)


def _entry(raw: dict[str, Any], reads: tuple[Reads, ...], version: str) -> ClassKeys:
    subs = {name: _entry(sub, reads, version) for name, sub in raw.get("sub_configs", {}).items()}
    return ClassKeys(raw["class"], frozenset(raw["params"]), dict(raw["defaults"]), frozenset(raw["written"]),
                     dict(raw["derived"]), subs, reads, version, dict(raw.get("attribute_map", {})))  # fmt: skip


@functools.cache
def class_keys(model_type: str) -> ClassKeys | None:
    """The shipped entry of ``model_type``; None for a family the files do not list (regenerate them)."""
    raw = _data()["families"].get(model_type)
    if raw is None:
        return None
    reads = _reads_data()
    family = reads["families"].get(model_type)
    found = (_reads(family["modeling"]), _reads(family["configuration"])) if family is not None else ()
    return _entry(raw, (*found, _reads(reads["shared"])), transformers_version())


def installed_version() -> str | None:
    """The installed transformers' version, read from its metadata (nothing imported); None when absent."""
    try:
        return importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:
        return None


@functools.cache
def installed_class_keys(config_class: str) -> ClassKeys | None:
    """``config_class`` as the installed transformers defines it, derived now (:mod:`.derive`); None when that is
    the shipped data's version, when transformers is not installed or has no such class, or when it fails to load."""
    version = installed_version()
    if version is None or version == transformers_version():
        return None
    from embedcalc.sources.hf import derive

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            transformers = derive.quiet_import()
            cls = getattr(transformers, config_class, None)
            if not isinstance(cls, type):
                return None
            base_written = set(transformers.PretrainedConfig().to_dict())
            family, shared = derive.modeling_reads(cls), derive.shared_reads()
            modeling = derive.all_reads(family["modeling"]) | derive.all_reads(shared)
            raw = derive.class_entry(cls, base_written, modeling)
    except Exception:  # an installed transformers that cannot be imported or derived: the shipped data stands
        return None
    reads = (_reads(family["modeling"]), _reads(family["configuration"]), _reads(shared))
    return _entry(raw, reads, str(transformers.__version__))


def same_value(value: Any, default: Any) -> bool:
    """JSON equality that keeps booleans apart from numbers (``1`` is not ``true``) and lets ``0`` equal ``0.0``."""
    if isinstance(value, bool) or isinstance(default, bool):
        return isinstance(value, bool) and isinstance(default, bool) and value == default
    if isinstance(value, int | float) and isinstance(default, int | float):
        return value == default
    return type(value) is type(default) and bool(value == default)


def _reader_of(keys: ClassKeys, key: str, value: Any) -> tuple[str, str] | None:
    """(the code that reads ``key`` off a config, how), when ``value`` may change what that code builds; None when
    nothing reads it, or every read falls back to ``value`` itself."""
    for reads in keys.reads:
        how = reads.how(key)
        if how == "plain" and value is None and reads.shared and reads.fallbacks.get(key, ()) == (None,):
            # transformers' shared modules read it with getattr(config, KEY, None) and reach a plain read only
            # past a test for None (masks and caches: sliding_window, attention_chunk_size): null is absent
            continue
        if how == "plain":
            return reads.label, f"config.{key}"
        if how == "fallback" and not all(same_value(value, f) for f in reads.fallbacks[key]):
            return reads.label, f"getattr(config, {key!r}, {reads.fallbacks[key][0]!r})"
    return None


def classify(keys: ClassKeys, key: str, value: Any) -> Verdict:
    """The fate of ``key`` = ``value`` by the class ``keys`` describes and the code that reads it (module
    docstring)."""
    cls, version = keys.config_class, keys.version
    target = keys.aliases.get(key)
    if target is not None and target != key:  # transformers sets the attribute the alias names
        found = classify(replace(keys, aliases={}), target, value)
        return Verdict(found.fate, f"{key} is {cls}'s alias of {target} (attribute_map): {found.text}")
    fate = keys.derived.get(key)
    if fate == "recomputed":
        return Verdict("ignored", f"{cls} computes it from other keys on load and overwrites the file's value "
                                  f"(transformers {version}): no effect on the model")  # fmt: skip
    if fate == "unread":
        return Verdict("ignored", f"{cls} writes it on save, and no modeling code of transformers {version} reads "
                                  "it off the config: no effect on the model")  # fmt: skip
    if fate == "read":
        return Verdict("problem", f"{key} = {value!r} is a key {cls} derives and transformers' modeling code reads, "
                                  "and embedcalc does not check it for this family")  # fmt: skip
    declared = key in keys.params
    if declared and key in keys.defaults and same_value(value, keys.defaults[key]):
        return Verdict("ignored", f"{key} = {value!r}: {cls}'s default (transformers {version}), with which this "
                                  "family's counts are checked against transformers")  # fmt: skip
    default = f" (default {keys.defaults[key]!r})" if key in keys.defaults else ""
    what = (
        f"a parameter of transformers' {cls}{default}"
        if declared
        else f"not a parameter of transformers' {cls}"
    )
    reader = _reader_of(keys, key, value)
    if reader is not None:
        read = (
            f"{key} = {value!r} is {what}, and transformers {version} reads it ({reader[1]} in {reader[0]})"
        )
        return Verdict("problem", f"{read}; embedcalc does not map it for this family: it may change the model's "
                                  "size or cost, so the file is refused rather than miscounted",
                       shared=reader[0] == SHARED_LABEL,
                       reason=f"{read}, which embedcalc's reader of this family does not map")  # fmt: skip
    if any(reads.how(key) == "fallback" for reads in keys.reads):
        return Verdict("ignored", f"{key} = {value!r}: the value transformers {version} falls back to without the "
                                  f"key (getattr(config, {key!r}, {value!r})): the same model")  # fmt: skip
    if declared:
        return Verdict("warn", f"{what}, which no modeling code of transformers {version} reads for this family: "
                               "kept on the config, no effect on the model")  # fmt: skip
    return Verdict("warn", f"{cls} does not declare it; transformers {version} keeps it as a plain attribute that "
                           "no modeling code of this family reads: no effect on the model")  # fmt: skip


def verdict(model_type: str, config_class: str, key: str, value: Any) -> Verdict | None:
    """The fate of ``key`` by the shipped data and, when that does not clear it and another transformers version is
    installed, by the installed one (module docstring); None when neither knows the family."""
    shipped = class_keys(model_type)
    if shipped is None:  # a remote-code family (registry.REMOTE_CODE): transformers has no class to consult
        return None
    first = classify(shipped, key, value)
    if first.fate == "ignored":
        return first
    live = installed_class_keys(config_class)
    second = None if live is None else classify(live, key, value)
    found = [v for v in (second, first) if v is not None]  # the installed version's text first
    for fate in ("ignored", "problem", "warn"):
        for v in found:
            if v.fate == fate:
                return v
    return None


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
    found = classify(keys, key, value)
    return found.text if found.fate == "ignored" else None
