"""The bounded integer types of the schema's fields, in one place: strict (a YAML ``2.0`` or ``true`` is not an
integer) and bounded below. The upper bound on every integer read (:data:`embedcalc.config.limits.INT_BOUND`) is
checked where numbers are parsed, before validation."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

PositiveInt = Annotated[int, Field(strict=True, gt=0)]
NonNegativeInt = Annotated[int, Field(strict=True, ge=0)]
