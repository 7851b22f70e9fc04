"""A block whose weights several layers share, each use with extras of its own (DESIGN.md §9: sharing across depth).

ALBERT shares one layer's weights across the whole stack (``shared_layers``). Zamba and Zamba2 (Zyphra 2024,
arXiv:2405.16712 §2 and arXiv:2411.15242 §2; transformers' ``Zamba2HybridLayer``) share less and differently: a
few *shared transformer blocks* (``num_mem_blocks``) are called beside some of the Mamba-2 layers, in turn, and each
call has parts of its own. A layer of a block variant with ``shared`` runs, before its recurrent mixer:

- the shared block on the layer's input concatenated with the token embeddings (2 x embed_dim wide with
  ``embeddings``): a norm of that width, standard attention whose Q/K/V read that width and whose output
  projection writes embed_dim, then a norm and the block's FFN (no residual inside it: Zamba2AttentionDecoderLayer);
- per use: low-rank adapters (input -> adapter_rank -> output, no bias) added to the Q, K and V projections
  (``attention_adapters``) and to the FFN's input projection (``ffn_adapters``), and a bias-free
  embed_dim x embed_dim projection of the block's output (``shared/projection``) that is added to the mixer's input
  (not to the residual): out = x + mixer(norm(x + projection(shared(concat(x, embeddings))))).

The attention and FFN are the block variant's own ``attention`` / ``ffn`` (resolved as any block's), so a layer with
``shared`` has attention, an FFN and a recurrent mixer. Their weights (and the two norms) exist ``copies`` times in
the model, the j-th layer with ``shared`` of a stack using set j mod copies: parameters are counted once per set in
use, FLOPs and the KV cache at every layer; the adapters and the projection are counted in every layer. The resolved
view is :class:`embedcalc.config.layer_plan.Shared`.
"""

from __future__ import annotations

from pydantic import BaseModel, Field, model_validator
from pydantic_core import PydanticCustomError

from embedcalc.config.bounded import NonNegativeInt, PositiveInt
from embedcalc.config.fields import SharedFields
from embedcalc.config.spec_base import FROZEN


class SharedSpec(SharedFields, BaseModel):
    """The shared block a layer runs beside its recurrent mixer (Zamba2's shared transformer), and its per-use
    extras."""

    model_config = FROZEN

    copies: PositiveInt = Field(
        default=1,
        description=(
            "Distinct weight sets of the shared block (Zamba2's num_mem_blocks), used in turn: the j-th layer with "
            "shared in a stack runs set j mod copies. Parameters count once per set in use; FLOPs and the KV "
            "cache count at every layer."
        ),
    )
    embeddings: bool = Field(
        default=True,
        description=(
            "The shared block reads the layer's input concatenated with the token embeddings, 2 x embed_dim wide: "
            "its input norm and its Q/K/V projections are that wide (Zamba, Zamba2). false: the layer's input "
            "alone (embed_dim)."
        ),
    )
    adapter_rank: NonNegativeInt = Field(
        default=0,
        description=(
            "Rank of the per-use low-rank adapters (Zamba2's adapter_rank): each is input -> adapter_rank -> "
            "output, bias-free, added to the projection it adapts; 0: none."
        ),
    )
    attention_adapters: bool = Field(
        default=False,
        description=(
            "Every use has its own adapters on the Q, K and V projections (Zamba2's "
            "use_shared_attention_adapter): shared/attention_adapters. Needs adapter_rank."
        ),
    )
    ffn_adapters: bool = Field(
        default=False,
        description=(
            "Every use has its own adapter on the FFN's input projection (gate and up of a gated FFN; Zamba2's "
            "gate_up_proj_adapter_list): shared/ffn_adapters. Needs adapter_rank."
        ),
    )

    @model_validator(mode="after")
    def _adapters_have_a_rank(self) -> SharedSpec:
        adapters = self.attention_adapters or self.ffn_adapters
        if adapters and not self.adapter_rank:
            raise PydanticCustomError(
                "shared_adapters_without_rank",
                "shared.adapter_rank is 0, but shared.{which} asks for adapters; set adapter_rank (Zamba2: 128) "
                "or remove {which}",
                {"which": "attention_adapters" if self.attention_adapters else "ffn_adapters"},
            )
        if self.adapter_rank and not adapters:
            raise PydanticCustomError(
                "shared_rank_without_adapters",
                "shared.adapter_rank ({rank}) sizes adapters, but neither attention_adapters nor ffn_adapters is "
                "set, so it would change nothing; set one of them or remove adapter_rank",
                {"rank": self.adapter_rank},
            )
        return self
