"""One kind of parameter tensor (:class:`ParamTensor`: breakdown key, shape, copies, tensor-parallel split), the
Linear layer's tensors and a norm's, shared by the term functions of ``params.py`` (FFN, embeddings, the model),
``attention.py`` and ``mixers.py`` (the recurrent token mixers).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Literal

from embedcalc.analysis.structure import Num, norm_has_bias
from embedcalc.config.resolved import ResolvedShape

# How Megatron-style tensor parallelism shards a tensor (Shoeybi et al. 2019, §3): column-parallel layers split
# their output features (weight and bias), row-parallel layers split their input features (the bias is
# replicated), vocab-parallel embeddings split their rows; ``qkv`` is the fused Q/K/V (KV heads replicated when
# fewer than ranks); everything else is replicated.
Split = Literal["column", "row", "vocab", "qkv", "none"]


@dataclass(frozen=True)
class ParamTensor:
    """One kind of parameter tensor: its breakdown key, shape, how many identical copies, how TP shards it.

    A per-layer tensor has ``per_layer_copies`` in each layer of its ``block`` (two norms of a sandwich, the
    ``num_experts`` experts of an MoE layer, which expert parallelism spreads over ``--ep`` ranks) and ``copies`` =
    layers x ``per_layer_copies`` in the model (once per stack with ``shared_layers``). A tensor of a shared block
    (``shared_sets``, config/shared_spec.py) exists once per weight set the layers of its block use.
    """

    key: str
    shape: tuple[Num, ...]
    copies: Num = 1
    split: Split = "none"
    stack: str | None = None  # the stack whose layers hold it (pipeline stages split these), else None
    per_layer: bool = False
    block: str | None = None
    per_layer_copies: int = 1
    expert: bool = False
    shared_sets: int = (
        0  # a shared block's tensor (Zamba2): at most this many sets, whatever the layers; 0: not
    )

    @property
    def numel(self) -> Num:
        return prod(self.shape) * self.copies


def linear(
    key: str, in_f: Num, out_f: Num, bias: bool, split: Split, instances: int = 1, expert: bool = False
) -> list[ParamTensor]:
    weight = ParamTensor(key, (out_f, in_f), instances, split, expert=expert)
    if not bias:
        return [weight]
    bias_split: Split = split if split in ("column", "qkv") else "none"
    return [weight, ParamTensor(key, (out_f,), instances, bias_split, expert=expert)]


def norm_tensors(config: ResolvedShape, key: str, width: Num, count: int = 1) -> list[ParamTensor]:
    """``count`` norms of ``width`` (none when the norms are parameter-free); replicated under TP."""
    if not config.norm_affine or not count:
        return []
    parts = 2 if norm_has_bias(config) else 1
    return [ParamTensor(key, (width,), count) for _ in range(parts)]
