"""Reading one Hugging Face ``config.json``: the per-key report types, the reader that records every key's fate,
a family's description, and the pointer to embedcalc's own YAML; the mappings the families share (activation
names, partial rotary, biases, positions, dropout) are :mod:`embedcalc.sources.hf.mappings`.

The family modules of :mod:`embedcalc.sources.hf` (listed in its registry) map each family; its ``__init__`` is the
entry point.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from embedcalc.errors import Problem
from embedcalc.sources.hf import accept, keys

Origin = Literal["file", "default", "family"]


@dataclass(frozen=True)
class MappedKey:
    """An embedcalc field and where its value came from: a key of the file, transformers' default for a key the
    file leaves out, or the family itself (``model_type``)."""

    key: str
    field: str
    value: Any
    origin: Origin
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        out = {"key": self.key, "field": self.field, "value": self.value, "origin": self.origin}
        return out | ({"note": self.note} if self.note else {})


@dataclass(frozen=True)
class IgnoredKey:
    """A key of the file that does not change the cost, and why; ``warn``: a key transformers' class does not
    declare, or declares and never reads, at a value other than its default: ignored as transformers ignores it,
    and reported (the report's ``ignored_keys``, a warning), since the file's author may have meant something."""

    key: str
    value: Any
    reason: str
    warn: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"key": self.key, "value": self.value, "reason": self.reason}


@dataclass(frozen=True)
class HFReport:
    """How a Hugging Face config was read: the family, what it counts as, and the fate of every key."""

    family: str
    counted_as: str  # "LlamaForCausalLM (AutoModelForCausalLM), LM head untied"
    mapped: list[MappedKey]
    ignored: list[IgnoredKey]
    notes: list[str] = field(default_factory=list)

    @property
    def ignored_keys(self) -> list[IgnoredKey]:
        """The ignored keys worth a warning (:class:`IgnoredKey`'s ``warn``)."""
        return [i for i in self.ignored if i.warn]

    def warnings(self) -> list[Problem]:
        """One warning per key of :attr:`ignored_keys`."""
        return [Problem(i.key, f"ignored key {i.key} = {i.value!r}: {i.reason}", "hf_ignored_key")
                for i in self.ignored_keys]  # fmt: skip

    def as_dict(self) -> dict[str, Any]:
        return {
            "family": self.family,
            "counted_as": self.counted_as,
            "mapped": [m.as_dict() for m in self.mapped],
            "ignored": [i.as_dict() for i in self.ignored],
            "ignored_keys": [i.as_dict() for i in self.ignored_keys],
            "notes": list(self.notes),
        }


# --- reading one file ------------------------------------------------------------------------------------------

MISSING = object()


class KeyReader:
    """Reads one family's keys from a raw config, recording what was mapped, defaulted and ignored."""

    def __init__(self, raw: Mapping[str, Any], family: Family) -> None:
        self.raw, self.family = raw, family
        self.consumed: set[str] = {"model_type"}
        self.data: dict[str, Any] = {}
        self.user_keys: dict[str, str] = {}
        self.mapped: list[MappedKey] = []
        self.ignored: list[IgnoredKey] = []
        self.problems: list[Problem] = []
        self.notes: list[str] = []

    # reading

    def lookup(self, key: str) -> tuple[str, Any]:
        """(the key as written, its value) for ``key`` or an alias of it (transformers' attribute_map);
        ``MISSING`` when the file has neither."""
        names = [key] + [alias for alias, target in self.family.attribute_map.items() if target == key]
        found = [n for n in names if n in self.raw]
        self.consumed.update(found)
        if len(found) > 1 and any(not accept.same_value(self.raw[n], self.raw[found[0]]) for n in found[1:]):
            self.problem(found[1], f"{found[1]!r} and {found[0]!r} both set {key}; keep one")
        if not found:
            return key, MISSING
        value = self.raw[found[0]]
        # layer types by the names transformers' classes load them as
        if key in _LAYER_TYPE_KEYS and isinstance(value, list):
            renames = accept.layer_type_renames()
            value = [renames.get(t, t) if isinstance(t, str) else t for t in value]
        return found[0], value

    def has(self, key: str) -> bool:
        return self.lookup(key)[1] is not MISSING

    def value(self, key: str) -> tuple[str, Any, bool]:
        """(key as written, value, from_file): the file's value, else transformers' default for ``key``."""
        written, value = self.lookup(key)
        if value is MISSING:
            return key, self.family.defaults[key], False
        return written, value, True

    # recording

    def put(self, name: str, value: Any, key: str, origin: Origin, note: str = "") -> None:
        self.data[name] = value
        self.user_keys[name] = key
        self.mapped.append(MappedKey(key, name, value, origin, note))

    def copy(self, key: str, name: str, convert: Callable[[Any], Any] | None = None, note: str = "") -> Any:
        """Map ``key`` onto field ``name`` (the default when absent); returns the value as mapped."""
        written, value, from_file = self.value(key)
        if value is None:
            if from_file:
                self.ignored.append(
                    IgnoredKey(written, None, f"null: embedcalc's default for {name} applies")
                )
            return None
        mapped = convert(value) if convert is not None else value
        self.put(name, mapped, written, "file" if from_file else "default", note)
        return mapped

    def copy_or(self, key: str, name: str, fallback: Any, fallback_note: str) -> Any:
        """Map ``key`` onto ``name``; when its value (or transformers' default) is null, map ``fallback`` instead,
        as transformers does (``n_inner: null`` -> 4 * n_embd). Returns the value as mapped."""
        written, value, from_file = self.value(key)
        origin: Origin = "file" if from_file else "default"
        if value is None:
            self.put(name, fallback, written, origin, fallback_note)
            return fallback
        self.put(name, value, written, origin)
        return value

    def fixed(self, name: str, value: Any, note: str = "") -> None:
        self.put(name, value, "model_type", "family", note)

    def ignore(self, key: str, reason: str) -> None:
        written, value = self.lookup(key)
        if value is not MISSING:
            self.ignored.append(IgnoredKey(written, value, reason))

    def problem(self, key: str, message: str, code: str = "hf_unsupported", reason: str = "") -> None:
        self.problems.append(Problem(key, message, code, reason))

    def expect(self, key: str, harmless: tuple[Any, ...], change: str) -> None:
        """A key that is harmless only with one of ``harmless`` values; anything else is refused."""
        written, value = self.lookup(key)
        if value is MISSING:
            return
        if any(value == h and type(value) is type(h) for h in harmless):
            self.ignored.append(
                IgnoredKey(written, value, f"{written} = {value!r}: the transformers default")
            )
            return
        self.problem(
            written,
            f"{written} = {value!r} is not modelled: {change}. {yaml_hint(self.family)}",
        )

    def derived(self, key: str, expected: Any, how: str) -> None:
        """A key transformers' class computes from others (``qk_head_dim``): harmless when the file's value is the
        one the class computes (``how``), else a problem (the modeling code would read the other value)."""
        written, value = self.lookup(key)
        if value is MISSING:
            return
        if accept.same_value(value, expected):
            self.ignored.append(IgnoredKey(written, value, f"{how} = {expected!r}, as {self.family.config_class} "
                                                           "computes it: nothing beyond the keys mapped"))  # fmt: skip
            return
        self.problem(written, f"{written} = {value!r} disagrees with {how} = {expected!r}, from which "
                              f"{self.family.config_class} computes it; fix the file")  # fmt: skip

    # the rest of the file

    def classify_rest(self) -> None:
        """Classify every key no family rule consumed: common harmless keys, conditional ones, or an error."""
        for key, value in self.raw.items():
            if not isinstance(key, str):
                self.problem(repr(key), f"key {key!r} is not a string", "key_not_string")
                continue
            if key in self.consumed:
                continue
            if key in keys.CONDITIONAL:
                change = keys.conditional_problem(key, value)
                if change is None:
                    self.ignored.append(
                        IgnoredKey(key, value, f"{key} = {value!r}: the transformers default")
                    )
                else:
                    self.problem(
                        key, f"{key} = {value!r} is not modelled: {change}. {yaml_hint(self.family)}"
                    )
                continue
            reason = keys.common_reason(key, value)
            if key == "architectures":
                reason = f"the checkpoint's head classes; embedcalc counts {self.family.counted_as} (counting rule)"
            if reason is None:
                self._classify_by_class(key, value)
                continue
            self.ignored.append(IgnoredKey(key, value, reason))

    def _classify_by_class(self, key: str, value: Any) -> None:
        """A key no rule of the family or of every config covers: by what transformers' class declares and what its
        code reads (:mod:`embedcalc.sources.hf.accept`). A key nothing reads is ignored and reported."""
        family = self.family
        verdict = accept.verdict(family.model_type, family.config_class, key, value)
        if verdict is None:  # a remote-code family: no transformers class, so only its reader's rules
            self.problem(key, f"unknown key {key!r} for model_type {family.model_type}: the family's reader does not "
                              f"read it ({family.config_class} is the checkpoint's remote code, which transformers "
                              "does not have), so embedcalc cannot tell whether it changes the model's size or cost. "
                              f"If it is a typo, fix it; otherwise {yaml_hint(family, lower=True)}",
                         "hf_unknown_key")  # fmt: skip
        elif verdict.fate == "problem":
            code = "hf_shared_read_key" if verdict.shared else "hf_unmapped_key"
            self.problem(key, f"{verdict.text}. {yaml_hint(family)}", code, verdict.reason)
        else:
            text = verdict.text
            if verdict.fate == "warn":
                text += self._remote_code_note() + self._did_you_mean(key)
            self.ignored.append(IgnoredKey(key, value, text, warn=verdict.fate == "warn"))

    def _remote_code_note(self) -> str:
        """For a file that names its own modeling code (``auto_map``): a key transformers' class ignores may be one
        that code reads (Kimi-K3's ``attn_res_block_size`` on a ``kimi_linear`` text config). embedcalc counts
        transformers' own class (keys.py, ``auto_map``), so the warning says which model the count is of."""
        auto = self.raw.get("auto_map")
        models = sorted({str(v).rsplit(".", 1)[-1] for k, v in auto.items() if str(k).startswith("AutoModel")}
                        if isinstance(auto, dict) else [])  # fmt: skip
        if not models:
            return ""
        return (f" (the model transformers' own class builds, which embedcalc counts: this file also names its own "
                f"modeling code, {', '.join(models)} in auto_map, which transformers runs only with trust_remote_code "
                "and which may read it)")  # fmt: skip

    def _did_you_mean(self, key: str) -> str:
        from embedcalc.config.problems import did_you_mean

        keys = accept.class_keys(self.family.model_type)
        known = sorted(keys.params | keys.written) if keys is not None else []
        hint = did_you_mean(key, known)
        return f"; {hint.strip(' ()')}" if hint else ""


# the keys whose values transformers renames from older layer-type names on load (remap_legacy_layer_types)
_LAYER_TYPE_KEYS = frozenset({"layer_types", "mtp_layer_types"})


def all_of(items: list[Any], allowed: Any) -> bool:
    """Whether every item of a file's list is one of ``allowed`` (strings or integers): a list holding a list or
    an object (unhashable, where ``set(items)`` would raise) is simply not one of them."""
    return all(isinstance(x, str | int) and x in allowed for x in items)


def yaml_hint(family: Family, lower: bool = False) -> str:
    text = (
        "Describe the model in embedcalc's own YAML instead (`embedcalc presets show "
        f"{family.example_preset}` prints a complete example; docs/concepts/huggingface.md)"
    )
    return text[0].lower() + text[1:] if lower else text


@dataclass(frozen=True)
class Family:
    """One supported ``model_type``: transformers' config class, its defaults, and the mapping function."""

    model_type: str
    config_class: str
    counted_as: str  # the class transformers builds and the Auto class that picks it
    example_preset: str
    defaults: dict[str, Any]
    read: Callable[[KeyReader], None]
    # alias -> key, as transformers' attribute_map
    attribute_map: dict[str, str] = field(default_factory=dict)
    # read_core's arguments, for a family that is a row of data
    core: dict[str, Any] = field(default_factory=dict)
    # a row's keys its modules never read, with the reason
    ignored: dict[str, str] = field(default_factory=dict)
    # keys whose value is element-wise only and may hold a non-finite number (time_step_limit's bound Infinity)
    non_finite: frozenset[str] = frozenset()
