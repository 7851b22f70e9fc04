"""The element-wise estimate of ``analyze``'s FLOPs (softmax, norms, activations, residual adds): the non-matmul
work, counted per element with the constants below and never added to the matmul totals of
:mod:`embedcalc.analysis.flops`, whose :class:`~embedcalc.analysis.flops.FlopsEstimate` carries it beside them.
"""

from __future__ import annotations

from embedcalc.analysis.breakdown import Breakdown
from embedcalc.analysis.structure import Dims, Num, minimum, sublayer_norms
from embedcalc.analysis.workload import Workload
from embedcalc.config.layer_plan import Block
from embedcalc.config.resolved import ResolvedShape

# Element-wise FLOPs per element, an estimate: softmax = max, subtract, exp, sum, divide (+1 for the 1/sqrt(d)
# scale); LayerNorm = mean, subtract, square, mean, rsqrt-multiply, scale, shift; RMSNorm drops mean/subtract/shift;
# activations count their arithmetic roughly (erf/tanh ~ 8), gated adds the product.
_SOFTMAX_PER_SCORE = 6
# a sparse layer's lightning indexer: the scale and the ReLU of each head's dot product, and the causal mask of the
# weighted sum (its top-k is a sort, not arithmetic)
_INDEX_PER_HEAD_SCORE = 2
_NORM_PER_ELEMENT = {"layernorm": 7, "rmsnorm": 4}
# xIELU: a square, two multiply-adds, expm1 and min on the negative branch, the select
_ACTIVATION_PER_ELEMENT = {
    "relu": 1,
    "gelu": 8,
    "gelu_tanh": 8,
    "silu": 4,
    "swiglu": 5,
    "geglu": 9,
    "xielu": 8,
}


def _activation_width(block: Block, x: Dims) -> Num:
    w = x.widths(block)
    if block.ffn is None:
        return 0
    return block.ffn.top_k * w.fe + w.fs if block.ffn.moe else w.f


def elementwise_flops(config: ResolvedShape, workload: Workload) -> Breakdown:
    """An estimate of the non-matmul work (softmax, norms, activations, residual adds); never in the matmul total."""
    out = Breakdown()
    x = Dims.of(config, workload.batch_size, workload.seq_len, workload.tgt_len)
    b, d, h = x.b, x.d, x.h
    per_norm = _NORM_PER_ELEMENT[config.norm]
    attention_norms, cross_norms, ffn_norms = sublayer_norms(config)
    for sd in x.stacks:
        n, n_mem = x.tokens(config, sd.stack)
        cross = sd.stack.cross_attention
        t = b * n
        sublayers = 3 if cross else 2
        norms = attention_norms + ffn_norms + (cross_norms if cross else 0)
        scores = h * n * n + (h * n * n_mem if cross else 0)
        for block, layers in sd.blocks:
            a = block.attention
            if (
                a is not None and a.kind == "sparse"
            ):  # the core's softmax over min(n, k) keys; the indexer's scores
                pairs = n * minimum(n, a.index_topk)
                out.add(
                    f"{sd.name}/softmax",
                    layers * b * (h * pairs + (h * n * n_mem if cross else 0)) * _SOFTMAX_PER_SCORE,
                )
                if not a.index_shared:
                    per_score = _INDEX_PER_HEAD_SCORE * a.index_heads + 1
                    out.add(f"{sd.name}/index_scores", layers * b * n * n * per_score)
            elif a is not None and a.external:  # softmax over the external tokens
                out.add(f"{sd.name}/softmax", layers * b * h * n * a.context * _SOFTMAX_PER_SCORE)
            elif a is not None:
                out.add(f"{sd.name}/softmax", layers * b * scores * _SOFTMAX_PER_SCORE)
            out.add(f"{sd.name}/norms", layers * norms * t * d * per_norm)
            act = _ACTIVATION_PER_ELEMENT[config.activation]
            out.add(f"{sd.name}/activation", layers * t * _activation_width(block, x) * act)
            # a mixer beside the attention (Falcon-H1) adds its output to the attention's: one more add
            adds = sublayers + (1 if block.parallel_mixers else 0)
            out.add(f"{sd.name}/residual", layers * adds * t * d)
    return out
