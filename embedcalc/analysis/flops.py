"""Forward FLOPs per component (DESIGN.md §4, §9; docs/layers.md): 2 FLOPs per multiply-accumulate, matmuls only.

This is exactly what ``torch.utils.flop_counter.FlopCounterMode`` counts for the model ``embedcalc.modeling``
builds (mm/addmm/bmm and attention): bias adds, softmax, norms, activations, sink logits, a router's top-k and
residual adds are not matmuls and are estimated separately (:mod:`embedcalc.analysis.elementwise`). Embedding
lookups count 0.

Per layer of a stack run on ``b`` sequences of ``n`` tokens (t = b * n), d = embed_dim, h = num_heads:

- attention (standard, multi-head latent, sparse, block-sparse, disentangled, cross-attention) and the query-key
  pairs its cores compute, full, causal, windowed, chunked: :mod:`embedcalc.analysis.attention`.
- a shared block (Zamba2, config/shared_spec.py) at every use: attention with ``qkv`` 2 t w (h + 2 g) hd, w = 2 d (the
  input concatenated with the embeddings) or d, the FFN, ``shared/attention_adapters``, ``shared/ffn_adapters`` and
  ``shared/projection`` (:func:`shared_flops`).
- a sublayer replaced by a linear (``replace_with_linear``): ``mixer/projection`` or ``ffn/projection`` 2 t d d.
- dense FFN: ``ffn/in`` 2 t d f (gated: 2 t d 2f), ``ffn/out`` 2 t f d.
- mixture of experts, the active path only: ``moe/router`` 2 t d E, ``moe/experts`` 2 t k (d fe_in + fe d) (every
  token reaches exactly top_k experts, so this does not depend on the routing), ``moe/shared`` 2 t (d fs_in + fs d),
  ``moe/shared_gate`` 2 t d; with a latent width L (Nemotron-3's latent MoE) the experts read and write L in place
  of d and ``moe/latent`` adds the two projections around them, 2 t (d L + L d). Zero experts Z (LongCat-Flash)
  widen the router to 2 t d (E + Z); the experts count top_k real experts per token, the most a token uses.
- hyper-connections (DeepSeek-V4): ``hyper/<sublayer>`` and ``hyper_head`` (:mod:`embedcalc.analysis.hyper`).
- ``pooler`` 2 b d d (first token only, BERT); ``head/lm`` 2 b n d_tok vocab on every position of the last stack;
  with token_embed_dim != embed_dim ``embedding/project_in`` 2 t d_tok d on every stack's tokens and
  ``head/project_out`` 2 b n d d_tok; a drafter's input and output projections and centroid-masked head as
  :mod:`embedcalc.analysis.drafter` counts them.

The full n x n score matrix is counted, and the causal count beside it (:mod:`embedcalc.analysis.attention`). A
training step is forward + backward with backward = 2 x forward for matmuls (Kaplan et al. 2020, §2.1). Every term
function takes :class:`~embedcalc.analysis.structure.Dims`, so sweeps evaluate them on numpy arrays.
"""

from __future__ import annotations

from dataclasses import dataclass

from embedcalc.analysis.altup import altup_layer_flops, altup_model_flops, laurel_flops
from embedcalc.analysis.attention import attention_flops, disentangled_flops, score_pairs
from embedcalc.analysis.breakdown import Breakdown
from embedcalc.analysis.compressed import compressed_flops
from embedcalc.analysis.drafter import head_flops, input_flops
from embedcalc.analysis.elementwise import elementwise_flops
from embedcalc.analysis.hyper import hyper_head_flops, hyper_layer_flops
from embedcalc.analysis.indexers import block_indexer_flops, indexer_flops
from embedcalc.analysis.mixers import mixer_flops
from embedcalc.analysis.structure import (
    Dims,
    Num,
    cross_attention,
    head_width,
    kv_width,
    per_layer_width,
    q_heads,
    stacks,
)
from embedcalc.analysis.workload import Workload
from embedcalc.config.altup import has_laurel
from embedcalc.config.layer_plan import FFN, Block
from embedcalc.config.resolved import ResolvedShape

SCORE_KEYS = ("scores", "context", "index_scores")
TRAINING_STEP_FACTOR = 3  # forward + backward, backward = 2 x forward for matmuls


