"""Position encodings without learned tables: sinusoidal, rotary (RoPE, also partial), ALiBi and T5's
relative-position buckets.

Learned position tables are plain ``nn.Embedding`` modules owned by :mod:`embedcalc.modeling.embeddings`; the relative
bias table (``nn.Embedding(buckets, num_heads)``) lives in the first block of each stack. This module holds the
fixed buffers and the functions that compute them, so they can be recomputed after ``Module.to_empty``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def sinusoidal_table(length: int, dim: int, *, device: torch.device | None = None) -> Tensor:
    """The fixed position table of Vaswani et al. 2017, §3.5: PE(pos, 2i) = sin(pos / 10000^(2i/d)), cos at 2i+1.

    Returns a float32 tensor of shape (length, dim); an odd ``dim`` drops the last cosine column.
    """
    half = (dim + 1) // 2
    positions = torch.arange(length, dtype=torch.float32, device=device)[:, None]  # (T, 1)
    # (half,)
    inv_freq = torch.exp(
        torch.arange(half, dtype=torch.float32, device=device) * (-2.0 * math.log(10000.0) / dim)
    )
    angles = positions * inv_freq  # (T, half)
    table = torch.stack((angles.sin(), angles.cos()), dim=-1)  # (T, half, 2): sin at 2i, cos at 2i+1
    return table.reshape(length, 2 * half)[:, :dim]  # (T, d)


class SinusoidalPositions(nn.Module):
    """The sinusoidal table as a non-persistent buffer (not a parameter), extended on the fly past ``max_len``."""

    table: Tensor

    def __init__(self, max_len: int, dim: int) -> None:
        super().__init__()
        self.max_len, self.dim = max_len, dim
        self.register_buffer("table", torch.empty(max_len, dim), persistent=False)
        self.reset_buffers()

    def reset_buffers(self) -> None:
        """(Re)compute the table in place, e.g. after ``to_empty`` left the buffer uninitialised."""
        if self.table.device.type == "meta":
            return
        with torch.no_grad():
            self.table.copy_(sinusoidal_table(self.max_len, self.dim, device=self.table.device))

    def forward(self, length: int) -> Tensor:
        if length <= self.max_len:
            return self.table[:length]  # (T, d)
        return sinusoidal_table(length, self.dim, device=self.table.device).to(self.table.dtype)  # (T, d)


def rotary_tables(
    length: int, head_dim: int, base: float = 10000.0, *, device: torch.device | None = None,
    log_scale: Tensor | None = None,
) -> tuple[Tensor, Tensor]:  # fmt: skip
    """cos and sin of RoPE's angles (Su et al. 2021, "RoFormer", §3.4), each (length, head_dim).

    Channel pairs are (i, i + head_dim / 2), the "rotate half" layout of GPT-NeoX and Hugging Face's LLaMA.
    ``log_scale`` (head_dim / 2): each frequency times exp of it (Mistral Large 4's LeRoPE ``alpha``).
    """
    inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=device) / head_dim)
    if log_scale is not None:
        inv_freq = inv_freq * log_scale.float().exp()
    positions = torch.arange(length, dtype=torch.float32, device=device)
    angles = torch.outer(positions, inv_freq)  # (T, head_dim / 2)
    angles = torch.cat((angles, angles), dim=-1)  # (T, head_dim)
    return angles.cos(), angles.sin()


class RotaryPositions(nn.Module):
    """RoPE's cos/sin tables as non-persistent buffers; :func:`apply_rotary` rotates queries and keys with them."""

    cos: Tensor
    sin: Tensor

    def __init__(self, max_len: int, head_dim: int) -> None:
        super().__init__()
        self.max_len, self.head_dim = max_len, head_dim
        self.register_buffer("cos", torch.empty(max_len, head_dim), persistent=False)
        self.register_buffer("sin", torch.empty(max_len, head_dim), persistent=False)
        self.reset_buffers()

    def reset_buffers(self) -> None:
        """(Re)compute the tables in place, e.g. after ``to_empty`` left the buffers uninitialised."""
        if self.cos.device.type == "meta":
            return
        cos, sin = rotary_tables(self.max_len, self.head_dim, device=self.cos.device)
        with torch.no_grad():
            self.cos.copy_(cos)
            self.sin.copy_(sin)

    def forward(self, length: int) -> tuple[Tensor, Tensor]:
        if length <= self.max_len:
            return self.cos[:length], self.sin[:length]  # (T, head_dim) each
        cos, sin = rotary_tables(length, self.head_dim, device=self.cos.device)
        return cos.to(self.cos.dtype), sin.to(self.sin.dtype)


def _rotate_half(x: Tensor) -> Tensor:
    first, second = x.chunk(2, dim=-1)  # (..., head_dim / 2) each
    return torch.cat((-second, first), dim=-1)  # (..., head_dim)


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate ``x`` (B, h, T, head_dim) by the angles of its positions; element-wise, no matmul FLOPs.

    Tables narrower than ``x`` (rotary_dim < head_dim: GPT-J, GPT-NeoX, phi-2's partial rotary) rotate the first
    ``rotary_dim`` channels and pass the rest through.
    """
    width = cos.shape[-1]
    if width == x.shape[-1]:
        return x * cos + _rotate_half(x) * sin  # cos, sin (T, head_dim) broadcast over (B, h)
    # (B, h, T, rotary_dim), (B, h, T, head_dim - rotary_dim)
    rotated, passed = (
        x[..., :width],
        x[..., width:],
    )
    return torch.cat((rotated * cos + _rotate_half(rotated) * sin, passed), dim=-1)  # (B, h, T, head_dim)


def alibi_slopes(num_heads: int) -> Tensor:
    """ALiBi's per-head slopes (Press et al. 2022, §3): 2^(-8 i / n) for the nearest power of two n <= heads,
    the odd terms of the 2n sequence for the rest (as BLOOM and MPT compute them)."""
    closest = 2 ** math.floor(math.log2(num_heads))
    base = 2.0 ** (-8.0 / closest)
    slopes = [base ** (i + 1) for i in range(closest)]
    if closest < num_heads:
        extra = 2.0 ** (-4.0 / closest)
        slopes += [extra ** (2 * i + 1) for i in range(num_heads - closest)]
    return torch.tensor(slopes, dtype=torch.float32)


def alibi_bias(
    num_heads: int, query_len: int, key_len: int, *, device: torch.device, query_offset: int = 0
) -> Tensor:
    """ALiBi's additive score bias, (1, h, T, S): -slope_h * |query position - key position|, queries from
    ``query_offset`` on (cached decode). Causal stacks mask the future anyway, so one formula serves both
    directions. No parameters."""
    query = torch.arange(query_offset, query_offset + query_len, device=device)[:, None]  # (T, 1)
    key = torch.arange(key_len, device=device)[None, :]  # (1, S)
    distance = (query - key).abs().float()  # (T, S)
    slopes = alibi_slopes(num_heads).to(device)  # (h,)
    return (-slopes[:, None, None] * distance).unsqueeze(0)  # (1, h, T, S)


def relative_position_bucket(
    relative_position: Tensor, *, bidirectional: bool, num_buckets: int, max_distance: int = 128
) -> Tensor:
    """T5's bucket of each (key position - query position) (Raffel et al. 2020, §2.1; Hugging Face's T5Attention).

    Half the buckets (all of them for a causal stack, which sees no future keys) hold exact small distances, the
    rest logarithmically wider ranges up to ``max_distance``; farther distances share the last bucket. Bidirectional
    stacks give keys after the query the upper half. Degenerate bucket counts (1-3) are handled without NaNs.
    """
    buckets = torch.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (relative_position > 0).long() * num_buckets
        distance = relative_position.abs()
    else:
        distance = -torch.clamp(relative_position, max=0)
    if num_buckets < 2:
        return buckets
    max_exact = num_buckets // 2
    # keep log(max_distance / max_exact) > 0 for huge bucket counts
    max_distance = max(max_distance, 2 * max_exact)
    scaled = torch.log(distance.clamp(min=max_exact).float() / max_exact) / math.log(max_distance / max_exact)
    large = (max_exact + (scaled * (num_buckets - max_exact)).long()).clamp(max=num_buckets - 1)
    return buckets + torch.where(distance < max_exact, distance, large)
