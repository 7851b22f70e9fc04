"""Turn pydantic validation errors into :class:`~embedcalc.errors.Problem` records that name the user's key.

pydantic's own wording ("Input should be a valid integer") is replaced by messages that say what was given, what
is expected and how to fix it.
"""

from __future__ import annotations

import difflib
import itertools
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from embedcalc.errors import Problem

if (
    TYPE_CHECKING
):  # pydantic itself loads only when a config is validated (a shipped preset on analyze's path is not)
    from pydantic import ValidationError


def _describe(value: Any) -> str:
    if isinstance(value, bool):
        return f"{value!r} (a boolean)"
    if isinstance(value, str) and len(value) > 60:
        return f"{value[:40]!r}... (a string of {len(value):,} characters)"
    if isinstance(value, str):
        return f"{value!r} (a string)"
    if isinstance(value, float):
        return f"{value!r} (a float)"
    if value is None:
        return "null"
    if isinstance(value, list | dict):
        return f"a {type(value).__name__}"
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:40]}... (a {type(value).__name__})"


def _integer_hint(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return f"; write {int(value)} without the decimal point"
    if isinstance(value, str) and len(value) <= 64 and value.strip().lstrip("+-").isdigit():
        digits = value.strip().lstrip("+-")
        if len(digits) > 1 and digits.startswith("0"):
            return f"; write {int(digits)} (with a leading 0, YAML 1.1 would read it as octal)"
        return f"; write {value.strip()} without quotes"
    if isinstance(value, str) and (
        value.lower().startswith(("0x", "0o", "0b")) or ":" in value or "_" in value
    ):
        return "; write the number in plain decimal digits"
    if isinstance(value, bool):
        return "; booleans are not sizes"
    return ""


def _message(error: Mapping[str, Any], key: str) -> str:
    kind = error["type"]
    value = error.get("input")
    ctx = error.get("ctx") or {}
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return f"{key} must be a positive integer, got {_describe(value)}{_integer_hint(value)}"
    if kind in ("greater_than", "greater_than_equal"):
        bound = ctx.get("gt", ctx.get("ge"))
        word = "greater than" if kind == "greater_than" else "at least"
        return f"{key} must be {word} {bound}, got {_describe(value)}"
    if kind in ("less_than", "less_than_equal"):
        bound = ctx.get("lt", ctx.get("le"))
        word = "less than" if kind == "less_than" else "at most"
        return f"{key} must be {word} {bound}, got {_describe(value)}"
    if kind == "bool_type":
        return f"{key} must be true or false, got {_describe(value)}"
    if kind in ("float_type", "float_parsing"):
        return f"{key} must be a number, got {_describe(value)}"
    if kind in ("string_type",):
        return f"{key} must be a string, got {_describe(value)}"
    if kind == "literal_error":
        expected = ctx.get("expected", "")
        choices = [c.strip().strip("'") for c in str(expected).replace(" or ", ",").split(",") if c.strip()]
        close = (
            difflib.get_close_matches(value, choices, n=1)
            if isinstance(value, str) and len(value) <= 64
            else []
        )
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return f"{key} must be one of {', '.join(choices)}, got {_describe(value)}{hint}"
    if kind == "missing":
        return f"{key} is required"
    if kind == "extra_forbidden":
        field = key.rsplit(".", 1)[-1]
        fields = _nested_fields(tuple(str(part) for part in error.get("loc", ())))
        hint = did_you_mean(field, fields) if fields else ""
        return (f"{key}: {field!r} is not a field here{hint}; `embedcalc schema` lists the fields of every part "
                "of a config")  # fmt: skip
    return f"{key}: {error['msg']}"


def _nested_fields(loc: tuple[str, ...]) -> list[str]:
    """The field names allowed where ``loc`` points inside the layer model (attention, ffn, a block, a run)."""
    from embedcalc.config.block_spec import AttentionSpec, BlockSpec, LayerRun
    from embedcalc.config.ffn_spec import FFNSpec

    inner = loc[:-1]
    if "attention" in inner:
        return list(AttentionSpec.model_fields)
    if "ffn" in inner:
        return list(FFNSpec.model_fields)
    if inner[:1] == ("blocks",) and len(inner) == 2:
        return list(BlockSpec.model_fields)
    if inner[:1] == ("layers",):
        return list(LayerRun.model_fields)
    return []


def problems_from_validation(
    exc: ValidationError, user_keys: Mapping[str, str], prefix: str = ""
) -> list[Problem]:
    """One :class:`Problem` per pydantic error; ``path`` is the key the user wrote (``n_head``, not ``num_heads``)."""
    out = []
    for error in exc.errors():
        loc = error["loc"]
        field = str(loc[0]) if loc else ""
        key = user_keys.get(field, field) + "".join(f".{part}" for part in loc[1:])  # nested: ffn.top_k
        path = prefix + key if key else prefix.rstrip(".") or "(config)"
        text = error["msg"] if error["type"] not in _STANDARD_TYPES else _message(error, key)
        if error["type"] == "value_error" and "error" in error.get("ctx", {}):
            text = str(error["ctx"]["error"])  # a validator's own words, without pydantic's "Value error, "
        out.append(Problem(path=path, message=text, code=str(error["type"])))
    return out


_STANDARD_TYPES = frozenset(
    {
        "int_type",
        "int_parsing",
        "int_from_float",
        "greater_than",
        "greater_than_equal",
        "less_than",
        "less_than_equal",
        "bool_type",
        "float_type",
        "float_parsing",
        "string_type",
        "literal_error",
        "missing",
        "extra_forbidden",
    }
)


# did-you-mean is bounded in work: difflib costs about len(word) x len(choice) per choice, so a word longer than
# any name (no field, alias or preset name comes near 64 characters) gets no suggestion, and at most
# MAX_SUGGESTION_CHOICES names are compared.
MAX_SUGGESTION_WORD = 64
MAX_SUGGESTION_CHOICES = 1000


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest choice, or an empty string (bounded in work, see above)."""
    if len(word) > MAX_SUGGESTION_WORD:
        return ""
    names = list(itertools.islice(choices, MAX_SUGGESTION_CHOICES))
    close = difflib.get_close_matches(word, names, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""
