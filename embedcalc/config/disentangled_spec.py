"""DeBERTa's disentangled attention (He et al. 2021, "DeBERTa", §3.1; DeBERTa-v3, He et al. 2023) as data.

Each stack holds one relative-position table of 2·span rows x embed_dim (transformers' ``rel_embeddings``,
``DebertaV2Encoder``), optionally LayerNorm-ed (``norm_rel_ebd: layer_norm``). Every layer projects it to position
keys (content-to-position, ``c2p``: queries score against them) and/or position queries (position-to-content,
``p2c``: keys score against them), with its own content q/k projections (``share_att_key``) or with separate biased
``pos_key_proj`` / ``pos_query_proj``. The two terms are gathered at each query-key pair's relative position and
added to the content scores; the scale is 1 / sqrt(head_dim x (1 + terms)). Distances are log-bucketed when
``bucketed`` (transformers' ``make_log_bucket_position`` with ``position_buckets`` = span and ``max_distance`` =
``max_relative_positions``). Nothing here counts: :mod:`embedcalc.analysis.params`, :mod:`embedcalc.analysis.flops`
and :mod:`embedcalc.modeling.disentangled` read it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from embedcalc.config.bounded import PositiveInt
from embedcalc.config.spec_shapes import DisentangledShape


class DisentangledSpec(DisentangledShape, BaseModel):
    """The relative-position table and the position terms of DeBERTa's disentangled attention."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    span: PositiveInt = Field(
        description=(
            "Relative positions each way (transformers' att_span: position_buckets when positive, else "
            "max_relative_positions, else max_position_embeddings); the table has 2 x span rows of embed_dim."
        )
    )
    bucketed: bool = Field(
        default=False,
        description="Distances are log-bucketed into span buckets (position_buckets > 0); changes no count.",
    )
    max_distance: PositiveInt = Field(
        default=512,
        description="max_relative_positions: the distance the log buckets reach (bucketed only); changes no count.",
    )
    c2p: bool = Field(
        default=True, description="Content-to-position term: queries against projected positions."
    )
    p2c: bool = Field(default=True, description="Position-to-content term: keys against projected positions.")
    share_keys: bool = Field(
        default=False,
        description=(
            "share_att_key: the layer's content query and key projections project the table (no parameters of "
            "their own; both projections run whatever the terms); else a biased pos_key_proj (c2p) and "
            "pos_query_proj (p2c) of embed_dim -> heads x head_dim per layer."
        ),
    )
    norm: bool = Field(
        default=False, description="A norm on the table before use (norm_rel_ebd: layer_norm)."
    )
