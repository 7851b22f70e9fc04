"""The numbers behind ``embedcalc explain`` (DESIGN.md §12): the questions the tool grew from, answered on one
config and workload. This module owns the topic list and the width-depth and cost topics; the heads topic is in
:mod:`embedcalc.analysis.explain.heads`, embed-dim and fine-tune in :mod:`embedcalc.analysis.explain.weights`.

Pure arithmetic on a :class:`ModelConfig` (or, for the heads topic, on the few integers of a
:class:`~embedcalc.analysis.explain.heads.HeadShape`, which an invalid config still has); every answer is a frozen
dataclass whose fields are all the numbers the text shows, so ``--format json`` carries them as they are. The
text lives in the message catalogues (``embedcalc/locale``) and the layout in :mod:`embedcalc.render.explain`.
Breakdown keys are read by their segments, so keys added for new layer kinds (``decoder/moe/experts``) land in a
category instead of failing.

Sources of the formulas:
- head split: :mod:`embedcalc.analysis.explain.heads` (the heads topic);
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
from embedcalc.analysis.explain.heads import per_token_kv_bytes
from embedcalc.analysis.flops import forward_flops
from embedcalc.analysis.memory import estimate_memory
from embedcalc.analysis.params import active_params, count_params
from embedcalc.analysis.workload import Workload
from embedcalc.config.resolved import ResolvedShape

TOPICS = ("heads", "width-depth", "fine-tune", "embed-dim", "cost")
CHINCHILLA_TOKENS_PER_PARAM = 20  # Hoffmann et al. 2022, compute-optimal training
KAPLAN_LAYER_FACTOR = 12  # Kaplan et al. 2020, §2.1: N ≈ 2 d_model n_layer (2 d_attn + d_ff) = 12 n_layer d²


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
    crossover_seq_len: int | float | None  # None: no softmax attention layer
    aspect_ratio: float  # embed_dim / num_layers
    depth_threshold: float  # log₃(embed_dim), Levine et al. 2020
    deeper_than_threshold: bool
    chinchilla_tokens: int  # 20 x params
    chinchilla_training_flops: int  # 6 x active params x tokens (a token's compute: Kaplan et al. 2020 §2.1)
    params_active: (
        int  # parameters a token runs through (MoE: top_k of the routed experts); the total if dense
    )
    references: list[ReferenceModel]


def _tokens(config: ResolvedShape, workload: Workload) -> int:
    """Tokens one forward pass processes (an encoder-decoder runs source and target)."""
    n = workload.seq_len
    if config.architecture == "encoder-decoder":
        n += workload.tgt_len if workload.tgt_len is not None else workload.seq_len
    return workload.batch_size * n


def reference_models(
    config: ResolvedShape, label: str, presets: list[tuple[str, ResolvedShape]], count: int = 5
) -> list[ReferenceModel]:
    """``config`` (as ``label``) among the ``count`` presets closest to it in parameter count (log scale),
    smallest first; a preset identical to ``config`` is not listed twice."""

    def row(name: str, c: ResolvedShape, params: int, is_target: bool) -> ReferenceModel:
        layers = c.total_layers
        return ReferenceModel(name, params, c.embed_dim, layers, c.num_heads, c.resolved_head_dim,
                              round(c.embed_dim / layers, 1), is_target)  # fmt: skip

    size = count_params(config).total
    others = [(name, c, count_params(c).total) for name, c in presets if c != config]
    others.sort(key=lambda item: abs(math.log(item[2] / size)))
    rows = [row(name, c, params, False) for name, c, params in others[:count]]
    rows.append(row(label, config, size, True))
    return sorted(rows, key=lambda r: (r.params, not r.is_target))


def explain_width_depth(
    config: ResolvedShape, workload: Workload, presets: list[tuple[str, ResolvedShape]], label: str = ""
) -> WidthDepthAnswer:
    """Q2 for ``config`` (called ``label`` in the table); ``presets`` are the shipped models to compare with,
    loaded by the caller."""
    params = count_params(config)
    categories = {"attention": 0, "ffn": 0, "norms": 0, "embedding": 0, "other": 0}
    for key, value in params.items():
        categories[param_category(key)] += value
    d, layers = config.embed_dim, config.total_layers
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
        kv_cache_bytes_per_token=per_token_kv_bytes(config, workload),
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
    crossover_seq_len: int | float | None  # None: no softmax attention layer
    seq_len_over_crossover: float | None
    doubled_seq_len: int
    doubled_forward_flops: int
    doubled_score_share: float
    weights_bytes: int
    gradients_bytes: int
    optimizer_bytes: int
    activations_bytes: int
    kv_cache_bytes: int
    total_bytes: int


def explain_cost(config: ResolvedShape, workload: Workload) -> CostAnswer:
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
        seq_len_over_crossover=None if crossover is None else round(workload.seq_len / crossover, 4),
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
