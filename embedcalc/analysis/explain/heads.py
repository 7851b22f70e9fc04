"""The heads topic of ``embedcalc explain``: why num_heads must divide embed_dim (Q4) and how to choose the heads
(Q1), answered on the few integers of a :class:`HeadShape`, which a config that fails validation on its heads still
has. The answer is a frozen dataclass of every number the text shows, as for the other topics
(:mod:`embedcalc.analysis.explain.scale`).

Source: the head split ``(B, T, d) -> (B, T, h, d / h)``, Vaswani et al. 2017, §3.2.2 (d_k = d_model / h).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from embedcalc.analysis.heads import (
    FLASH_ATTENTION_MAX_HEAD_DIM,
    USUAL_HEAD_DIMS,
    HeadChoice,
    head_choices,
    nearest_divisible,
    nearest_divisors,
    nearest_valid_heads,
)
from embedcalc.analysis.memory import kv_cache_bytes
from embedcalc.analysis.workload import Workload
from embedcalc.config.resolved import ResolvedShape


def head_dim_value(embed_dim: int, num_heads: int) -> int | float:
    """``embed_dim / num_heads``: an int when it divides, else the float it would be (76.8 for 768 / 10)."""
    return embed_dim // num_heads if embed_dim % num_heads == 0 else embed_dim / num_heads


def per_token_kv_bytes(config: ResolvedShape, workload: Workload) -> int:
    """KV-cache bytes one more cached token costs (0 for encoders), from the memory model itself."""
    base = replace(workload, batch_size=1, seq_len=1, tgt_len=1, gen_tokens=0)
    return kv_cache_bytes(config, replace(base, gen_tokens=1)) - kv_cache_bytes(config, base)


@dataclass(frozen=True)
class HeadShape:
    """What the heads answer needs; readable from a config that fails validation on its heads."""

    embed_dim: int
    num_heads: int
    num_kv_heads: int
    head_dim: int | None  # explicit head_dim (T5-style); None: embed_dim / num_heads
    num_layers: int  # attention layers of all stacks
    cache_layers: int  # decoder self-attention layers that keep a KV cache (0 for an encoder)
    rope: bool

    @classmethod
    def of(cls, config: ResolvedShape) -> HeadShape:
        arch = config.architecture
        cache = config.num_layers if arch == "decoder" else config.resolved_decoder_layers
        return cls(
            embed_dim=config.embed_dim,
            num_heads=config.num_heads,
            num_kv_heads=config.resolved_kv_heads,
            head_dim=config.head_dim,
            num_layers=config.total_layers,
            cache_layers=cache,
            rope=config.position == "rope",
        )


@dataclass(frozen=True)
class HeadDimOption:
    """One head width for this embed_dim and what it costs (Q1)."""

    head_dim: int
    num_heads: int | float  # embed_dim / head_dim (a float when it does not divide)
    valid: bool
    tensor_core_aligned: bool  # multiple of 8
    flash_attention_ok: bool  # <= FLASH_ATTENTION_MAX_HEAD_DIM
    kv_cache_bytes_per_token_per_kv_head: int  # 2 (K, V) x cache layers x head_dim x bytes
    eager_score_bytes_per_layer: (
        int | None
    )  # batch x heads x n x n x bytes (the matrix eager attention keeps)


@dataclass(frozen=True)
class HeadsAnswer:
    """Q4 (why heads must divide the width) then Q1 (how to choose them), for one shape and workload."""

    embed_dim: int
    num_heads: int
    num_kv_heads: int
    explicit_head_dim: int | None
    head_dim: int | float  # explicit, else embed_dim / num_heads (76.8 for bert-base with 10 heads)
    divisible: bool  # the split works (explicit head_dim, or num_heads divides embed_dim)
    q_dim: int | float  # num_heads x head_dim: the width the Q projection produces and the reshape splits
    batch_size: int
    seq_len: int
    reshape_from: tuple[int, int, int | float]  # (B, T, q_dim)
    reshape_to: tuple[int, int, int, int | float]  # (B, T, h, head_dim)
    nearest_valid_heads: list[int]
    nearest_valid_head_dims: list[int]
    nearest_embed_dims: list[int]  # widths divisible by num_heads, just below and above
    kv_groups: int | float  # query heads per KV head
    kv_heads_divide: bool
    nearest_kv_heads: list[int]
    rope_needs_even: bool  # rope and an odd (or fractional) head_dim
    valid_choices: list[HeadChoice]  # every num_heads dividing embed_dim
    usual_num_heads: list[int]  # those with head_dim 64 or 128
    head_dim_options: list[HeadDimOption]
    kv_cache_bytes_per_token: int  # with this config's KV heads (0 for an encoder); MHA: 2 L d bytes
    kv_cache_standard_formula: bool  # it is 2 x layers x kv heads x head_dim x bytes (not, e.g., latent MLA)
    score_flops_per_token_per_layer: int | float  # 4 n q: the same however q is split into heads
    cache_layers: int
    dtype_bytes: int
    flash_attention_max_head_dim: int = FLASH_ATTENTION_MAX_HEAD_DIM


def explain_heads(shape: HeadShape, workload: Workload, config: ResolvedShape | None = None) -> HeadsAnswer:
    """Q4 then Q1 for ``shape``: the reshape with this config's numbers and the head counts that work. With the
    (valid) ``config``, the KV cache per token comes from the memory model, which knows every attention kind."""
    d, h, kv = shape.embed_dim, shape.num_heads, shape.num_kv_heads
    b, n, e = workload.batch_size, workload.seq_len, workload.activation_bytes
    hd: int | float = shape.head_dim if shape.head_dim is not None else head_dim_value(d, h)
    divisible = isinstance(hd, int)
    q: int | float = h * hd if divisible else d
    nearest = nearest_valid_heads(d, h) if d % h else []
    below, above = nearest_divisible(d, h)
    standard_kv = 2 * shape.cache_layers * kv * int(hd) * e if divisible else 0
    kv_per_token = per_token_kv_bytes(config, workload) if config is not None else standard_kv
    options = []
    for option in USUAL_HEAD_DIMS:
        heads = head_dim_value(d, option)
        options.append(
            HeadDimOption(
                head_dim=option,
                num_heads=heads,
                valid=isinstance(heads, int),
                tensor_core_aligned=option % 8 == 0,
                flash_attention_ok=option <= FLASH_ATTENTION_MAX_HEAD_DIM,
                kv_cache_bytes_per_token_per_kv_head=2 * shape.cache_layers * option * e,
                eager_score_bytes_per_layer=b * heads * n * n * e if isinstance(heads, int) else None,
            )
        )
    return HeadsAnswer(
        embed_dim=d,
        num_heads=h,
        num_kv_heads=kv,
        explicit_head_dim=shape.head_dim,
        head_dim=hd,
        divisible=divisible,
        q_dim=q,
        batch_size=b,
        seq_len=n,
        reshape_from=(b, n, q),
        reshape_to=(b, n, h, hd),
        nearest_valid_heads=nearest,
        nearest_valid_head_dims=[d // x for x in nearest],
        nearest_embed_dims=[x for x in (below, above) if x > 0 and x != d],
        kv_groups=head_dim_value(h, kv),
        kv_heads_divide=h % kv == 0,
        nearest_kv_heads=nearest_divisors(h, kv) if h % kv else [],
        rope_needs_even=shape.rope and (not divisible or int(hd) % 2 == 1),
        valid_choices=head_choices(d),
        usual_num_heads=[c.num_heads for c in head_choices(d) if c.usual],
        head_dim_options=options,
        kv_cache_bytes_per_token=kv_per_token,
        kv_cache_standard_formula=kv_per_token == standard_kv,
        score_flops_per_token_per_layer=4 * n * q,
        cache_layers=shape.cache_layers,
        dtype_bytes=e,
    )
