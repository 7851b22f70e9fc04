"""The sequence length where attention's O(n²·d) score work overtakes the O(n·d²) projections and FFN.

Per sequence of n tokens, the forward FLOPs of the first stack's layers are linear · n + quadratic · n² (full n x n
scores, 2 FLOPs per MAC), a sum over its layers of the per-layer terms of :mod:`embedcalc.analysis.flops`
(mixture-of-experts layers with their active path), so n* = linear / quadratic. For one repeated standard block:
  scores + context = 4 n q per token and layer        (Q·Kᵀ and A·V, q = num_heads * head_dim)
  projections + FFN = 2 d (q + 2 kv) + 2 q d + 2 d f_in + 2 f d
so n* = (2 d (q + 2 kv) + 2 q d + 2 d f_in + 2 f d) / (4 q), where f_in = 2 f for gated FFNs.
For BERT-base: (2·768·2304 + 2·768·768 + 2·768·3072 + 2·3072·768) / (4·768) = 2 d + f = 4608.
Cross-attention is left out: for an encoder-decoder this is the encoder's crossover. A block whose attention is
cross-attention over m external tokens (Llama-3.2-Vision) costs 4 m q per text token in its cores, linear in n: its
per-token FLOPs (Q, scores, context, out and FFN; not the per-sequence K and V of the external tokens) count on
the linear side. A sparse layer's core (DeepSeek
Sparse Attention) attends to at most k keys per query, so past k only its indexer grows as n²: when n* lands past
k, n* = (linear - c k) / I with c the core's and I the indexer's FLOPs per query-key pair (deepseek-v3.2: 62,413
tokens, where counting its core as n² would give 12,174).
A stack with no softmax attention at all (every layer a Mamba, DeltaNet or short-convolution mixer: quadratic = 0)
has no n² term to overtake anything: n* is None ("none" in tables, null in JSON), never a division by zero.
"""

from __future__ import annotations

from fractions import Fraction

from embedcalc.analysis.flops import crossover_terms
from embedcalc.analysis.structure import Dims
from embedcalc.config.resolved import ResolvedShape


def crossover_fraction(config: ResolvedShape) -> Fraction | None:
    """n* as an exact fraction; None without softmax attention (nothing grows as n²)."""
    linear, quadratic = crossover_terms(config, Dims.of(config))
    return Fraction(linear, quadratic) if quadratic else None


def crossover_seq_len(config: ResolvedShape) -> int | float | None:
    """n*: an int when it is whole (4608 for bert-base), else a float; None without softmax attention."""
    value = crossover_fraction(config)
    if value is None:
        return None
    return int(value) if value.denominator == 1 else float(value)
