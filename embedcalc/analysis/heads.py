"""Head-shape arithmetic: which ``num_heads`` divide an ``embed_dim``, and the nearest valid alternatives."""

from __future__ import annotations

from dataclasses import dataclass

# head_dim values of published models (BERT, GPT-2/3, LLaMA: 64 or 128); `embedcalc heads` marks them.
USUAL_HEAD_DIMS = (64, 128)
# FlashAttention-2 supports head dimensions up to 256 (Dao 2023, README "head dimensions up to 256").
FLASH_ATTENTION_MAX_HEAD_DIM = 256


def divisors(n: int) -> list[int]:
    """All positive divisors of ``n`` in increasing order, in O(sqrt(n))."""
    small: list[int] = []
    large: list[int] = []
    i = 1
    while i * i <= n:
        if n % i == 0:
            small.append(i)
            if i != n // i:
                large.append(n // i)
        i += 1
    return small + large[::-1]


def nearest_divisors(n: int, target: int, count: int = 2, max_steps: int = 1_000_000) -> list[int]:
    """The ``count`` divisors of ``n`` closest to ``target`` (excluding it), searching outward from ``target``.

    At equal distance the smaller one comes first. The search is bounded, so it stays fast for any ``n``
    (10**18 included); 1 and ``n`` always divide ``n`` and fill in if the window finds too few.
    """
    found: list[int] = []
    for step in range(1, max_steps + 1):
        for h in (target - step, target + step):
            if 1 <= h <= n and n % h == 0:
                found.append(h)
        if len(found) >= count or (target - step < 1 and target + step > n):
            break
    for fallback in (1, n):
        if len(found) < count and fallback != target and fallback not in found:
            found.append(fallback)
    return found[:count]


def nearest_valid_heads(embed_dim: int, num_heads: int, count: int = 2) -> list[int]:
    """The ``count`` head counts that divide ``embed_dim`` closest to ``num_heads`` (ties: larger head_dim first)."""
    return nearest_divisors(embed_dim, num_heads, count)


def nearest_divisible(value: int, divisor: int) -> tuple[int, int]:
    """The multiples of ``divisor`` just below and just above ``value`` (below is omitted as 0 if none > 0)."""
    below = value - value % divisor
    above = below + divisor
    return below, above


@dataclass(frozen=True)
class HeadChoice:
    """One way to split ``embed_dim`` into heads."""

    num_heads: int
    head_dim: int
    multiple_of_8: bool
    multiple_of_16: bool
    multiple_of_64: bool
    flash_ok: bool
    usual: bool


def head_choices(embed_dim: int) -> list[HeadChoice]:
    """Every valid ``num_heads`` for ``embed_dim`` with its ``head_dim`` and alignment facts."""
    out = []
    for h in divisors(embed_dim):
        hd = embed_dim // h
        out.append(
            HeadChoice(
                num_heads=h,
                head_dim=hd,
                multiple_of_8=hd % 8 == 0,
                multiple_of_16=hd % 16 == 0,
                multiple_of_64=hd % 64 == 0,
                flash_ok=hd <= FLASH_ATTENTION_MAX_HEAD_DIM,
                usual=hd in USUAL_HEAD_DIMS,
            )
        )
    return out
