"""The sizes every count reads, as Python ints (one config) or numpy arrays (a sweep grid): one formula per quantity.

:class:`Dims` holds the widths a sweep may vary (``d`` embed_dim, ``h`` num_heads, ``g`` num_kv_heads, ``hd``
head_dim, each block's FFN widths), the workload sizes (``b`` batch, ``n`` tokens per sequence, ``n_dec`` decoder
tokens of an encoder-decoder) and the layer plan of each stack: the distinct resolved blocks
(:class:`embedcalc.config.layer_plan.Block`) with how many layers are each. :meth:`Dims.of` builds it from one config
with Python ints; :mod:`embedcalc.analysis.grid` builds it with arrays. The term functions of ``params.py``,
``flops.py``, ``memory.py`` and ``crossover.py`` take a ``Dims`` and use only ``+``, ``*``, ``//`` and
:func:`maximum` / :func:`minimum` on its sizes, so the same code evaluates one config exactly and a whole grid at
once. Static choices (bias, gated, the block kinds, the norm placement) are plain Python values on the config and
the blocks.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any, TypeAlias

from embedcalc.config.layer_plan import Attention, Block
from embedcalc.config.resolved import ResolvedShape

# A size or count: a Python int (one config, exact at any size) or a numpy integer array (one entry per grid
# point; int64 under a proven bound, else object arrays of Python ints).
Num: TypeAlias = Any


def maximum(a: Num, b: Num) -> Num:
    """max for Python ints (exact, never through int64), element-wise for arrays."""
    if isinstance(a, int) and isinstance(b, int):
        return max(a, b)
    import numpy as np

    return np.maximum(a, b)


def minimum(a: Num, b: Num) -> Num:
    """min for Python ints, element-wise for arrays."""
    if isinstance(a, int) and isinstance(b, int):
        return min(a, b)
    import numpy as np

    return np.minimum(a, b)


@dataclass(frozen=True)
class Stack:
    """One stack (encoder or decoder) and the facts every count needs about it."""

    name: str  # "encoder" or "decoder": the first segment of breakdown keys
    num_layers: int
    causal: bool
    cross_attention: bool


def stacks(config: ResolvedShape) -> list[Stack]:
    """The stacks of ``config`` in forward order."""
    if config.architecture == "encoder":
        return [Stack("encoder", config.num_layers, causal=False, cross_attention=False)]
    if config.architecture == "decoder":
        return [Stack("decoder", config.num_layers, causal=True, cross_attention=False)]
    return [
        Stack("encoder", config.num_layers, causal=False, cross_attention=False),
        Stack("decoder", config.resolved_decoder_layers, causal=True, cross_attention=True),
    ]


@dataclass(frozen=True)
class FFNWidths:
    """The inner widths of one block's FFN at a point: dense ``f``, routed expert ``fe``, shared experts ``fs``."""

    f: Num
    fe: Num
    fs: Num


@dataclass(frozen=True)
class StackDims:
    """One stack's layers (on one pipeline stage, or all): each distinct block with its number of layers."""

    stack: Stack
    blocks: tuple[tuple[Block, Num], ...]
    holds_first: bool = True  # the stage holds the stack's first layer (relative position bias)
    holds_last: bool = True  # ... and its last layer (final norm)

    @property
    def name(self) -> str:
        return self.stack.name

    @property
    def layers(self) -> Num:
        total: Num = 0
        for _, count in self.blocks:
            total = total + count
        return total


@dataclass(frozen=True)
class Dims:
    """Sizes of one config and workload (ints) or of every point of a grid (arrays); see the module docstring."""

    d: Num
    d_tok: Num  # token_embed_dim (embed_dim unless the tables are narrower)
    h: Num
    g: Num  # num_kv_heads of standard attention
    hd: Num  # head_dim of standard attention
    b: Num
    n: Num  # tokens per sequence: the encoder's, or a decoder-only model's
    n_dec: Num  # decoder tokens of an encoder-decoder (tgt_len, default seq_len)
    ffn: Mapping[str, FFNWidths]  # by block name
    stacks: tuple[StackDims, ...]
    first: bool = True  # holds the embeddings (pipeline stage 0)
    last: bool = True  # holds the final norms, pooler and LM head
    depth: Num = 0  # layers of the first stack in the whole model (per-layer embeddings are that many wide)

    @classmethod
    def of(
        cls, config: ResolvedShape, batch_size: int = 1, seq_len: int = 1, tgt_len: int | None = None
    ) -> Dims:
        """The sizes of one config (Python ints), for ``batch_size`` sequences of ``seq_len`` tokens."""
        return cls(
            d=config.embed_dim,
            d_tok=config.resolved_token_embed_dim,
            h=config.num_heads,
            g=config.resolved_kv_heads,
            hd=config.resolved_head_dim,
            b=batch_size,
            n=seq_len,
            n_dec=tgt_len if tgt_len is not None else seq_len,
            ffn={
                name: FFNWidths(block.ffn.ffn_dim, block.ffn.expert_dim, block.ffn.shared_dim)
                if block.ffn is not None
                else FFNWidths(0, 0, 0)
                for name, block in config.named_blocks.items()
            },
            stacks=tuple(
                StackDims(stack, tuple(config.stack_plan(stack.name).counts())) for stack in stacks(config)
            ),
            depth=config.num_layers,
        )

    def with_workload(self, batch_size: Num, seq_len: Num, tgt_len: Num | None = None) -> Dims:
        return replace(self, b=batch_size, n=seq_len, n_dec=tgt_len if tgt_len is not None else seq_len)

    @property
    def q(self) -> Num:
        return self.h * self.hd

    @property
    def kv(self) -> Num:
        return self.g * self.hd

    def tokens(self, config: ResolvedShape, stack: Stack) -> tuple[Num, Num]:
        """(tokens per sequence in ``stack``, tokens per sequence of the encoder memory it attends to)."""
        if config.architecture == "encoder-decoder" and stack.name == "decoder":
            return self.n_dec, self.n
        return self.n, self.n

    def widths(self, block: Block) -> FFNWidths:
        return self.ffn[block.name]

    def decoder_blocks(self) -> Iterator[tuple[StackDims, Block, Num]]:
        """Each distinct block of the decoder stack (the one that caches keys, values and recurrent state while
        generating) with its stack and its number of layers; none for an encoder."""
        for sd in self.stacks:
            if sd.name == "decoder":
                for block, layers in sd.blocks:
                    yield sd, block, layers


