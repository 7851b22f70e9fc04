"""Manifold-constrained hyper-connections (``hyper_connections``; DeepSeek-V4's mHC, transformers 5.24
``DeepseekV4HyperConnection`` and ``DeepseekV4HyperHead``, ``modeling_deepseek_v4.py``): their parameter tensors,
forward FLOPs and saved activations, one term function each, on ints or numpy grids.

The residual stream is kept as n = ``hyper_connections`` streams of d = embed_dim. Around each residual sublayer
(the token mixer, the FFN) one hyper-connection reads the n streams flattened (n d wide, RMS-normalised without a
weight), projects them to (2 + n) n weights (``fn``, with a bias ``base`` and 3 scales), and uses them to collapse
the streams into the sublayer's input (``pre``, n), spread its output back (``post``, n) and mix the streams
(``comb``, n x n, Sinkhorn-normalised): streams' = post x out + combᵀ streams. The model collapses them once more
before the final norm (``hyper_head``: n d -> n, a bias of n and one scale).

- parameters: ``<stack>/hyper/<sublayer>`` (2 + n) n x n d + (2 + n) n + 3 per sublayer and layer;
  ``<stack>/hyper_head`` n x n d + n + 1.
- FLOPs (2 per multiply-accumulate, matmuls only, as ``FlopCounterMode`` counts): per sublayer the projection
  2 t n d (2 + n) n and the mix (t, n, n) @ (t, n, d), 2 t n² d; the head 2 t n d n. The collapse (a weighted sum),
  the spread, the sigmoids and the Sinkhorn iterations are element-wise.
- saved activations (training): a layer's input is its n streams, n t d elements instead of t d.
"""

from __future__ import annotations

from embedcalc.analysis.structure import Num
from embedcalc.analysis.tensor import ParamTensor
from embedcalc.config.hyper import hyper_sublayers
from embedcalc.config.layer_plan import Block


def hyper_layer_tensors(n: int, d: Num, block: Block) -> list[ParamTensor]:
    """One layer's hyper-connections (replicated under tensor parallelism: every rank mixes whole streams)."""
    width = (2 + n) * n
    out: list[ParamTensor] = []
    for where in hyper_sublayers(block):
        key = f"hyper/{where}"
        out += [ParamTensor(key, (width, n * d)), ParamTensor(key, (width,)), ParamTensor(key, (3,))]
    return out


def hyper_head_tensors(n: int, d: Num, stack: str) -> list[ParamTensor]:
    """The final collapse of the streams (``<stack>/hyper_head``), held by the last pipeline stage."""
    key = f"{stack}/hyper_head"
    return [ParamTensor(key, (n, n * d), stack=stack), ParamTensor(key, (n,), stack=stack),
            ParamTensor(key, (1,), stack=stack)]  # fmt: skip


def hyper_layer_flops(n: int, d: Num, block: Block, layers: Num, t: Num) -> list[tuple[str, Num]]:
    """Forward FLOPs of ``layers`` layers' hyper-connections on ``t`` tokens (module docstring)."""
    per_sublayer = 2 * n * d * (2 + n) * n + 2 * n * n * d
    return [(f"hyper/{where}", t * (layers * per_sublayer)) for where in hyper_sublayers(block)]


def hyper_head_flops(n: int, d: Num, t: Num) -> Num:
    """Forward FLOPs of the final collapse on ``t`` tokens."""
    return t * (2 * n * d * n)
