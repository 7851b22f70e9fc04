"""Reading one Hugging Face ``config.json``: the per-key report types, the reader that records every key's fate,
and the helpers the families share (activation names, dropout, the pointer to embedcalc's own YAML).

The family modules of :mod:`embedcalc.config.hf` (listed in its registry) map each family; its ``__init__`` is the
entry point.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from embedcalc.config.hf import accept, keys
from embedcalc.errors import Problem

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
    """A key of the file that does not change the cost, and why."""

    key: str
    value: Any
    reason: str

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

    def as_dict(self) -> dict[str, Any]:
        return {
            "family": self.family,
            "counted_as": self.counted_as,
            "mapped": [m.as_dict() for m in self.mapped],
            "ignored": [i.as_dict() for i in self.ignored],
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
        if len(found) > 1:
            self.problem(found[1], f"{found[1]!r} and {found[0]!r} both set {key}; keep one")
        return (found[0], self.raw[found[0]]) if found else (key, MISSING)

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

    def problem(self, key: str, message: str, code: str = "hf_unsupported") -> None:
        self.problems.append(Problem(key, message, code))

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
        """A key no rule of the family or of every config covers: by what transformers' class declares and writes
        (:mod:`embedcalc.config.hf.accept`), else unknown."""
        class_keys = accept.class_keys(self.family.model_type)
        version = accept.transformers_version()
        verdict = None if class_keys is None else accept.classify(class_keys, key, value, version)
        if verdict is not None and verdict.ignored:
            self.ignored.append(IgnoredKey(key, value, verdict.text))
        elif verdict is not None:
            self.problem(key, f"{verdict.text}. {yaml_hint(self.family)}", "hf_unmapped_key")
        else:
            from embedcalc.config.problems import did_you_mean

            cls = self.family.config_class
            known = sorted(class_keys.params | class_keys.written) if class_keys is not None else []
            self.problem(
                key,
                f"unknown key {key!r}{did_you_mean(key, known)} for model_type {self.family.model_type}: "
                + (
                    f"transformers' {cls} neither declares nor writes it (transformers {version})"
                    if class_keys
                    else f"the family's reader does not read it ({cls} is the checkpoint's remote code)"
                )
                + ", so embedcalc cannot tell whether it changes the "
                f"model's size or cost. If it is a typo, fix it; if {cls} ignores it, remove it from a copy of the "
                f"file; otherwise {yaml_hint(self.family, lower=True)}",
                "hf_unknown_key",
            )


def yaml_hint(family: Family, lower: bool = False) -> str:
    text = (
        "Describe the model in embedcalc's own YAML instead (`embedcalc presets show "
        f"{family.example_preset}` prints a complete example; docs/concepts/huggingface.md)"
    )
    return text[0].lower() + text[1:] if lower else text


# --- activations ------------------------------------------------------------------------------------------------

PLAIN_ACTIVATIONS = {
    "relu": "relu",
    "gelu": "gelu",
    "gelu_python": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_fast": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_accurate": "gelu_tanh",
    "silu": "silu",
    "swish": "silu",
    "relu2": "relu",  # squared ReLU (Nemotron, Arcee): the same matmuls; the element-wise estimate is ReLU's
}
GATED_ACTIVATIONS = {
    "silu": "swiglu",
    "swish": "swiglu",
    "gelu": "geglu",
    "gelu_new": "geglu",
    "gelu_fast": "geglu",
    "gelu_pytorch_tanh": "geglu",
    "gelu_python": "geglu",
}


LEARNED_ACTIVATIONS = {"xielu": "xielu"}
"""Activations with parameters of their own (xIELU's two scalars): accepted only by a family whose modules build
exactly one per FFN (Apertus), which passes them to :func:`map_activation`."""


def map_activation(
    reader: KeyReader, key: str, gated: bool, learned: Mapping[str, str] | None = None
) -> None:
    """Map an activation name of transformers' ACT2FN (only the element-wise estimate depends on which, unless it
    is one of the family's ``learned`` activations, whose parameters embedcalc counts)."""
    written, value, from_file = reader.value(key)
    table = GATED_ACTIVATIONS if gated else PLAIN_ACTIVATIONS | dict(learned or {})
    if not isinstance(value, str) or value not in table:
        kind = "gated FFN" if gated else "FFN"
        reader.problem(
            written,
            f"{written} = {value!r} is not an activation embedcalc models for a {kind}; known: "
            f"{', '.join(sorted(table))}. It changes only the element-wise estimate, so `--set activation=...` "
            "with the nearest one counts the same matmuls",
        )
        return
    note = "gated: act(gate) * up, three matrices" if gated else ""
    if value in (learned or {}):
        note = "learned: two scalars per FFN (alpha_p, alpha_n)"
    reader.put("activation", table[value], written, "file" if from_file else "default", note)


def map_partial_rotary(reader: KeyReader, default: float, legacy: str | None = None) -> None:
    """Partial rotary: ``rotary_dim = int(head_dim * factor)`` as transformers' rotary embeddings compute it, with
    the factor at top level (files before transformers 5, under ``legacy`` in some) or inside ``rope_parameters``
    (transformers 5)."""
    key = "partial_rotary_factor"
    written, factor = reader.lookup(key)
    if factor is MISSING and legacy is not None:
        written, factor = reader.lookup(legacy)
    params_key, params = reader.lookup("rope_parameters")
    if factor is MISSING and isinstance(params, dict) and key in params:
        written, factor = f"{params_key}.{key}", params[key]
    origin: Origin = "default" if factor is MISSING else "file"
    if factor is MISSING:
        written, factor = key, default
    if params is not MISSING:
        reader.ignored.append(IgnoredKey(params_key, params, keys.ROPE + f" ({key} mapped as rotary_dim)"))
    heads, d = reader.data.get("num_heads"), reader.data.get("embed_dim")
    head_dim = reader.data.get("head_dim") or (
        d // heads if isinstance(d, int) and isinstance(heads, int) else None
    )
    if not isinstance(factor, int | float) or isinstance(factor, bool) or not 0 < factor <= 1:
        reader.problem(written, f"{written} = {factor!r} must be a number in (0, 1]")
        return
    if head_dim is None or factor == 1:
        return
    reader.put("rotary_dim", int(head_dim * factor), written, origin, f"int(head_dim {head_dim} * {factor})")


def map_biases(reader: KeyReader, **sources: bool | str) -> None:
    """Bias flags ``qkv`` / ``out`` / ``ffn``: a bool is fixed by the family's modules, a string is the key of
    the file that says (with transformers' default when absent)."""
    for part, source in sources.items():
        if isinstance(source, bool):
            reader.fixed(f"{part}_bias", source)
        else:
            reader.copy(source, f"{part}_bias")


def expect_absolute_positions(reader: KeyReader) -> None:
    """``position_embedding_type`` of the BERT family: ``absolute`` is the learned table; ``relative_key`` /
    ``relative_key_query`` are distance embeddings older transformers built; any other type (Jina v2's ``alibi``,
    Jina v3's ``rotary``) comes from the file's remote code, never from transformers' class."""
    written, value = reader.lookup("position_embedding_type")
    if value is MISSING or value in ("relative_key", "relative_key_query") or value == "absolute":
        reader.expect(
            "position_embedding_type", ("absolute",), "older transformers built distance embeddings for it"
        )
        return
    auto = reader.raw.get("auto_map")
    named = (
        ", ".join(sorted({str(v).rsplit(".", 1)[-1] for v in auto.values()}))
        if isinstance(auto, dict)
        else ""
    )
    source = f"its remote code ({named}, in auto_map)" if named else "remote code"
    reader.problem(
        written,
        f"{written} = {value!r} is not a position type of transformers' {reader.family.config_class}: it comes from "
        f"{source}, which embedcalc does not run or count (it counts transformers' own class, which has no such "
        f"positions). {yaml_hint(reader.family)}",
    )


def map_offset_positions(reader: KeyReader, offset: int, offset_key: str, why: str) -> None:
    """A learned position table numbered from ``offset`` (fairseq's make_positions: RoBERTa's padding_idx + 1,
    MPNet's fixed 2): its max_position_embeddings rows serve max_position_embeddings - offset tokens. ``offset_key``
    is the key that sets the offset (``model_type`` when the family fixes it), ``why`` how it is computed."""
    rows_key, rows, rows_in_file = reader.value("max_position_embeddings")
    origin: Origin = "file" if rows_in_file else "default"
    fixed = offset_key == "model_type"
    if isinstance(rows, int) and not isinstance(rows, bool):
        note = f"{rows_key} {rows} - {why}: the table's first {offset} rows are never used"
        reader.put(
            "max_seq_len", rows - offset, rows_key if fixed else f"{rows_key}, {offset_key}", origin, note
        )
    else:
        reader.put("max_seq_len", rows, rows_key, origin)
    offset_origin: Origin = "family" if fixed else "file" if offset_key in reader.raw else "default"
    reader.put("position_offset", offset, offset_key, offset_origin,
               f"{why}: the table has max_seq_len + {offset} rows")  # fmt: skip


def map_dropout(reader: KeyReader, key: str) -> None:
    reader.copy(
        key, "dropout", lambda v: float(v) if isinstance(v, int | float) and not isinstance(v, bool) else v
    )


# --- a family ---------------------------------------------------------------------------------------------------


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
