"""Reading config files safely: size, encoding, YAML/JSON syntax, anchors and duplicate keys.

Every failure becomes a :class:`~embedcalc.errors.ConfigError` naming the file; nothing here raises a bare
exception for bad input.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

from embedcalc.errors import ConfigError, Problem

MAX_CONFIG_BYTES = 1 << 20
_LONG_INT = re.compile(
    r"(?:[\"']?(?P<key>[A-Za-z_][\w]*)[\"']?\s*:\s*)?(?P<digits>[0-9]{1000,})"
)  # a model config is a few hundred bytes; a HF config.json a few KiB


class _StrictLoader(yaml.SafeLoader):
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

    def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, str) and key in seen:
                raise yaml.MarkedYAMLError(problem=f"duplicate key {key!r}", problem_mark=key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


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


def parse_scalar(text: str) -> Any:
    """One ``--set`` value read with the same number rules as config files (``16`` int, ``true`` bool)."""
    return yaml.load(text, Loader=_StrictLoader)


def _fail(path: Path, message: str, code: str) -> ConfigError:
    return ConfigError(f"{path}: {message}", [Problem(str(path), message, code)], code)


def read_text(path: Path) -> str:
    """The file's text, or a ConfigError for a missing file, a directory, a binary or oversized file."""
    if not path.exists():
        raise _fail(path, "no such file (and not a preset name; see `embedcalc presets`)", "file_missing")
    if path.is_dir():
        raise _fail(path, "is a directory, not a config file", "file_is_directory")
    try:
        size = path.stat().st_size
        if size > MAX_CONFIG_BYTES:
            raise _fail(
                path, f"is {size:,} bytes; a model config is at most {MAX_CONFIG_BYTES:,}", "file_too_big"
            )
        data = path.read_bytes()
    except OSError as exc:
        raise _fail(path, f"cannot be read: {exc.strerror or exc}", "file_unreadable") from exc
    if b"\x00" in data:
        raise _fail(path, "is a binary file, not YAML or JSON text", "file_binary")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise _fail(
            path, f"is not UTF-8 text (byte {exc.start}); expected YAML or JSON", "file_binary"
        ) from exc
    if not text.strip():
        raise _fail(
            path,
            "is empty; expected a mapping of config keys (see `embedcalc presets show bert-base`)",
            "file_empty",
        )
    return text


def _json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json.loads hook: refuse duplicate keys (json keeps the last silently)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def parse_mapping(text: str, path: Path) -> dict[str, Any]:
    """Parse YAML (or JSON, by suffix) into a mapping; syntax errors give the line and column.

    Also refused with a message: nesting too deep for the parser (RecursionError) and integer literals longer
    than Python's int-parsing limit (ValueError) — neither belongs in a model config.
    """
    try:
        data = _parse(text, path)
    except RecursionError:
        raise _fail(path, "is nested too deeply to be a model config", "malformed_yaml") from None
    except ValueError as exc:  # int literal over sys.get_int_max_str_digits(), duplicate JSON key
        long_int = _LONG_INT.search(text)
        if long_int and "digits" in str(exc):
            key = long_int["key"] or "a value"
            message = (f"{key}: an integer of {len(long_int['digits']):,} digits is more than Python parses "
                       f"({sys.get_int_max_str_digits():,}) and more than any model size needs")  # fmt: skip
            raise _fail(path, message, "int_too_long") from None
        raise _fail(path, f"cannot be read: {exc}", "malformed_value") from None
    if data is None:
        raise _fail(path, "is empty (only comments or blank lines); expected a mapping of config keys "
                    "(see `embedcalc presets show bert-base`)", "file_empty")  # fmt: skip
    if not isinstance(data, dict):
        kind = "a list" if isinstance(data, list) else f"a single value ({data!r:.40})"
        raise _fail(
            path, f"holds {kind}; expected a mapping of config keys such as `embed_dim: 768`", "not_a_mapping"
        )
    return data


def _parse(text: str, path: Path) -> Any:
    if path.suffix.lower() == ".json":
        try:
            return json.loads(text, object_pairs_hook=_json_object)
        except json.JSONDecodeError as exc:
            raise _fail(
                path, f"malformed JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}", "malformed_json"
            ) from exc
    try:
        return yaml.load(text, Loader=_StrictLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise _fail(path, f"malformed YAML{where}: {exc.problem}", "malformed_yaml") from exc
    except yaml.YAMLError as exc:
        raise _fail(path, f"malformed YAML: {exc}", "malformed_yaml") from exc


def load_mapping(path: Path) -> dict[str, Any]:
    """Read and parse a config file into a mapping."""
    return parse_mapping(read_text(path), path)
