"""The shapes of an attention indexer's checkpoint tensors (``verify --checkpoint``, beside
:mod:`embedcalc.reconcile.checkpoint_shapes`): DeepSeek-V3.2's lightning indexer (``DeepseekV32Indexer``), which
DeepSeek-V4's compressed attention and Mistral Large 4 (``MistralLarge4Indexer``, its query read from the hidden
state: no query rank) share, and MiniMax-M3's block indexer (``MiniMaxM3VLIndexer``).
"""

from __future__ import annotations

from embedcalc.analysis.structure import Dims
from embedcalc.config.layer_plan import Attention

# (shape, why); a shape of None: the block builds no such tensor, and why
Expected = tuple[tuple[int, ...] | None, str]


def indexer_shape(a: Attention, x: Dims, part: str, param: str) -> Expected | None:
    """DeepSeek-V3.2's lightning indexer (``DeepseekV32Indexer``): ``wq_b`` (index_n_heads x index_head_dim,
    q_lora_rank, or hidden without a query latent), ``wk`` (index_head_dim, d), ``k_norm`` a LayerNorm
    (index_head_dim,) with its bias, ``weights_proj`` (index_n_heads, d); MiniMax-M3's block indexer: ``q_proj``
    (index_n_heads x index_head_dim, d), ``k_proj`` (index_head_dim, d), ``q_norm`` and ``k_norm`` RMSNorms
    (index_head_dim,)."""
    heads, width = a.index_heads, a.index_head_dim
    if (
        a.block_indexer
    ):  # MiniMax-M3's (MiniMaxM3VLIndexer): q_proj, k_proj from hidden, RMSNorms (weight only)
        if part in ("q_norm", "k_norm"):
            return ((width,), "index_head_dim") if param == "weight" else None
        block = {
            "q_proj": (heads * width, "index_n_heads x index_head_dim"),
            "k_proj": (width, "index_head_dim"),
        }
        if part not in block or param != "weight":
            return None
        return (block[part][0], x.d), f"{block[part][1]}, hidden"
    if part == "k_norm":
        return ((width,), "index_head_dim") if param in ("weight", "bias") else None
    # wq_b reads the query latent, or the hidden state where there is none (Mistral Large 4)
    rank = (a.q_lora_rank, "q_lora_rank") if a.q_lora_rank else (x.d, "hidden")
    linears = {"wq_b": (heads * width, rank[0], "index_n_heads x index_head_dim", rank[1]),
               "wk": (width, x.d, "index_head_dim", "hidden"),
               "weights_proj": (heads, x.d, "index_n_heads", "hidden")}  # fmt: skip
    if part not in linears or param != "weight":
        return None
    rows, cols, why_rows, why_cols = linears[part]
    return (rows, cols), f"{why_rows}, {why_cols}"
