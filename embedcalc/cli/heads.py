"""``embedcalc heads EMBED_DIM``: every valid num_heads with its head_dim, marking the usual choices.

Bounded for any EMBED_DIM (at most ``MAX_INT_DIGITS`` digits, like every size): the listing is complete when the
factorisation is found within the bounds of :mod:`embedcalc.config.divisors` and has at most 10,000 entries;
otherwise it holds the smallest valid head counts and says up to where it is exact. A table shows at most
``MAX_TABLE_ROWS`` of them (JSON all).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

import typer

from embedcalc.analysis.heads import MAX_LISTED_DIVISORS, HeadListing, head_listing
from embedcalc.cli import output
from embedcalc.cli.common import FormatOption, OutputFormat, handle_errors
from embedcalc.cli.options import bounded_int

MAX_TABLE_ROWS = 100  # a table of thousands of rows is unreadable and slow to draw; JSON holds them all


def _note(listing: HeadListing) -> str | None:
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


@handle_errors("heads")
def heads_command(
    embed_dim: Annotated[
        int, typer.Argument(min=1, callback=bounded_int, help="Model width (embed_dim, d_model).")
    ],
    format: FormatOption = OutputFormat.table,
) -> None:
    """Every num_heads that divides EMBED_DIM, with head_dim, tensor-core alignment and the FlashAttention limit."""
    listing = head_listing(embed_dim)
    note = _note(listing)
    if note is not None:
        output.stderr.print(f"embedcalc: note: {note}", soft_wrap=True, markup=False, highlight=False)
    if format is OutputFormat.json:
        entry = {
            "embed_dim": embed_dim,
            "choices": [asdict(c) for c in listing.choices],
            "complete": listing.complete,
            "exact_below": listing.exact_below,
            "divisor_count": listing.divisor_count,
        }
        output.emit_json("heads", [entry])
        return
    from embedcalc.render.config_tables import heads_table

    shown = listing.choices[:MAX_TABLE_ROWS]
    output.stdout.print(heads_table(embed_dim, shown))
    if len(shown) < len(listing.choices):
        output.stderr.print(
            f"embedcalc: note: the table shows the smallest {len(shown)} of the {len(listing.choices):,} listed; "
            "--format json has them all",
            soft_wrap=True, markup=False, highlight=False,
        )  # fmt: skip
