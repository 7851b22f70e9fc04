"""The family's own cache after a meta forward, tensor by tensor (the general reader's cache bytes, DESIGN §19).

transformers keeps a model's cache in a ``Cache`` object: ``DynamicCache`` with one layer object per layer
(``DynamicLayer`` keys and values, ``DynamicSlidingWindowLayer``, ``DynamicIndexedLayer`` with a sparse indexer's
keys, ``LinearAttentionLayer`` with a dict of conv and recurrent states), ``EncoderDecoderCache`` holding a self-
and a cross-attention cache; older releases keep per-layer lists (``key_cache``, ``conv_states``) or legacy tuples.
Every floating tensor of at least one dimension it holds is cache; 0-dim counters (``cumulative_length``) and
integer positions are bookkeeping.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["CacheTensor", "cache_tensors"]

# the recurrent state of Mamba-like and linear-attention layers (transformers' LinearAttentionCacheLayerMixin and
# the older MambaCache): constant in the sequence length; every other cached tensor is keys or values
_STATE_ATTRS = ("conv_states", "recurrent_states", "ssm_states", "conv_state", "ssm_state")


@dataclass(frozen=True)
class CacheTensor:
    """One tensor of the family's cache after the forward: its layer, stack (``self`` / ``cross``), what it holds
    (``kv`` or ``state``), the attribute it is held under, its shape and elements."""

    layer: int
    stack: str
    kind: str
    attr: str
    shape: tuple[int, ...]

    @property
    def elements(self) -> int:
        return math.prod(self.shape)


def _tensors(value: Any, attr: str, depth: int = 0) -> Iterator[tuple[str, torch.Tensor]]:
    """Every tensor under ``value`` (lists, tuples, dicts, nested), with the attribute it hangs from."""
    if isinstance(value, torch.Tensor):
        yield attr, value
    elif depth < 3 and isinstance(value, list | tuple):
        for item in value:
            yield from _tensors(item, attr, depth + 1)
    elif depth < 3 and isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item, attr, depth + 1)


def _layer_tensors(layer: Any, index: int, stack: str) -> Iterator[CacheTensor]:
    seen: set[int] = set()
    for attr, value in vars(layer).items():
        for name, t in _tensors(value, attr):
            if id(t) in seen or t.dim() == 0 or not t.is_floating_point():
                continue  # counters (cumulative_length), positions, indices: bookkeeping, not cache
            seen.add(id(t))
            kind = "state" if name in _STATE_ATTRS else "kv"
            yield CacheTensor(index, stack, kind, name, tuple(int(s) for s in t.shape))


def cache_tensors(cache: Any) -> tuple[CacheTensor, ...]:
    """The cache's tensors per layer: ``Cache.layers`` (transformers 4.56+), ``EncoderDecoderCache``'s two caches,
    or the per-layer lists of older cache classes (``key_cache``, ``conv_states``, ...)."""
    if hasattr(cache, "self_attention_cache") and hasattr(cache, "cross_attention_cache"):
        return cache_tensors(cache.self_attention_cache) + tuple(
            CacheTensor(t.layer, "cross", t.kind, t.attr, t.shape)
            for t in cache_tensors(cache.cross_attention_cache)
        )
    layers = getattr(cache, "layers", None)
    if isinstance(layers, list | tuple):
        return tuple(t for i, layer in enumerate(layers) for t in _layer_tensors(layer, i, "self"))
    if isinstance(cache, tuple | list):  # legacy tuples: one (key, value) per layer
        return tuple(
            CacheTensor(i, "self", "kv", "legacy", tuple(int(s) for s in t.shape))
            for i, layer in enumerate(cache)
            for t in (layer if isinstance(layer, tuple | list) else (layer,))
            if isinstance(t, torch.Tensor) and t.is_floating_point()
        )
    out = []
    for attr, value in vars(cache).items():
        if isinstance(value, list | tuple):
            for i, t in enumerate(value):
                if isinstance(t, torch.Tensor) and t.dim() > 0 and t.is_floating_point():
                    kind = "state" if attr in _STATE_ATTRS else "kv"
                    out.append(CacheTensor(i, "self", kind, attr, tuple(int(s) for s in t.shape)))
    return tuple(out)