@dataclass(frozen=True)
class FlopsEstimate:
    """Forward FLOPs by component, the causal variant, and the training step."""

    breakdown: Breakdown
    causal_breakdown: Breakdown | None  # None when no stack is causal
    elementwise: Breakdown

    @property
    def forward(self) -> int:
        return self.breakdown.total

    @property
    def forward_causal(self) -> int | None:
        return None if self.causal_breakdown is None else self.causal_breakdown.total

    @property
    def training_step(self) -> int:
        return TRAINING_STEP_FACTOR * self.forward

    @property
    def attention_score_flops(self) -> int:
        """The O(n²) part: Q·Kᵀ and A·V of every attention layer."""
        return sum(v for k, v in self.breakdown.items() if is_score_key(k))

    @property
    def attention_score_flops_causal(self) -> int | None:
        """The score FLOPs of the query-key pairs a causal (and windowed or chunked) layer really uses."""
        if self.causal_breakdown is None:
            return None
        return sum(v for k, v in self.causal_breakdown.items() if is_score_key(k))

    @property
    def attention_score_share(self) -> float:
        return self.attention_score_flops / self.forward if self.forward else 0.0


def is_score_key(key: str) -> bool:
    return key.rsplit("/", 1)[-1] in SCORE_KEYS


# --- per-layer terms ------------------------------------------------------------------------------------------


def ffn_flops(ffn: FFN, block: Block, x: Dims, layers: Num, t: Num) -> list[tuple[str, Num]]:
    """Forward FLOPs of ``layers`` layers of one FFN sublayer on ``t`` tokens (MoE: the active path)."""
    d, w = x.d, x.widths(block)
    if not ffn.moe:
        f_in = 2 * w.f if ffn.gated else w.f
        return [("ffn/in", t * (layers * 2 * d * f_in)), ("ffn/out", t * (layers * 2 * w.f * d))]
    fe_in = 2 * w.fe if ffn.gated else w.fe
    di = ffn.latent_dim or d  # the width the routed experts read and write
    out = [
        ("moe/router", t * (layers * 2 * d * (ffn.num_experts + ffn.zero_experts))),
        ("moe/experts", t * (layers * 2 * ffn.top_k * (di * fe_in + w.fe * di))),
    ]
    if ffn.latent_dim:
        out.append(("moe/latent", t * (layers * 2 * 2 * d * ffn.latent_dim)))
    if ffn.shared_dim:
        fs_in = 2 * w.fs if ffn.gated else w.fs
        out.append(("moe/shared", t * (layers * 2 * (d * fs_in + w.fs * d))))
    if ffn.shared_gate:
        out.append(("moe/shared_gate", t * (layers * 2 * d)))
    return out


def shared_flops(block: Block, x: Dims, layers: Num, n: Num, causal: bool) -> list[tuple[str, Num]]:
    """Forward FLOPs of ``layers`` uses of a shared block (config/shared_spec.py, Zamba2) on b sequences of n tokens:
    attention whose Q/K/V read w = 2 d (the input and the embeddings) or d, the FFN, the per-use adapters
    (``shared/attention_adapters`` 2 t (w r + r q) for q and 2 t (w r + r kv) each for k and v;
    ``shared/ffn_adapters`` 2 t (d r + r f_in)) and ``shared/projection`` 2 t d d."""
    use, a, ffn = block.shared, block.attention, block.ffn
    assert use is not None and a is not None and ffn is not None  # the schema's rule (check_shared)
    t, wide, r = x.b * n, 2 * x.d if use.embeddings else x.d, use.adapter_rank
    pairs = score_pairs(n, causal, a.window, a.chunk)
    terms = attention_flops(a, x, layers, t, t, x.b * pairs, "attention", d_in=wide)
    terms += ffn_flops(ffn, block, x, layers, t)
    if use.attention_adapters:
        widths = q_heads(a, x) * head_width(a, x) + 2 * kv_width(a, x)
        terms.append(("shared/attention_adapters", t * (layers * 2 * (3 * wide * r + r * widths))))
    if use.ffn_adapters:
        f = x.widths(block).f
        terms.append(("shared/ffn_adapters", t * (layers * 2 * r * (x.d + (2 * f if ffn.gated else f)))))
    return [*terms, ("shared/projection", t * (layers * 2 * x.d * x.d))]


