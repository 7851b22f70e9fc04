"""The indexers of sparse attention (DESIGN.md §16): DeepSeek Sparse Attention's lightning indexer (DeepSeek-V3.2-Exp
report §2.1; transformers' ``DeepseekV32Indexer``) and MiniMax-M3's block indexer (``MiniMaxM3VLIndexer``), their
tensors (read by :mod:`embedcalc.analysis.params`) and forward FLOPs (by :mod:`embedcalc.analysis.flops`), on
:class:`~embedcalc.analysis.structure.Dims` like every term function.
"""

from __future__ import annotations

from embedcalc.analysis.structure import Dims, Num
from embedcalc.analysis.tensor import ParamTensor
from embedcalc.analysis.tensor import linear as _linear
from embedcalc.config.layer_plan import Attention


def indexer_tensors(a: Attention, x: Dims, prefix: str) -> list[ParamTensor]:
    """The lightning indexer of a sparse layer (DeepSeek-V3.2-Exp report §2.1; transformers' ``DeepseekV32Indexer``):
    queries from the query latent, one key per token with its LayerNorm (weight and bias, whatever the model's
    norm), the per-head weights; replicated under tensor parallelism, as transformers' plan leaves it."""
    heads, width = a.index_heads, a.index_head_dim
    out = _linear(f"{prefix}/index_q", a.q_lora_rank or x.d, heads * width, False, "none")
    if a.q_lora_rank is None:  # Mistral Large 4: queries from the input through a LayerNorm (weight and bias)
        out += [ParamTensor(f"{prefix}/index_input_norm", (x.d,)) for _ in range(2)]
    if a.query_scale:  # and a scale and a bias per indexer head
        out += [ParamTensor(f"{prefix}/index_query_scale", (heads,)) for _ in range(2)]
    out += _linear(f"{prefix}/index_k", x.d, width, False, "none")
    out += [ParamTensor(f"{prefix}/index_k_norm", (width,)) for _ in range(2)]
    return out + _linear(f"{prefix}/index_weights", x.d, heads, False, "none")


def block_indexer_tensors(a: Attention, x: Dims, prefix: str) -> list[ParamTensor]:
    """The block indexer of a block-sparse layer (transformers' ``MiniMaxM3VLIndexer``): queries and one key per
    token from embed_dim, each with an RMSNorm over index_head_dim (a weight, whatever the model's norm); no head
    weights. Replicated under tensor parallelism, as the lightning indexer."""
    heads, width = a.index_heads, a.index_head_dim
    out = _linear(f"{prefix}/index_q", x.d, heads * width, False, "none")
    out += _linear(f"{prefix}/index_k", x.d, width, False, "none")
    return [
        *out,
        ParamTensor(f"{prefix}/index_q_norm", (width,)),
        ParamTensor(f"{prefix}/index_k_norm", (width,)),
    ]


def indexer_flops(
    a: Attention, x: Dims, layers: Num, t: Num, index_tokens: Num, prefix: str
) -> list[tuple[str, Num]]:
    """Forward FLOPs of ``layers`` lightning indexers (DeepSeek-V3.2-Exp report §2.1, eq. 1: I(t, s) = sum over
    the H_I heads of w(t, j) ReLU(q(t, j) . k(s))) on ``t`` tokens, ``index_tokens`` = b x the query-key pairs it
    scores: its three projections, and per pair H_I D_I for the dot products plus H_I for the weighted sum."""
    heads, width = a.index_heads, a.index_head_dim
    return [
        (f"{prefix}/index_q", t * (layers * 2 * (a.q_lora_rank or x.d) * heads * width)),
        (f"{prefix}/index_k", t * (layers * 2 * x.d * width)),
        (f"{prefix}/index_weights", t * (layers * 2 * x.d * heads)),
        (f"{prefix}/index_scores", index_tokens * (layers * 2 * heads * (width + 1))),
    ]


def block_indexer_flops(
    a: Attention, x: Dims, layers: Num, t: Num, index_tokens: Num, prefix: str
) -> list[tuple[str, Num]]:
    """Forward FLOPs of ``layers`` block indexers (transformers' ``MiniMaxM3VLIndexer``) on ``t`` tokens,
    ``index_tokens`` = b x the query-key pairs it scores: its two projections and H_I D_I per pair (the block
    max-pool and the top-k are not matmuls)."""
    heads, width = a.index_heads, a.index_head_dim
    return [
        (f"{prefix}/index_q", t * (layers * 2 * x.d * heads * width)),
        (f"{prefix}/index_k", t * (layers * 2 * x.d * width)),
        (f"{prefix}/index_scores", index_tokens * (layers * 2 * heads * width)),
    ]
