"""The workload of an API call: a :class:`~embedcalc.analysis.workload.Workload` with keyword fields applied, and
the usage error (exit 2) for an argument no call takes. Bounds are the Workload's own (checked when it is built)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields, replace
from typing import Any, Literal, get_args, get_origin, get_type_hints

from embedcalc.analysis.workload import Workload, parallelism_from
from embedcalc.config.dtypes import DtypeError, canonical_dtype
from embedcalc.errors import EmbedcalcError, ExitCode, Problem

__all__ = ["usage", "workload_of"]

# the fields whose values are a fixed set of choices (dtype, mode, attention, ...), read from Workload's own types
_CHOICES = {
    name: get_args(hint) for name, hint in get_type_hints(Workload).items() if get_origin(hint) is Literal
}


def workload_of(base: Workload | None, overrides: Mapping[str, Any]) -> Workload:
    """``base`` (default: the CLI's defaults) with ``overrides`` applied; ``parallel`` may be a mapping."""
    names = {f.name for f in fields(Workload)}
    unknown = sorted(set(overrides) - names)
    if unknown:
        raise usage(f"unknown workload field {unknown[0]!r}; fields: {', '.join(sorted(names))}", unknown[0])
    if base is not None and not isinstance(base, Workload):
        message = f"workload must be a Workload, got {type(base).__name__}; or pass its fields as keywords"
        raise usage(message, "workload")
    values = dict(overrides)
    if "parallel" in values:  # a Parallelism or a mapping of its fields; anything else names the field
        values["parallel"] = parallelism_from(values["parallel"])
    if "dtype" in values:  # a short name or an alias (dtype="bfloat16" is dtype="bf16"), chosen by the caller
        try:
            values["dtype"] = canonical_dtype(values["dtype"])
        except DtypeError as exc:
            raise usage(f"dtype: {exc}", "dtype") from None
        values.setdefault("dtype_source", "flag")
    for name, value in values.items():
        allowed = _CHOICES.get(name)
        if allowed is not None and value not in allowed:
            raise usage(f"{name} {value!r} is not one of {', '.join(map(str, allowed))}", name)
    return replace(base, **values) if base is not None else Workload(**values)


def usage(message: str, path: str) -> EmbedcalcError:
    """A bad argument (exit 2), ``path`` naming it."""
    return EmbedcalcError(message, ExitCode.USAGE, [Problem(path, message, "bad_argument")], "bad_argument")
