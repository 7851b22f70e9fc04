"""The JSON output contract of DESIGN.md §5, written out once for the tests (from the design, not read from
embedcalc's own constants, so that a renamed or dropped key fails them). Import as
``from json_contract import MEMORY_KEYS`` (tests/ is on ``sys.path``, see tests/paths.py)."""

from __future__ import annotations

# every result's memory object: integers in bytes, zero where the mode has none
MEMORY_KEYS = (
    "weights_bytes",
    "gradients_bytes",
    "optimizer_bytes",
    "activations_bytes",
    "kv_cache_bytes",
    "total_bytes",
)
