"""Plain frozen records of the config schema, for the shipped presets' path (issue 22, start-up), and the typing
bases the schema's pydantic models share with them.

Defining the first pydantic model class costs a process tens of ms (pydantic's model machinery is imported on it),
more than all of ``analyze PRESET``'s own work. A shipped preset is trusted data: every one is validated by the
schema in the tests, and a test proves that the record built from it equals the validated model (its JSON dump,
its resolved blocks). So ``analyze PRESET`` builds records instead of models and never imports pydantic's model
machinery; user files, ``--set`` and every other command keep the schema.

:mod:`embedcalc.config.records` is generated from the schema by ``scripts/config_records.py`` (a test checks it
is current): one ``...Fields`` typing base per model (the fields as read-only properties, for mypy only) and one
``...Record`` class (the field names, their defaults, how nested values are built and dumped). The mechanism is
here: :class:`Record` keeps which fields were set and dumps the way pydantic's ``model_dump`` does for these
models (fields in declaration order, nested records dumped the same way, the spec fields of a config dumped with
the fields they set only, as :class:`~embedcalc.config.rules.layers.LayerRules` serialises them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar


class RecordField:
    """One field of a record: its default (``factory`` for a mutable default, like pydantic's default_factory)."""

    __slots__ = ("default", "factory")

    def __init__(self, default: Any = None, factory: type | None = None) -> None:
        self.default = default
        self.factory = factory

    def make_default(self) -> Any:
        return self.factory() if self.factory is not None else self.default


class SpecFields:
    """What the schema's models and the records both offer beyond their fields (typing only)."""

    if TYPE_CHECKING:

        def __init__(self, **values: Any) -> None: ...

        @property
        def model_fields_set(self) -> set[str]: ...


class Record:
    """A frozen record of one schema model: the fields in ``model_fields`` (name -> :class:`RecordField`), nested
    values built by the record classes in ``nested`` (name -> (``"one"``, ``"dict"`` or ``"list"``, class)).

    Built from trusted data only (:meth:`model_validate`): it checks nothing, so a value the schema would refuse
    is kept as it is; the schema is what the presets are checked against."""

    model_fields: ClassVar[dict[str, RecordField]] = {}
    nested: ClassVar[dict[str, tuple[str, type[Record]]]] = {}
    set_only: ClassVar[frozenset[str]] = frozenset()  # spec fields dumped with the fields they set only
    schema_model: ClassVar[str] = ""  # the schema's model this record mirrors, "module.Class"

    def __init__(self, **values: Any) -> None:
        fields = type(self).model_fields
        unknown = [name for name in values if name not in fields]
        if unknown:
            raise TypeError(f"{type(self).__name__} has no field {unknown[0]!r}")
        state = self.__dict__
        for name, field in fields.items():
            state[name] = values[name] if name in values else field.make_default()
        state["_fields_set"] = frozenset(values)

    @classmethod
    def model_validate(cls, data: Mapping[str, Any]) -> Any:
        """The record of ``data`` (nested mappings become their records); trusted data, nothing is checked."""
        values = dict(data)
        for name, (shape, record) in cls.nested.items():
            value = values.get(name)
            if value is None or isinstance(value, Record):
                continue
            if shape == "one":
                values[name] = record.model_validate(value)
            elif shape == "dict":
                values[name] = {key: _record_of(record, item) for key, item in value.items()}
            else:
                values[name] = [_record_of(record, item) for item in value]
        return cls(**values)

    @property
    def model_fields_set(self) -> set[str]:
        return set(self.__dict__["_fields_set"])

    def model_dump(self, *, mode: str = "python", exclude_unset: bool = False) -> dict[str, Any]:
        """The fields as pydantic's ``model_dump`` gives them for these models (``mode`` json or python)."""
        names = self.__dict__["_fields_set"]
        out: dict[str, Any] = {}
        for name in type(self).model_fields:
            if exclude_unset and name not in names:
                continue
            out[name] = _dump(getattr(self, name), mode, exclude_unset or name in self.set_only)
        return out

    def model_copy(self, *, update: Mapping[str, Any] | None = None) -> Any:
        """A copy with ``update``'s fields replaced (and counted as set), as pydantic's ``model_copy``; values
        derived from the fields (cached properties) are not copied."""
        update = dict(update or {})
        copy = object.__new__(type(self))
        state = copy.__dict__
        state.update({name: getattr(self, name) for name in type(self).model_fields})
        state.update(update)
        state["_fields_set"] = self.__dict__["_fields_set"] | update.keys()
        return copy

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen; {name!r} cannot be set")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen; {name!r} cannot be deleted")

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in type(self).model_fields)

    def __eq__(self, other: object) -> bool:
        """Equal to a record of the same class or to the schema's model it mirrors (``schema_model``) with the same
        field values, as two of those models are equal (pydantic compares the fields, not which were set)."""
        if type(other) is type(self):
            return self._values() == other._values()
        if f"{type(other).__module__}.{type(other).__qualname__}" == self.schema_model:
            return self._values() == tuple(getattr(other, name) for name in type(self).model_fields)
        return NotImplemented

    def __hash__(
        self,
    ) -> int:  # (a record and the model it equals may hash apart: configs are never dict keys)
        return hash((type(self), self._values()))

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in type(self).model_fields)
        return f"{type(self).__name__}({shown})"


def _record_of(record: type[Record], value: Any) -> Any:
    return value if isinstance(value, Record) else record.model_validate(value)


def _dump(value: Any, mode: str, exclude_unset: bool) -> Any:
    if isinstance(value, Record):
        return value.model_dump(mode=mode, exclude_unset=exclude_unset)
    if isinstance(value, dict):
        return {key: _dump(item, mode, exclude_unset) for key, item in value.items()}
    if isinstance(value, list | tuple):
        items = [_dump(item, mode, exclude_unset) for item in value]
        return items if mode == "json" or isinstance(value, list) else tuple(items)
    return value
