"""Head-shape choices: which ``num_heads`` divide an ``embed_dim``, with each ``head_dim``'s alignment facts.

The divisor arithmetic itself (bounded factorisation, divisor listing, nearest divisors) lives in the leaf module
:mod:`embedcalc.config.divisors`, which config validation uses too; its names are re-exported here.
"""

from __future__ import annotations

from dataclasses import dataclass

from embedcalc.config.divisors import (
    FLASH_ATTENTION_MAX_HEAD_DIM,
    MAX_LISTED_DIVISORS,
    TRIAL_DIVISION_LIMIT,
    USUAL_HEAD_DIMS,
    divisors,
    list_divisors,
    nearest_divisible,
    nearest_divisors,
    nearest_valid_heads,
    prime_factors,
)  # fmt: skip

__all__ = [
    "FLASH_ATTENTION_MAX_HEAD_DIM",
    "MAX_LISTED_DIVISORS",
    "TRIAL_DIVISION_LIMIT",
    "USUAL_HEAD_DIMS",
    "HeadChoice",
    "HeadListing",
    "divisors",
    "head_choices",
    "head_listing",
    "nearest_divisible",
    "nearest_divisors",
    "nearest_valid_heads",
    "prime_factors",
]


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


@dataclass(frozen=True)
class HeadListing:
    """The valid head counts of ``embed_dim`` found within the bounds of :mod:`embedcalc.config.divisors`.

    ``complete``: every valid ``num_heads`` is listed. Otherwise every valid ``num_heads`` below ``exact_below``
    is listed, the list holds at most ``MAX_LISTED_DIVISORS`` entries, and ``divisor_count`` (when the
    factorisation was found) says how many there are in all.
    """

    embed_dim: int
    choices: list[HeadChoice]
    complete: bool
    exact_below: int
    divisor_count: int | None


def _choice(embed_dim: int, h: int) -> HeadChoice:
    hd = embed_dim // h
    return HeadChoice(
        num_heads=h,
        head_dim=hd,
        multiple_of_8=hd % 8 == 0,
        multiple_of_16=hd % 16 == 0,
        multiple_of_64=hd % 64 == 0,
        flash_ok=hd <= FLASH_ATTENTION_MAX_HEAD_DIM,
        usual=hd in USUAL_HEAD_DIMS,
    )


def head_listing(embed_dim: int) -> HeadListing:
    """The valid ``num_heads`` of ``embed_dim`` (smallest first, bounded) and what the listing proves."""
    found = list_divisors(embed_dim)
    return HeadListing(
        embed_dim=embed_dim,
        choices=[_choice(embed_dim, h) for h in found.values],
        complete=found.complete,
        exact_below=found.exact_below,
        divisor_count=found.factorisation.divisor_count,
    )


def head_choices(embed_dim: int) -> list[HeadChoice]:
    """Every valid ``num_heads`` for ``embed_dim`` with its ``head_dim`` and alignment facts (bounded: see
    :func:`head_listing` for whether the list is complete)."""
    return head_listing(embed_dim).choices
