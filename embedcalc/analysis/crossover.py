"""The sequence length where attention's O(n²·d) score work overtakes the O(n·d²) projections and FFN.

Per token and layer (forward, 2 FLOPs per MAC, full n x n scores):
  scores + context = 4 n q                       (Q·Kᵀ and A·V, q = num_heads * head_dim)
  projections + FFN = 2 d (q + 2 kv) + 2 q d + 2 d f_in + 2 f d
so n* = (2 d (q + 2 kv) + 2 q d + 2 d f_in + 2 f d) / (4 q), where f_in = 2 f for gated FFNs.
For BERT-base: (2·768·2304 + 2·768·768 + 2·768·3072 + 2·3072·768) / (4·768) = 2 d + f = 4608.
Cross-attention is left out: the crossover is a property of a self-attention block.
"""

from __future__ import annotations

from fractions import Fraction

from embedcalc.analysis.structure import ffn_in_width
from embedcalc.config.schema import ModelConfig


def crossover_fraction(config: ModelConfig) -> Fraction:
    """n* as an exact fraction."""
    d, q, kv, f = config.embed_dim, config.q_dim, config.kv_dim, config.resolved_ffn_dim
    linear = 2 * d * (q + 2 * kv) + 2 * q * d + 2 * d * ffn_in_width(config) + 2 * f * d
    return Fraction(linear, 4 * q)


def crossover_seq_len(config: ModelConfig) -> int | float:
    """n*: an int when it is whole (4608 for bert-base), else a float."""
    value = crossover_fraction(config)
    return int(value) if value.denominator == 1 else float(value)
