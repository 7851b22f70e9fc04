"""An ordered, flat breakdown of a count by component, keyed by slash paths (``encoder/attention/qkv``)."""

from __future__ import annotations

from collections.abc import Iterator


class Breakdown:
    """Leaf counts by slash path, in insertion order; ``total`` is their sum. Zero entries are dropped."""

    def __init__(self) -> None:
        self._items: dict[str, int] = {}

    def add(self, key: str, value: int) -> None:
        if value:
            self._items[key] = self._items.get(key, 0) + value

    @property
    def total(self) -> int:
        return sum(self._items.values())

    def items(self) -> Iterator[tuple[str, int]]:
        return iter(self._items.items())

    def as_dict(self) -> dict[str, int]:
        return dict(self._items)

    def group(self, depth: int) -> dict[str, int]:
        """Subtotals over the first ``depth`` path segments (depth 1: ``encoder``, ``embedding``, ...)."""
        out: dict[str, int] = {}
        for key, value in self._items.items():
            prefix = "/".join(key.split("/")[:depth])
            out[prefix] = out.get(prefix, 0) + value
        return out

    def __getitem__(self, key: str) -> int:
        return self._items[key]

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __len__(self) -> int:
        return len(self._items)
