"""Parsing config text: YAML/JSON syntax, anchors, duplicate keys and the numbers in them; and
:func:`load_mapping`, which reads a file (through :mod:`embedcalc.sources.reading`) and parses it once.

Every failure becomes a :class:`~embedcalc.errors.ConfigError` naming the file; nothing here raises a bare
exception for bad input. The bounds, which make parsing any input cost at most a fixed amount of time and memory:

- YAML text is parsed only up to :data:`MAX_YAML_CHARS` characters (the parser is pure Python); JSON up to
  ``MAX_CONFIG_BYTES``, the bound of the reader;
- a number is parsed once, here, before any arithmetic: an integer with more than :data:`MAX_INT_DIGITS` digits
  and a float that is not finite (``.inf``, ``.nan``, ``1e400``, JSON's ``NaN``/``Infinity``) are refused with
  the key they belong to (:func:`refused_numbers`); ``--set`` values go through the same parser (those longer
  than :data:`MAX_SCALAR_CHARS` are taken as text, unparsed).
"""

from __future__ import annotations

import copy
import json
import math
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from embedcalc.config.limits import INT_BOUND, MAX_INT_DIGITS
from embedcalc.errors import ConfigError, Problem
from embedcalc.sources.reading import MAX_CONFIG_BYTES, file_error, read_text

# PyYAML's parser is pure Python, about 15-40 s per MiB of hostile YAML on a loaded core; JSON's is C (milliseconds
# per MiB). So YAML (anything not named .json) is read up to 32 KiB, fifty times any real model config.
MAX_YAML_CHARS = 1 << 15


@dataclass(frozen=True)
class RefusedNumber:
    """A number the parser refused to convert (too many digits, or not finite); reported with its key."""

    text: str
    reason: str
    code: str

    def __repr__(self) -> str:
        return f"{self.text[:20]}..." if len(self.text) > 20 else self.text


def _int_scalar(text: str) -> int | RefusedNumber:
    digits = text.strip().lstrip("+-")
    if len(digits) > MAX_INT_DIGITS:
        return RefusedNumber(text, too_many_digits(len(digits)), "number_too_long")
    return int(text)


def too_many_digits(digits: int) -> str:
    """The message for an integer of ``digits`` digits."""
    return (
        f"an integer of {digits:,} digits; embedcalc reads at most {MAX_INT_DIGITS} digits "
        f"(10^{MAX_INT_DIGITS} is far beyond any model size)"
    )


def _float_scalar(value: float, text: str) -> float | RefusedNumber:
    if math.isfinite(value):
        return value
    shown = text if len(text) <= 20 else text[:20] + "..."
    kind = "not a number" if math.isnan(value) else "infinite"
    return RefusedNumber(
        shown, f"{shown} is {kind}; a config value must be a finite number", "number_not_finite"
    )


