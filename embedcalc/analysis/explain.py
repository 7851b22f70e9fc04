"""The numbers behind ``embedcalc explain`` (DESIGN.md §12): the questions the tool grew from, answered on one
config and workload.

Pure arithmetic on a :class:`ModelConfig` (or, for the heads topic, on the few integers of a :class:`HeadShape`,
which an invalid config still has); every answer is a frozen dataclass whose fields are all the numbers the text
shows, so ``--format json`` carries them as they are. The text lives in the message catalogues
(``embedcalc/locale``) and the layout in :mod:`embedcalc.render.explain`. Breakdown keys are read by their
segments, so keys added for new layer kinds (``decoder/moe/experts``) land in a category instead of failing.

Sources of the formulas:
- head split: ``(B, T, d) -> (B, T, h, d / h)``, Vaswani et al. 2017, §3.2.2 (d_k = d_model / h);
- ``N ≈ 12 L d²`` non-embedding parameters and ``C_forward ≈ 2 N + 2 L n d_attn`` FLOPs per token: Kaplan et al.
  2020, §2.1; loss depends weakly on shape at fixed N: §3.1 (Figure 5);
- depth threshold ``L_th = log₃(d)``: Levine et al. 2020 ("Limits to Depth Efficiencies of Self-Attention");
- about 20 training tokens per parameter and ``6 N D`` training FLOPs: Hoffmann et al. 2022 (Chinchilla);
- the attention crossover n*: :mod:`embedcalc.analysis.crossover`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from embedcalc.analysis.crossover import crossover_seq_len
from embedcalc.analysis.flops import forward_flops
from embedcalc.analysis.heads import (
    FLASH_ATTENTION_MAX_HEAD_DIM,
    USUAL_HEAD_DIMS,
    HeadChoice,
    head_choices,
    nearest_divisible,
    nearest_divisors,
    nearest_valid_heads,
)
from embedcalc.analysis.memory import estimate_memory
from embedcalc.analysis.memory_inference import kv_cache_bytes
from embedcalc.analysis.params import active_params, count_params
from embedcalc.analysis.workload import Workload
from embedcalc.config.schema import ModelConfig

TOPICS = ("heads", "width-depth", "fine-tune", "embed-dim", "cost")
CHINCHILLA_TOKENS_PER_PARAM = 20  # Hoffmann et al. 2022, compute-optimal training
KAPLAN_LAYER_FACTOR = 12  # Kaplan et al. 2020, §2.1: N ≈ 2 d_model n_layer (2 d_attn + d_ff) = 12 n_layer d²


def head_dim_value(embed_dim: int, num_heads: int) -> int | float:
    """``embed_dim / num_heads``: an int when it divides, else the float it would be (76.8 for 768 / 10)."""
    return embed_dim // num_heads if embed_dim % num_heads == 0 else embed_dim / num_heads


def _per_token_kv_bytes(config: ModelConfig, workload: Workload) -> int:
    """KV-cache bytes one more cached token costs (0 for encoders), from the memory model itself."""
    base = replace(workload, batch_size=1, seq_len=1, tgt_len=1, gen_tokens=0)
    return kv_cache_bytes(config, replace(base, gen_tokens=1)) - kv_cache_bytes(config, base)


# --- heads: why num_heads must divide embed_dim, and how to choose them -------------------------------------


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
    def of(cls, config: ModelConfig) -> HeadShape:
        arch = config.architecture
        cache = config.num_layers if arch == "decoder" else config.resolved_decoder_layers
        return cls(
            embed_dim=config.embed_dim,
            num_heads=config.num_heads,
            num_kv_heads=config.resolved_kv_heads,
            head_dim=config.head_dim,
            num_layers=config.num_layers + config.resolved_decoder_layers,
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


def explain_heads(shape: HeadShape, workload: Workload, config: ModelConfig | None = None) -> HeadsAnswer:
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
    kv_per_token = _per_token_kv_bytes(config, workload) if config is not None else standard_kv
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


# --- width and depth --------------------------------------------------------------------------------------


FFN_SEGMENTS = ("ffn", "moe", "mlp")


def _sublayer(segments: list[str]) -> str | None:
    """``attention`` or ``ffn`` for the sublayer a stack key's second segment names, else None."""
    if len(segments) > 1 and "attention" in segments[1]:
        return "attention"
    if len(segments) > 1 and segments[1] in FFN_SEGMENTS:
        return "ffn"
    return None