def layer_flops(
    config: ResolvedShape,
    x: Dims,
    block: Block,
    layers: Num,
    n: Num,
    n_mem: Num,
    causal: bool,
    cross: bool,
    pad_chunks: bool = True,
) -> list[tuple[str, Num]]:
    """Forward FLOPs of ``layers`` layers of ``block`` (keys relative to the stack); ``pad_chunks`` false counts a
    chunked scan per token, without the last chunk's padding (the crossover's per-token rate)."""
    b = x.b
    t = b * n
    a = block.attention
    terms: list[tuple[str, Num]] = []
    if (
        block.shared is not None and block.mixer is not None
    ):  # Zamba2: the shared block, then the layer's mixer
        return shared_flops(block, x, layers, n, causal) + mixer_flops(
            block.mixer, x, layers, n, pad=pad_chunks
        )
    if a is not None and a.external:  # K and V of the external tokens; every query sees all of them
        terms += attention_flops(a, x, layers, t, b * a.context, b * (n * a.context), "attention", cross=True)
    elif a is not None and a.compressed:  # DeepSeek-V4 (analysis/compressed.py), then its output projection
        h, hd = q_heads(a, x), head_width(a, x)
        local = score_pairs(n, causal, a.window)
        terms += compressed_flops(a, x, layers, t, b, n, h, hd, causal, local, "attention")
        terms += [
            term for term in attention_flops(a, x, layers, t, t, 0, "attention") if term[0] == "attention/out"
        ]
    elif a is not None:
        topk = a.index_topk if a.kind == "sparse" else None
        blocks = (a.index_topk, a.index_block_size) if a.block_indexer else None
        pairs = score_pairs(n, causal, a.window, a.chunk, topk, blocks)
        terms += attention_flops(a, x, layers, t, t, b * pairs, "attention")
        if a.indexer:  # scores every earlier token (all n² pairs in full, as the torch path computes them)
            terms += indexer_flops(a, x, layers, t, b * score_pairs(n, causal), "attention")
        if a.block_indexer:
            terms += block_indexer_flops(a, x, layers, t, b * score_pairs(n, causal), "attention")
        if config.disentangled is not None:
            terms += disentangled_flops(config.disentangled, x, layers, t)
    if block.mixer is not None:
        terms += mixer_flops(block.mixer, x, layers, n, pad=pad_chunks)
    if cross:
        terms += attention_flops(cross_attention(config), x, layers, t, b * n_mem, b * (n * n_mem), "cross_attention",
                                 cross=True)  # fmt: skip
    terms += ffn_flops(block.ffn, block, x, layers, t) if block.ffn is not None else []
    terms += [(f"{where}/projection", t * (layers * 2 * x.d * x.d)) for where in block.projections]
    p = config.per_layer_input_dim
    if p:  # Gemma 3n/4: the per-layer input's gate (d -> p) and projection back (p -> d)
        terms += [
            ("per_layer/gate", t * (layers * 2 * x.d * p)),
            ("per_layer/out", t * (layers * 2 * p * x.d)),
        ]
    if config.altup_inputs:  # Gemma 3n (analysis/altup.py)
        terms += altup_layer_flops(config.altup_inputs, x.d, layers, t)
    if config.laurel_rank and has_laurel(config.laurel_rank, block):
        terms += laurel_flops(config.laurel_rank, x.d, layers, t)
    if config.hyper_connections:  # DeepSeek-V4 (analysis/hyper.py)
        terms += hyper_layer_flops(config.hyper_connections, x.d, block, layers, t)
    return terms


