"""The sweep's input: TARGET read and ``--set`` applied without validating (a swept axis may repair or break the
config). File and preset I/O belong to the CLI side (DESIGN.md §7: ``analysis/`` does no file I/O); the grid takes
the resulting :class:`embedcalc.analysis.sweep.SweepBase`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from embedcalc.config.loading import apply_overrides, canonical_mapping, resolve_target
from embedcalc.errors import ConfigError

if TYPE_CHECKING:  # numpy loads with the sweep itself, not with `embedcalc --help`
    from embedcalc.analysis.sweep import SweepBase


def load_base(target: str, overrides: Sequence[str] = ()) -> SweepBase:
    """Resolve TARGET (preset, file, hub id) and apply ``--set``; problems no axis can repair are raised here."""
    from embedcalc.analysis.sweep import SweepBase

    raw, source, path = resolve_target(target)
    origin = target if source == "preset" else str(path)
    data, user_keys, problems, _ = canonical_mapping(raw, origin, path)
    problems += apply_overrides(data, user_keys, list(overrides))
    if problems:
        lines = "\n".join(f"  {p.path}: {p.message}" for p in problems)
        raise ConfigError(f"{origin}: {len(problems)} problem{'s' * (len(problems) > 1)}\n{lines}", problems)
    if source == "preset" and "name" not in data:
        data["name"] = target
    return SweepBase(target=target, data=data, user_keys=user_keys, origin=origin)