def param_category(key: str) -> str:
    """``attention``, ``ffn``, ``norms``, ``embedding`` or ``other`` for a breakdown key (new keys included)."""
    segments = key.split("/")
    if segments[0] in ("embedding", "head"):
        return "embedding"
    if any("norm" in s for s in segments[1:]):
        return "norms"
    return _sublayer(segments) or "other"


@dataclass(frozen=True)
class ReferenceModel:
    """A shipped preset of similar size, for the width/depth table."""

    name: str
    params: int
    embed_dim: int
    num_layers: int
    num_heads: int
    head_dim: int
    aspect_ratio: float  # embed_dim / num_layers
    is_target: bool


@dataclass(frozen=True)
class WidthDepthAnswer:
    """Q2: how embed_dim and depth together set size, cost and the KV cache."""

    embed_dim: int
    num_layers: int  # all stacks
    params_total: int
    params_non_embedding: int  # N of Kaplan et al.: without token/position tables and the LM head
    params_by_category: dict[str, int]  # attention, ffn, norms, embedding, other
    params_per_layer: int  # non-embedding params of the stacks / layers
    approx_12_l_d2: int  # 12 L d²
    approx_ratio: float  # N / 12 L d²
    seq_len: int
    flops_per_token: int | float  # this workload's forward FLOPs / tokens processed
    kaplan_flops_per_token: int  # 2 N + 2 L n d_attn
    kv_cache_bytes_per_token: int
    crossover_seq_len: int | float
    aspect_ratio: float  # embed_dim / num_layers
    depth_threshold: float  # log₃(embed_dim), Levine et al. 2020
    deeper_than_threshold: bool
    chinchilla_tokens: int  # 20 x params
    chinchilla_training_flops: int  # 6 x active params x tokens (a token's compute: Kaplan et al. 2020 §2.1)
    params_active: int  # parameters a token runs through (MoE: top_k of the routed experts); the total if dense
    references: list[ReferenceModel]


def _layers(config: ModelConfig) -> int:
    return config.num_layers + config.resolved_decoder_layers


def _tokens(config: ModelConfig, workload: Workload) -> int:
    """Tokens one forward pass processes (an encoder-decoder runs source and target)."""
    n = workload.seq_len
    if config.architecture == "encoder-decoder":
        n += workload.tgt_len if workload.tgt_len is not None else workload.seq_len
    return workload.batch_size * n


def reference_models(
    config: ModelConfig, label: str, presets: list[tuple[str, ModelConfig]], count: int = 5
) -> list[ReferenceModel]:
    """``config`` (as ``label``) among the ``count`` presets closest to it in parameter count (log scale),
    smallest first; a preset identical to ``config`` is not listed twice."""

    def row(name: str, c: ModelConfig, params: int, is_target: bool) -> ReferenceModel:
        layers = _layers(c)
        return ReferenceModel(name, params, c.embed_dim, layers, c.num_heads, c.resolved_head_dim,
                              round(c.embed_dim / layers, 1), is_target)  # fmt: skip

    size = count_params(config).total
    others = [(name, c, count_params(c).total) for name, c in presets if c != config]
    others.sort(key=lambda item: abs(math.log(item[2] / size)))
    rows = [row(name, c, params, False) for name, c, params in others[:count]]
    rows.append(row(label, config, size, True))
    return sorted(rows, key=lambda r: (r.params, not r.is_target))


