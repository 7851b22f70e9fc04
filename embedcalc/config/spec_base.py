"""What the pydantic specs of the layer model (config/block_spec.py, config/ffn_spec.py) share: their model settings
and the refusal of a field that belongs to another kind (their integer types are :mod:`embedcalc.config.bounded`'s)."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict
from pydantic_core import PydanticCustomError

FROZEN = ConfigDict(extra="forbid", frozen=True, strict=True)


def refuse_other_kind(spec: Any, names: tuple[str, ...], where: str, kind: str) -> None:
    """Refuse the first of ``names`` that ``spec`` sets to other than its default while its kind is not ``kind``."""
    for name in names:
        value, default = getattr(spec, name), type(spec).model_fields[name].default
        if value != default:
            shown = str(value).lower() if isinstance(value, bool) else str(value)
            raise PydanticCustomError(
                "field_of_other_kind",
                "{where}.{name} ({value}) applies to kind {kind} only, but kind is {actual}, so it would be ignored: "
                "add kind: {kind} to {where}, or remove {name}",
                {"where": where, "name": name, "value": shown, "kind": kind, "actual": spec.kind},
            )
