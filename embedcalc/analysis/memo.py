"""A store of the analysis' device-independent work, for a caller that evaluates one model on many devices.

A phase's traffic (FLOPs and bytes by component on one device of the layout, :mod:`embedcalc.analysis.roofline`),
the weights it reads, its extra terms' volumes (:func:`~embedcalc.analysis.time.expected.inference_volumes`) and
a workload's memory estimate (:func:`~embedcalc.analysis.memory.serving.serving_stages`' input) are functions of the
config, the workload (its batch, lengths, dtype and layout) and the KV dtype only: the device's peaks, bandwidth,
achieved fractions and memory merely turn them into seconds and into what fits. ``plan``'s serving search
evaluates the same workloads on every device of the catalogue (the same TP degrees, the same batches of its
decode-step grid), so a :class:`Memo` it passes in computes each of them once. The values are the objects the
computation returns: memoizing changes no number.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from embedcalc.config.resolved import ResolvedShape

T = TypeVar("T")


@dataclass(eq=False)
class Memo:
    """Values of pure functions of (config, workload, ...), each computed once.

    Key: the config's identity (the config is held, so that the identity cannot be reused while the memo lives;
    configs are frozen) and the caller's key — the workload (a frozen, hashable dataclass), what is computed and
    its other inputs. Bound: one entry per distinct key asked; ``plan``'s search holds one memo for one call: its
    layouts' workloads × (its step grid's batches + the prefill + the memory estimates), a few hundred entries. A
    cached dict is returned as a copy (a caller may add to its own)."""

    configs: dict[int, ResolvedShape] = field(default_factory=dict)
    store: dict[tuple[Hashable, ...], Any] = field(default_factory=dict)

    def get(self, config: ResolvedShape, key: tuple[Hashable, ...], compute: Callable[[], T]) -> T:
        """``compute()`` for ``config`` and ``key``, computed on the first ask only."""
        self.configs.setdefault(id(config), config)
        full = (id(config), *key)
        if full not in self.store:
            self.store[full] = compute()
        value = self.store[full]
        return dict(value) if isinstance(value, dict) else value  # type: ignore[return-value]


def kept(memo: Memo | None, config: ResolvedShape, key: tuple[Hashable, ...], compute: Callable[[], T]) -> T:
    """``compute()``, or ``memo``'s value for ``config`` and ``key`` where a memo is given."""
    return compute() if memo is None else memo.get(config, key, compute)
