"""The numbers behind ``embedcalc explain`` (DESIGN.md §12), one module per group of topics: the topic list and the
width-depth and cost topics (:mod:`.scale`), the heads topic (:mod:`.heads`), and the embed-dim and fine-tune topics
(:mod:`.weights`, which ``diff`` also answers with).

This module re-exports the names other modules use.
"""

from embedcalc.analysis.explain.heads import HeadsAnswer, HeadShape, explain_heads
from embedcalc.analysis.explain.scale import (
    TOPICS,
    CostAnswer,
    WidthDepthAnswer,
    explain_cost,
    explain_width_depth,
)
from embedcalc.analysis.explain.weights import (
    EmbedDimAnswer,
    FineTuneAnswer,
    MethodFit,
    Scenario,
    explain_embed_dim,
    explain_fine_tune,
)

__all__ = [
    "TOPICS",
    "CostAnswer",
    "EmbedDimAnswer",
    "FineTuneAnswer",
    "HeadShape",
    "HeadsAnswer",
    "MethodFit",
    "Scenario",
    "WidthDepthAnswer",
    "explain_cost",
    "explain_embed_dim",
    "explain_fine_tune",
    "explain_heads",
    "explain_width_depth",
]
