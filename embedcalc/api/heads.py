"""``heads``: every valid ``num_heads`` of a width with its ``head_dim`` and alignment facts
(:mod:`embedcalc.analysis.heads`), and what the listing proves (``embedcalc heads EMBED_DIM``).

Bounded for any width below 10^``MAX_INT_DIGITS``, like every size: the listing is complete when the
factorisation is found within the bounds of :mod:`embedcalc.config.divisors` and has at most
``MAX_LISTED_DIVISORS`` entries; otherwise it holds the smallest valid head counts and :attr:`HeadsReport.note`
says up to where it is exact.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from embedcalc.analysis.heads import MAX_LISTED_DIVISORS, HeadListing, head_listing
from embedcalc.api.workload import usage
from embedcalc.config.limits import count_problem

__all__ = ["HeadsReport", "heads"]


@dataclass(frozen=True)
class HeadsReport:
    """The valid head counts of one width (``listing``), with the note a partial listing carries."""

    # every valid num_heads listed (``choices``, smallest first) and what the listing proves
    listing: HeadListing

    @property
    def note(self) -> str | None:
        """None when the listing is complete; otherwise what it holds and up to where it is exact."""
        listing = self.listing
        if listing.complete:
            return None
        if listing.divisor_count is not None:
            return (
                f"{listing.embed_dim} has {listing.divisor_count:,} divisors; listing the smallest "
                f"{len(listing.choices):,} (every valid num_heads below {listing.exact_below:,})"
            )
        return (
            f"{listing.embed_dim} was not fully factored within the bound; every valid num_heads up to "
            f"{listing.exact_below - 1:,} is listed (complete up to there), plus the larger ones found "
            f"(at most {MAX_LISTED_DIVISORS:,} in all)"
        )

    def to_json(self) -> dict[str, Any]:
        """The ``results[]`` entry of ``embedcalc heads --format json``."""
        listing = self.listing
        return {
            "embed_dim": listing.embed_dim,
            "choices": [asdict(c) for c in listing.choices],
            "complete": listing.complete,
            "exact_below": listing.exact_below,
            "divisor_count": listing.divisor_count,
        }


def heads(embed_dim: int) -> HeadsReport:
    """Every ``num_heads`` that divides ``embed_dim`` (smallest first, bounded), with its ``head_dim``.

    ``embed_dim`` is a count from 1 to below 10^30 (otherwise a usage error naming ``embed_dim``).

    >>> from embedcalc.api.heads import heads
    >>> r = heads(768)
    >>> [(c.num_heads, c.head_dim) for c in r.listing.choices if c.usual]
    [(6, 128), (12, 64)]
    >>> r.note is None, r.to_json()["complete"]
    (True, True)
    """
    problem = count_problem(embed_dim)
    if problem is not None:
        raise usage(f"embed_dim {embed_dim!r}: {problem}", "embed_dim")
    return HeadsReport(head_listing(embed_dim))
