"""The package's exit codes, its one error class, the problem records errors carry, and the refusal of a result
holding inf or nan (:func:`require_finite`).

Library code raises :class:`EmbedcalcError`; only ``cli/`` turns it into a message on stderr and an exit code
(DESIGN.md §6).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any


class ExitCode(IntEnum):
    """Process exit codes, DESIGN.md §6."""

    OK = 0
    RUNTIME = 1
    USAGE = 2
    INVALID_CONFIG = 3
    ENVIRONMENT = 4
    OVER_BUDGET = 5
    INTERRUPTED = 130


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an input: where (``path``), what and how to fix it (``message``), a stable ``code``, and
    for a refusal another reader may take over, what is wrong without the advice (``reason``): what that reader's
    note quotes when it counts the input after all."""

    path: str
    message: str
    code: str
    reason: str = ""  # empty: ``message`` says it without advice

    def as_dict(self) -> dict[str, str]:
        return {"path": self.path, "message": self.message, "code": self.code}


@dataclass
class EmbedcalcError(Exception):
    """An error the user can act on; ``exit_code`` says which kind (DESIGN.md §6)."""

    message: str
    exit_code: ExitCode = ExitCode.RUNTIME
    problems: list[Problem] = field(default_factory=list)
    code: str = "error"
    json_emitted: bool = False  # the CLI already wrote the JSON envelope for this error
    reported: bool = (
        False  # the command already said everything (its tables, its lines): only the exit code is left
    )

    def __post_init__(self) -> None:
        super().__init__(self.message)

    def __str__(self) -> str:
        return self.message


class ConfigError(EmbedcalcError):
    """The config (file, preset or ``--set`` override) is invalid: exit 3."""

    def __init__(self, message: str, problems: list[Problem] | None = None, code: str = "invalid_config"):
        super().__init__(message, ExitCode.INVALID_CONFIG, problems or [], code)


class WorkloadError(ConfigError, ValueError):
    """The workload cannot run on this config or in this format (a learned position table shorter than --seq-len,
    int8 weights in training): exit 3, like an invalid config; a ``ValueError`` for Python callers."""


def outcome(exit_code: ExitCode, message: str, code: str) -> EmbedcalcError:
    """A command's result that is not success, already reported in full (``check`` on an invalid config, ``verify``
    with a difference): the error edge turns it into its exit code and prints nothing more."""
    return EmbedcalcError(message, exit_code, [], code, json_emitted=True, reported=True)


class UnsupportedEnvironmentError(EmbedcalcError):
    """The environment cannot do what was asked (no torch, no CUDA, not enough memory): exit 4."""

    def __init__(self, message: str, code: str = "environment"):
        super().__init__(message, ExitCode.ENVIRONMENT, [], code)


def _non_finite(value: Any, path: str) -> str | None:
    """The path of the first float in ``value`` (nested dicts and lists) that is inf or nan, or None."""
    if isinstance(value, float):
        return None if math.isfinite(value) else path
    items = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list | tuple)
        else ()
    )
    for key, item in items:
        found = _non_finite(item, f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}".lstrip("."))
        if found is not None:
            return found
    return None


def require_finite(data: Any, what: str = "output") -> None:
    """Refuse (exit 3, naming the quantity) a result holding inf or nan: JSON has no such numbers, and a time or
    cost that overflows a float comes from a workload beyond what the time model can express."""
    path = _non_finite(data, "")
    if path is not None:
        message = (
            f"{what}: {path or 'the result'} is beyond a float's range (inf or nan) for this workload; use smaller "
            "sizes (--train-tokens, --devices, --batch-size, --seq-len) or a faster device"
        )
        raise WorkloadError(message, [Problem(path, message, "non_finite_result")], "non_finite_result")
