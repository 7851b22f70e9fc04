"""The static KV cache of generation: every tensor allocated once, before the prompt, in the analytic layout.

Per decoder layer (docs/layers.md, analysis/memory/inference.py): standard attention holds one K and one V tensor of
shape (B, kv_heads, L, head_dim); multi-head latent attention one tensor (B, L, kv_lora_rank + qk_rope_head_dim), the
normalised compressed latent followed by the rotated rope key (DeepSeek-V2 §2.1.2), and a sparse layer with an
indexer its keys too, (B, L, index_head_dim) (transformers' ``DynamicIndexedLayer``). L is the tokens the sequence
reaches (prompt + generated), capped at the layer's window or chunk; a capped layer is a rolling buffer (Mistral,
Jiang et al. 2023, §2): position p lives in slot p mod L. An encoder-decoder's decoder layer also holds the
cross-attention K and V of the source, (B, kv_heads, S, head_dim), written once at prefill. So the sum of
numel × element size over :meth:`KVCache.tensors` is the analytic ``kv_cache_bytes`` of the same workload. A
recurrent mixer's layer (Mamba-2, :mod:`embedcalc.modeling.ssm`) holds a fixed-size state instead, whose bytes
(:attr:`KVCache.state_nbytes`) are the analytic recurrent state.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from embedcalc.modeling.ssm import MixerState


@dataclass
class LayerCache:
    """One self-attention layer's cache: ``keys`` (B, h_kv, L, d) and ``values``, or MLA's ``keys`` only
    (B, L, r_kv + rope, ``values`` None). ``limit`` is the window or chunk that caps L, if any."""

    keys: Tensor
    values: Tensor | None
    total: int  # tokens the sequence reaches: prompt + generated
    limit: int | None = None
    index_keys: Tensor | None = None  # a sparse layer's indexer keys (B, L, index_head_dim)

    @property
    def latent(self) -> bool:
        return self.values is None

    @property
    def size(self) -> int:
        """Slots per sequence (L)."""
        return self.keys.shape[1 if self.latent else 2]

    @property
    def rolling(self) -> bool:
        """Whether positions wrap around (the sequence outgrows the window or chunk)."""
        return self.size < self.total

    def write(self, keys: Tensor, values: Tensor | None, position: int) -> None:
        """Store the keys (and values) of tokens ``position`` .. ``position + T - 1``; a rolling buffer keeps the
        last L of them. Standard: (B, h_kv, T, d) each; latent: (B, T, r_kv + rope)."""
        dim = 1 if self.latent else 2
        length = keys.shape[dim]
        if position + length > self.total:
            raise ValueError(
                f"the cache holds {self.total} tokens; writing {length} at {position} overflows it"
            )
        if not self.rolling:
            self.keys.narrow(dim, position, length).copy_(keys)
            if self.values is not None and values is not None:
                self.values.narrow(dim, position, length).copy_(values)
            return
        keep = min(length, self.size)
        # (keep,)
        slots = torch.arange(position + length - keep, position + length, device=keys.device) % self.size
        self.keys.index_copy_(dim, slots, keys.narrow(dim, length - keep, keep))
        if self.values is not None and values is not None:
            self.values.index_copy_(dim, slots, values.narrow(dim, length - keep, keep))

    def write_index(self, keys: Tensor, position: int) -> None:
        """Store the indexer keys (B, T, D_I) of tokens ``position`` on (a sparse layer never rolls)."""
        if self.index_keys is None:
            raise ValueError("this layer's cache holds no indexer keys")
        self.index_keys.narrow(1, position, keys.shape[1]).copy_(keys)

    def read_index(self, end: int) -> Tensor:
        """The indexer keys of the filled slots once ``end`` tokens are written: (B, S, D_I)."""
        if self.index_keys is None:
            raise ValueError("this layer's cache holds no indexer keys")
        return self.index_keys.narrow(1, 0, self.filled(end))

    def filled(self, end: int) -> int:
        """Slots holding a token once ``end`` tokens have been written."""
        return min(end, self.size)

    def read(self, end: int) -> tuple[Tensor, Tensor | None]:
        """Views of the filled slots once ``end`` tokens are written: (B, h_kv, S, d) each, or (B, S, r_kv + rope)."""
        dim = 1 if self.latent else 2
        count = self.filled(end)
        keys = self.keys.narrow(dim, 0, count)
        values = self.values.narrow(dim, 0, count) if self.values is not None else None
        return keys, values

    def key_positions(self, end: int, device: torch.device) -> Tensor:
        """(S,) the absolute position each filled slot holds once ``end`` tokens are written."""
        slots = torch.arange(self.filled(end), device=device)  # (S,)
        if not self.rolling:
            return slots
        last = end - 1
        return last - (last - slots) % self.size  # the latest position p <= last with p mod L == slot


@dataclass
class CrossCache:
    """The cross-attention K and V of the source, (B, h_kv, S, d) each, computed once at prefill."""

    keys: Tensor
    values: Tensor
    ready: bool = False


@dataclass
class BlockCache:
    """What one decoder layer caches: its self-attention (None for a recurrent mixer or none) and, in an
    encoder-decoder, its cross-attention; a recurrent mixer's fixed-size ``state`` instead of K and V."""

    self_attention: LayerCache | None
    cross_attention: CrossCache | None = None
    state: MixerState | None = None


@dataclass
class KVCache:
    """The decoder's cache, one :class:`BlockCache` per layer (a shared-weights stack still caches every layer),
    and ``position``, the tokens already written (the next token's position)."""

    layers: list[BlockCache]
    position: int = 0

    def tensors(self) -> list[Tensor]:
        """Every cache tensor, once each."""
        out: list[Tensor] = []
        for block in self.layers:
            attn = block.self_attention
            if attn is not None:
                out += [attn.keys] if attn.values is None else [attn.keys, attn.values]
                out += [attn.index_keys] if attn.index_keys is not None else []
            if block.cross_attention is not None:
                out += [block.cross_attention.keys, block.cross_attention.values]
        return out

    @property
    def nbytes(self) -> int:
        """Bytes the KV cache tensors hold: the sum of numel × element size."""
        return sum(t.numel() * t.element_size() for t in self.tensors())

    @property
    def state_nbytes(self) -> int:
        """Bytes the recurrent states hold (constant in the sequence length): the sum of numel × element size."""
        return sum(t.numel() * t.element_size() for b in self.layers if b.state for t in b.state.tensors())

    def reset(self) -> None:
        """Start a new sequence in the same storage (KV slots are not zeroed: reads never pass what was written;
        recurrent states are, as a new sequence starts from the zero state)."""
        self.position = 0
        for block in self.layers:
            if block.state is not None:
                block.state.reset()
            if block.cross_attention is not None:
                block.cross_attention.ready = False