def norm_has_bias(config: ResolvedShape) -> bool:
    """LayerNorm has a bias (shift) unless ``norm_bias`` is false; RMSNorm never has one."""
    return config.norm == "layernorm" and config.norm_bias


def sublayer_norms(config: ResolvedShape) -> tuple[int, int, int]:
    """Norms per layer in (attention, cross-attention, FFN) by ``norm_placement`` (docs/layers.md, Norms)."""
    placement = config.resolved_norm_placement
    if placement == "sandwich":
        return 2, 2, 2
    if placement == "parallel":
        return 1, 1, 1 if config.parallel_norms == 2 else 0
    return 1, 1, 1


def cross_attention(config: ResolvedShape) -> Attention:
    """The cross-attention of an encoder-decoder's decoder layers (standard, from the flat fields)."""
    return config.cross_attention_block()


def head_width(attention: Attention, x: Dims) -> Num:
    """Per-head width of standard attention: the block's own head_dim (Gemma 4's full layers), else the flat
    head_dim (which a sweep may vary)."""
    return attention.head_dim if attention.own_head_dim else x.hd


def qk_width(attention: Attention, x: Dims) -> Num:
    """Per-head query/key width: head_dim (standard, may be swept) or qk_nope + qk_rope (MLA, fixed)."""
    return (
        head_width(attention, x)
        if not attention.latent
        else attention.qk_nope_head_dim + attention.qk_rope_head_dim
    )


def v_width(attention: Attention, x: Dims) -> Num:
    """Per-head value width: v_head_dim (MLA, or standard attention with its own: MiMo-V2-Flash), else head_dim."""
    return attention.v_head_dim or head_width(attention, x)


def q_heads(attention: Attention, x: Dims) -> Num:
    """Query heads of one attention layer: the block's own (``attention.num_heads``, fixed under a sweep) when it
    sets them (Laguna's per-layer heads), else the flat ``h``."""
    return attention.num_heads if attention.own_heads else x.h


def kv_heads(attention: Attention, x: Dims) -> Num:
    """Key/value heads of one attention layer: every head for latent attention, the block's own
    (``attention.num_kv_heads``, fixed under a sweep) when it sets them, else the flat ``g``."""
    if attention.compressed:  # DeepSeek-V4: one key/value head shared by every query head
        return 1
    if attention.kind != "standard":
        return x.h
    return attention.num_kv_heads if attention.own_kv_heads else x.g


def kv_width(attention: Attention, x: Dims) -> Num:
    """Width of all key (or value) heads of standard attention together."""
    return kv_heads(attention, x) * head_width(attention, x)


def projected_kv_width(attention: Attention, x: Dims) -> Num:
    """Width of what standard attention projects for keys and values: K and V of every KV head (V of
    ``v_head_dim`` when the layer has its own), K alone when the values are the keys, none when it reuses an
    earlier layer's (:func:`projected_kv`)."""
    if attention.kv_shared:
        return 0
    keys = kv_width(attention, x)
    return (
        keys
        if attention.values_from_keys or attention.compressed
        else keys + kv_heads(attention, x) * v_width(attention, x)
    )


def projected_kv(attention: Attention) -> int:
    """How many of K and V standard attention projects itself: 2, 1 when the values are the keys (Gemma 4's
    attention_k_eq_v), 0 when the layer reuses an earlier layer's keys and values (KV sharing)."""
    if attention.kv_shared:
        return 0
    return 1 if attention.values_from_keys or attention.compressed else 2


def per_layer_width(config: ResolvedShape, x: Dims) -> Num:
    """Width of the per-layer embeddings of all layers together (num_layers x per_layer_input_dim; Gemma 3n/4's
    packed per-layer table), 0 without them."""
    return x.depth * config.per_layer_input_dim if config.per_layer_input_dim else 0
