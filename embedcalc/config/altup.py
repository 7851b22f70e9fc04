"""Which blocks carry Gemma 3n's Laurel branch (``laurel_rank``; transformers 5.24 ``Gemma3nTextLaurelBlock``): one
predicate, read by the analyzer and the torch model alike. Free of pydantic, so ``analyze PRESET`` imports it
cheaply; the field rules are in :mod:`embedcalc.config.rules.altup`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from embedcalc.config.layer_plan import Block


def has_laurel(laurel_rank: int | None, block: Block) -> bool:
    """Whether ``block`` has a Laurel branch: a rank is set and the block has self-attention (not over an external
    sequence) and an FFN, with no mixer and no sublayer replaced by a linear."""
    return bool(
        laurel_rank
        and block.attention is not None
        and not block.attention.external
        and block.ffn is not None
        and block.mixer is None
        and not block.projections
    )