def forward_terms(config: ResolvedShape, x: Dims, causal: bool) -> dict[str, Num]:
    """Forward FLOPs by breakdown key at sizes ``x`` (ints or arrays), full or causal self-attention scores."""
    out: dict[str, Num] = {}

    def add(key: str, value: Num) -> None:
        out[key] = out[key] + value if key in out else value

    b, d, d_tok = x.b, x.d, x.d_tok
    if config.embedding_projection:
        tokens: Num = 0
        for sd in x.stacks:
            tokens = tokens + b * x.tokens(config, sd.stack)[0]
        add("embedding/project_in", tokens * (2 * d_tok * d))
    for key, value in input_flops(config, b * x.n, d):  # a drafter's input from its target
        add(key, value)
    if config.per_layer_input_dim:  # per_layer_model_projection: d -> L x p on every token
        add("embedding/per_layer_project", b * x.n * (2 * d * per_layer_width(config, x)))
    if config.altup_inputs:  # Gemma 3n: AltUp's copies of the embedded tokens (a decoder's single stack)
        add("embedding/altup_project", altup_model_flops(config.altup_inputs, d, b * x.n))
    for sd in x.stacks:
        n, n_mem = x.tokens(config, sd.stack)
        for block, layers in sd.blocks:
            terms = layer_flops(config, x, block, layers, n, n_mem, causal and sd.stack.causal,
                                sd.stack.cross_attention)  # fmt: skip
            for key, value in terms:
                add(f"{sd.name}/{key}", value)
        if config.altup_inputs:  # Gemma 3n: AltUp's copies folded back before the final norm
            add(f"{sd.name}/altup_unembed", altup_model_flops(config.altup_inputs, d, b * n))
        if config.hyper_connections:  # DeepSeek-V4: the streams collapsed before the final norm
            add(f"{sd.name}/hyper_head", hyper_head_flops(config.hyper_connections, d, b * n))
    if config.resolved_pooler:
        add("pooler", b * (2 * d * d))
    n_last, _ = x.tokens(config, x.stacks[-1].stack)
    for key, value in head_flops(config, b * n_last, d, d_tok):  # analysis/drafter.py
        add(key, value)
    return out


def crossover_terms(config: ResolvedShape, x: Dims) -> tuple[Num, Num]:
    """(linear, quadratic) coefficients of the first stack's forward FLOPs per sequence at n = 1, b = 1: the
    projections + FFN per token and the full-score FLOPs per token per unit of n (see ``crossover.py``), so that
    n* = linear / quadratic. A sparse layer's core grows as n min(n, k): when n* lands past its k, the core's
    c n k joins the linear side with a minus (scores c n k + I n² = linear n gives n* = (linear - c k) / I)."""
    sd = x.stacks[0]
    linear: Num = 0
    quadratic: Num = 0
    capped: dict[int, Num] = {}  # a sparse layer's core coefficient c, by its top-k
    for block, layers in sd.blocks:
        topk = (
            block.attention.index_topk
            if block.attention is not None and block.attention.kind == "sparse"
            else 0
        )
        if block.attention is not None and block.attention.external:
            # cross-attention over m external tokens grows linearly in n (its K and V are a per-sequence
            # constant, left out): its per-token rate, forward(2) - forward(1), joins the linear side
            at = [dict(layer_flops(config, x, block, layers, k, 1, False, False, False)) for k in (1, 2)]
            linear = linear + sum(at[1][key] - at[0].get(key, 0) for key in at[1])
            continue
        for key, value in layer_flops(config, x, block, layers, 1, 1, False, sd.stack.cross_attention, False):
            if is_score_key(key):
                quadratic = quadratic + value
                if topk and key.rsplit("/", 1)[-1] in ("scores", "context"):
                    capped[topk] = capped.get(topk, 0) + value
            else:
                linear = linear + value
    for topk in sorted(capped):  # one k in every model here; the smallest first
        past = linear > topk * quadratic  # n* > k
        linear = where(past, linear - capped[topk] * topk, linear)
        quadratic = where(past, quadratic - capped[topk], quadratic)
    return linear, quadratic


def where(condition: Num | bool, a: Num, b: Num) -> Num:
    """``a`` where ``condition`` else ``b``: for Python ints exactly, element-wise for arrays."""
    if isinstance(condition, bool):
        return a if condition else b
    import numpy as np

    return np.where(condition, a, b)


def _breakdown(terms: dict[str, Num]) -> Breakdown:
    out = Breakdown()
    for key, value in terms.items():
        out.add(key, value)
    return out


def forward_flops(config: ResolvedShape, workload: Workload) -> FlopsEstimate:
    """Forward-pass matmul FLOPs of ``config`` on ``workload``, by component, with causal and element-wise views."""
    x = Dims.of(config, workload.batch_size, workload.seq_len, workload.tgt_len)
    has_causal = any(s.causal for s in stacks(config))
    return FlopsEstimate(
        breakdown=_breakdown(forward_terms(config, x, causal=False)),
        causal_breakdown=_breakdown(forward_terms(config, x, causal=True)) if has_causal else None,
        elementwise=elementwise_flops(config, workload),
    )