class _Strict:
    """The constructors both loaders share: duplicate keys (silently dropped values) and keys that are no name
    refused, integers bounded, floats finite."""

    def construct_mapping(self: Any, node: Any, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not _hashable(key):
                raise yaml.MarkedYAMLError(
                    problem=f"a mapping key must be a name, found a {type(key).__name__}",
                    problem_mark=key_node.start_mark,
                )
            if isinstance(key, str) and key in seen:
                raise yaml.MarkedYAMLError(problem=f"duplicate key {key!r}", problem_mark=key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)  # type: ignore[misc, no-any-return]

    def construct_bounded_int(self: Any, node: Any) -> int | RefusedNumber:
        text = str(self.construct_scalar(node))
        if len(text.strip().lstrip("+-").replace("_", "")) > MAX_INT_DIGITS:
            return RefusedNumber(text, too_many_digits(len(text.strip().lstrip("+-"))), "number_too_long")
        if (
            not text.strip().lstrip("+-").replace("_", "")
        ):  # `!!int` with no digits: PyYAML indexes the empty text
            raise yaml.constructor.ConstructorError(
                None, None, f"an int with no digits ({text!r})", node.start_mark
            )
        return int(self.construct_yaml_int(node))

    def construct_finite_float(self: Any, node: Any) -> float | RefusedNumber:
        return _float_scalar(float(self.construct_yaml_float(node)), str(self.construct_scalar(node)))


class _StrictLoader(_Strict, yaml.SafeLoader):
    """SafeLoader that refuses anchors/aliases (alias bombs) and duplicate keys (silently dropped values)."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            raise yaml.MarkedYAMLError(
                problem="YAML aliases (*name) are not accepted in model configs; write the value out",
                problem_mark=event.start_mark,
            )
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if getattr(event, "anchor", None):
            raise yaml.MarkedYAMLError(
                problem="YAML anchors (&name) are not accepted in model configs; write the value out",
                problem_mark=event.start_mark,
            )
        return super().compose_node(parent, index)


def _hashable(key: Any) -> bool:
    try:
        hash(key)
    except TypeError:
        return False
    return True


_StrictLoader.add_constructor("tag:yaml.org,2002:int", _StrictLoader.construct_bounded_int)
_StrictLoader.add_constructor("tag:yaml.org,2002:float", _StrictLoader.construct_finite_float)

# Numbers as YAML 1.2 and JSON read them. PyYAML implements YAML 1.1, which reads `0512` as octal 330, `1:30` as
# base-60 90, `0x10` as 16 and `1_000` as 1000, but `1e-1` as a string: a model size must never be silently
# changed, so only decimal integers and decimal/exponent floats are numbers; anything else stays a string and is
# then rejected by validation with the value quoted.
_StrictLoader.yaml_implicit_resolvers = {
    first: [
        (tag, regexp)
        for tag, regexp in resolvers
        if tag not in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")
    ]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:int", re.compile(r"^[-+]?(?:0|[1-9][0-9]*)$"), list("-+0123456789")
)
_StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"^(?:[-+]?(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|[-+]?[0-9]+[eE][-+]?[0-9]+"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
    list("-+0123456789."),
)


if getattr(yaml, "__with_libyaml__", False):

    class _PresetLoader(_Strict, yaml.CSafeLoader):
        """The shipped presets' loader: :class:`_StrictLoader`'s constructors and number rules on libyaml's C
        parser (about 2.5 ms less per preset than the pure-Python one). Only for the shipped files, which need no
        protection from hostile input: its parser resolves aliases instead of refusing them, and
        tests/sources/test_parsing.py checks that every preset reads to the same values of the same types with
        both loaders (and so holds no anchor or alias, which the strict loader refuses)."""

    _PresetLoader.yaml_constructors = _StrictLoader.yaml_constructors
    _PresetLoader.yaml_implicit_resolvers = _StrictLoader.yaml_implicit_resolvers
    PRESET_LOADER: type[Any] = _PresetLoader
else:  # pragma: no cover - PyYAML built without libyaml
    PRESET_LOADER = _StrictLoader


MAX_SCALAR_CHARS = 1000  # a --set value longer than this is no number or name: kept as text, never parsed


def parse_scalar(text: str) -> Any:
    """One ``--set`` value read with the same number rules as config files (``16`` int, ``true`` bool); a
    refused number comes back as a :class:`RefusedNumber`, a value over ``MAX_SCALAR_CHARS`` as the text."""
    if len(text) > MAX_SCALAR_CHARS:
        return _int_scalar(text) if re.fullmatch(r"\s*[-+]?[0-9]+\s*", text) else text
    return yaml.load(text, Loader=_StrictLoader)


def _json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json.loads hook: refuse duplicate keys (json keeps the last silently)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def parse_mapping(text: str, path: Path, shipped: bool = False) -> dict[str, Any]:
    """Parse YAML (or JSON, by suffix) into a mapping; syntax errors give the line and column. ``shipped``: a
    file shipped with embedcalc (a preset), read by :data:`PRESET_LOADER`.

    Also refused with a message: nesting too deep for the parser (RecursionError), numbers with too many digits
    or not finite (each with its key, see :func:`refused_numbers`) — none belongs in a model config.
    """
    if path.suffix.lower() != ".json" and len(text) > MAX_YAML_CHARS:
        message = (f"is {len(text):,} characters of YAML; a YAML model config is at most {MAX_YAML_CHARS:,} "
                   f"(JSON, named .json, up to {MAX_CONFIG_BYTES:,} bytes)")  # fmt: skip
        raise file_error(path, message, "file_too_big")
    try:
        data = _parse(text, path, PRESET_LOADER if shipped else _StrictLoader)
    except RecursionError:
        raise file_error(path, "is nested too deeply to be a model config", "malformed_yaml") from None
    except ValueError as exc:  # duplicate JSON key; a YAML !!int tag on a non-number
        raise file_error(path, f"cannot be read: {exc}", "malformed_value") from None
    refused = refused_numbers(data) if isinstance(data, dict) else []
    if refused and isinstance(data, dict) and "model_type" in data:
        from embedcalc.sources.hf.unsupported import keep_element_wise_numbers

        refused = keep_element_wise_numbers(data, refused)
    if refused:
        problems = [Problem(where, number.reason, number.code) for where, number in refused]
        if isinstance(data, dict) and "model_type" in data:  # a Hugging Face file: its family comes first
            from embedcalc.sources.hf.unsupported import family_before_numbers

            family_error = family_before_numbers(data, str(path), problems)
            if family_error is not None:
                raise family_error
        lines = "\n".join(f"  {p.path}: {p.message}" for p in problems)
        noun = "value" if len(problems) == 1 else "values"
        raise ConfigError(f"{path}: {len(problems)} {noun} refused\n{lines}", problems, problems[0].code)
    if data is None:
        raise file_error(path, "is empty (only comments or blank lines); expected a mapping of config keys "
                    "(see `embedcalc presets show bert-base`)", "file_empty")  # fmt: skip
    if not isinstance(data, dict):
        kind = "a list" if isinstance(data, list) else f"a single value ({data!r:.40})"
        raise file_error(
            path, f"holds {kind}; expected a mapping of config keys such as `embed_dim: 768`", "not_a_mapping"
        )
    return data


def _parse(text: str, path: Path, loader: type[Any]) -> Any:
    if path.suffix.lower() == ".json":
        try:
            return json.loads(
                text,
                object_pairs_hook=_json_object,
                parse_int=_int_scalar,
                parse_float=lambda t: _float_scalar(float(t), t),
                parse_constant=lambda t: _float_scalar(float(t), t),
            )
        except json.JSONDecodeError as exc:
            raise file_error(
                path, f"malformed JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}", "malformed_json"
            ) from exc
    try:
        return yaml.load(text, Loader=loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise file_error(path, f"malformed YAML{where}: {exc.problem}", "malformed_yaml") from exc
    except yaml.YAMLError as exc:
        raise file_error(path, f"malformed YAML: {exc}", "malformed_yaml") from exc


MAX_REFUSED_LISTED = 20  # refused numbers named one by one; a file with more gets the first ones


def refused_numbers(data: Any, limit: int = MAX_REFUSED_LISTED) -> list[tuple[str, RefusedNumber]]:
    """(key path, refused number) for the first ``limit`` refused numbers anywhere in parsed ``data``."""
    out: list[tuple[str, RefusedNumber]] = []
    for where, value in _leaves(data):
        if isinstance(value, RefusedNumber):
            out.append((where, value))
            if len(out) >= limit:
                break
    return out


def _leaves(data: Any) -> Iterator[tuple[str, Any]]:
    """Every (path, scalar) of nested mappings and lists, iteratively (no recursion limit to hit)."""
    stack: list[tuple[str, Any]] = [("", data)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, dict):
            stack += [(f"{where}.{k}" if where else str(k), v) for k, v in reversed(value.items())]
        elif isinstance(value, list):
            stack += [(f"{where}[{i}]", v) for i, v in reversed(list(enumerate(value)))]
        else:
            yield where or "(value)", value


def oversized_ints(data: Any, limit: int = MAX_REFUSED_LISTED) -> list[tuple[str, int]]:
    """(key path, value) of integers anywhere in ``data`` with ``abs(value) >= 10**MAX_INT_DIGITS``."""
    out: list[tuple[str, int]] = []
    for where, value in _leaves(data):
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= INT_BOUND:
            out.append((where, value))
            if len(out) >= limit:
                break
    return out


_PARSED: dict[tuple[str, int, int, int, int], dict[str, Any]] = {}
_PARSED_KEEP = 8


def load_mapping(path: Path, shipped: bool = False) -> dict[str, Any]:
    """Read and parse a config file into a mapping (``shipped``: see :func:`parse_mapping`).

    A file parsed before and unchanged since (same inode, size and modification time) is not parsed again:
    ``check --suggest`` validates a dozen candidates against one file, and each parse of hostile YAML costs up to
    seconds. Callers get their own copy.
    """
    try:
        info = os.stat(path)
        key: tuple[str, int, int, int, int] | None = (
            str(path), info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns
        )  # fmt: skip
    except (OSError, ValueError):
        key = None  # read_text reports it
    if key is not None and key in _PARSED and stat.S_ISREG(info.st_mode):
        return copy.deepcopy(_PARSED[key])
    data = parse_mapping(read_text(path), path, shipped)
    if key is not None:
        if len(_PARSED) >= _PARSED_KEEP:
            _PARSED.pop(next(iter(_PARSED)))
        _PARSED[key] = copy.deepcopy(data)
    return data