def explain_width_depth(
    config: ModelConfig, workload: Workload, presets: list[tuple[str, ModelConfig]], label: str = ""
) -> WidthDepthAnswer:
    """Q2 for ``config`` (called ``label`` in the table); ``presets`` are the shipped models to compare with,
    loaded by the caller."""
    params = count_params(config)
    categories = {"attention": 0, "ffn": 0, "norms": 0, "embedding": 0, "other": 0}
    for key, value in params.items():
        categories[param_category(key)] += value
    d, layers = config.embed_dim, _layers(config)
    non_embedding = params.total - categories["embedding"]
    # a token's compute runs through the active parameters (MoE: top_k of the routed experts; Fedus et al. 2021)
    active = active_params(config)
    active_non_embedding = non_embedding - (params.total - active)
    stack_params = categories["attention"] + categories["ffn"] + categories["norms"]
    approx = KAPLAN_LAYER_FACTOR * layers * d * d
    forward = forward_flops(config, workload).forward
    tokens = _tokens(config, workload)
    threshold = math.log(d, 3)
    return WidthDepthAnswer(
        embed_dim=d,
        num_layers=layers,
        params_total=params.total,
        params_non_embedding=non_embedding,
        params_by_category=categories,
        params_per_layer=stack_params // layers,
        approx_12_l_d2=approx,
        approx_ratio=round(non_embedding / approx, 3),
        seq_len=workload.seq_len,
        flops_per_token=forward // tokens if forward % tokens == 0 else forward / tokens,
        kaplan_flops_per_token=2 * active_non_embedding + 2 * layers * workload.seq_len * config.q_dim,
        kv_cache_bytes_per_token=_per_token_kv_bytes(config, workload),
        crossover_seq_len=crossover_seq_len(config),
        aspect_ratio=round(d / layers, 1),
        depth_threshold=round(threshold, 2),
        deeper_than_threshold=layers > threshold,
        chinchilla_tokens=CHINCHILLA_TOKENS_PER_PARAM * params.total,
        chinchilla_training_flops=6 * active * CHINCHILLA_TOKENS_PER_PARAM * params.total,
        params_active=active,
        references=reference_models(config, label or config.label, presets),
    )


# --- cost ---------------------------------------------------------------------------------------------------


def flop_category(key: str) -> str:
    """``projections``, ``scores`` (the O(n²·d) terms), ``ffn`` or ``head`` for a FLOP breakdown key."""
    segments = key.split("/")
    if segments[-1] in ("scores", "context"):
        return "scores"
    return {"attention": "projections", "ffn": "ffn"}.get(_sublayer(segments) or "", "head")


@dataclass(frozen=True)
class CostAnswer:
    """Where the FLOPs and the memory of one workload go, and the attention crossover n*."""

    batch_size: int
    seq_len: int
    dtype: str
    mode: str
    forward_flops: int
    forward_causal_flops: int | None
    training_step_flops: int
    flops_by_category: dict[str, int]  # projections, scores, ffn, head
    score_share: float
    flops_per_token: int | float
    crossover_seq_len: int | float
    seq_len_over_crossover: float
    doubled_seq_len: int
    doubled_forward_flops: int
    doubled_score_share: float
    weights_bytes: int
    gradients_bytes: int
    optimizer_bytes: int
    activations_bytes: int
    kv_cache_bytes: int
    total_bytes: int


def explain_cost(config: ModelConfig, workload: Workload) -> CostAnswer:
    """The cost walk-through for ``config`` on ``workload``: FLOPs by kind, the n² share, memory by kind."""
    flops = forward_flops(config, workload)
    categories = {"projections": 0, "scores": 0, "ffn": 0, "head": 0}
    for key, value in flops.breakdown.items():
        categories[flop_category(key)] += value
    doubled = replace(workload, seq_len=2 * workload.seq_len, tgt_len=None if workload.tgt_len is None
                      else 2 * workload.tgt_len)  # fmt: skip
    flops2 = forward_flops(config, doubled)
    memory = estimate_memory(config, workload)
    crossover = crossover_seq_len(config)
    tokens = _tokens(config, workload)
    return CostAnswer(
        batch_size=workload.batch_size,
        seq_len=workload.seq_len,
        dtype=workload.dtype,
        mode=workload.mode,
        forward_flops=flops.forward,
        forward_causal_flops=flops.forward_causal,
        training_step_flops=flops.training_step,
        flops_by_category=categories,
        score_share=round(flops.attention_score_share, 4),
        flops_per_token=flops.forward // tokens if flops.forward % tokens == 0 else flops.forward / tokens,
        crossover_seq_len=crossover,
        seq_len_over_crossover=round(workload.seq_len / crossover, 4),
        doubled_seq_len=doubled.seq_len,
        doubled_forward_flops=flops2.forward,
        doubled_score_share=round(flops2.attention_score_share, 4),
        weights_bytes=memory.weights_bytes,
        gradients_bytes=memory.gradients_bytes,
        optimizer_bytes=memory.optimizer_bytes,
        activations_bytes=memory.activations_bytes,
        kv_cache_bytes=memory.kv_cache_bytes,
        total_bytes=memory.total_bytes,
    )
