"""The attention sublayer's terms (DESIGN.md §4, §9; docs/layers.md): its parameter tensors
(:func:`attention_tensors`) and its FLOPs, the projections and the two cores over the query-key pairs each head
computes (``scores`` Q·Kᵀ and ``context`` A·V, the terms that grow as n²), and the pairs themselves, full, causal,
windowed, chunked, top-k and block-sparse (:func:`score_pairs`).

Parameters, with the conventions of :mod:`embedcalc.analysis.params` (the model ``embedcalc.modeling`` builds and
Hugging Face's models for the presets):

- standard attention: Q/K/V projections embed_dim -> (num_heads + 2 * num_kv_heads) * head_dim (one fused tensor
  here, the layout Megatron-LM shards) and an output projection (num_heads * head_dim) -> embed_dim; biases per
  projection (``qkv_bias``, ``out_bias``; Qwen2 has Q/K/V biases and no output bias); q/k norms per head_dim
  (Qwen3, Gemma 3) or over all heads (OLMo 2); a sink logit per head (gpt-oss). Cross-attention over an
  external sequence (``attention.cross``, Llama-3.2-Vision) has the same tensors (its K/V input is embed_dim wide).
- multi-head latent attention (DeepSeek-V2 §2.1): q_a / q_a_norm / q_b (or one full-rank q), kv_a (with the shared
  rope key) / kv_a_norm / kv_b, out; sparse attention adds its lightning indexer (DeepSeek-V3.2-Exp §2.1):
  index_q (q_lora_rank -> index_heads x index_head_dim), index_k (embed_dim -> index_head_dim) and its LayerNorm
  index_k_norm, index_weights (embed_dim -> index_heads); a layer sharing the previous selection has none; without
  a query rank (Mistral Large 4) index_q reads the input through a LayerNorm index_input_norm. query_scale adds a
  scale and a bias per head (query_scale, and index_query_scale on the indexer).
  Block-sparse standard attention (MiniMax-M3) adds its block indexer: index_q (embed_dim -> index_heads x
  index_head_dim), index_k (embed_dim -> index_head_dim) and their RMSNorms over index_head_dim (index_q_norm,
  index_k_norm). The indexers' tensors are :mod:`embedcalc.analysis.indexers`'.
- on any kind: DeBERTa's position projections (``pos_proj``, one per term unless share_att_key), Qwen3-Next's
  output gate (``gate``), Laguna's per-head gate (``head_gate``), DeepSeek-V4's grouped low-rank output (``out``
  in two parts; its compressed attention in :mod:`embedcalc.analysis.compressed`) and Mllama's ``tanh_gate``.

FLOPs, with the conventions of :mod:`embedcalc.analysis.flops` (2 FLOPs per multiply-accumulate, matmuls only, what
``FlopCounterMode`` counts on the model ``embedcalc.modeling`` builds), per layer of a stack run on ``b`` sequences
of ``n`` tokens (t = b * n), d = embed_dim, h = num_heads, ``pairs`` the query-key pairs per head:

- standard attention: ``qkv`` 2 t d (h + 2 g) hd, ``scores`` and ``context`` 2 b h pairs hd each (the O(n²·d)
  terms), ``out`` 2 t h hd d.
- multi-head latent attention (DeepSeek-V2 §2.1): ``q_a`` 2 t d r_q, ``q_b`` 2 t r_q h (nope + rope) (or ``q``
  2 t d h (nope + rope)), ``kv_a`` 2 t d (r_kv + rope), ``kv_b`` 2 t r_kv h (nope + v), ``scores``
  2 b h pairs (nope + rope), ``context`` 2 b h pairs v, ``out`` 2 t h v d.
- sparse attention (DeepSeek Sparse Attention, DeepSeek-V3.2-Exp report §2.1-2.2): MLA's terms with each query's
  core over the k = index_topk keys its lightning indexer selects, so ``scores`` and ``context`` count n min(n, k)
  pairs per head in full and min(i + 1, k) for the query at position i causally (the window formula with W = k:
  linear in n once n > k), plus the indexer on every pair (:mod:`embedcalc.analysis.indexers`): ``index_q``
  2 t r_q H_I D_I, ``index_k`` 2 t d D_I, ``index_weights`` 2 t d H_I, ``index_scores`` 2 b pairs H_I (D_I + 1)
  with all n² (causal n (n + 1) / 2) pairs, the O(n²) term that remains. transformers' eager path runs the core
  over all n keys with the unselected ones masked, so its count equals this one while n <= k.
- block-sparse attention (MiniMax-M3, transformers' ``MiniMaxM3VLAttention`` with its ``MiniMaxM3VLIndexer``):
  standard attention's terms, the core over all n keys with the unselected blocks masked (n² in full; causally the
  keys of the k blocks of B a query keeps, its own among them: min(i + 1, (k - 1) B + i mod B + 1) for the query
  at position i), plus the indexer: ``index_q`` 2 t d H_I D_I, ``index_k`` 2 t d D_I and ``index_scores``
  2 b pairs H_I D_I over all n² (causal n (n + 1) / 2) pairs.
- disentangled attention (DeBERTa, He et al. 2021 §3.1; transformers' ``DisentangledSelfAttention``) adds, with
  R = 2 span table rows and P its projections per layer (2 when share_att_key, else one per term):
  ``pos_proj`` 2 R d h hd P (the table is projected once per layer, not per sequence) and ``pos_scores``
  2 b n h R hd per term (c2p: Q against the R position keys, p2c: K against the R position queries; a gather then
  picks each pair's entry, no FLOPs). Both grow linearly in n: they are not score terms.
- cross-attention (decoder of an encoder-decoder, m target and n source tokens): Q and out on the m target
  tokens, K and V on the n encoder outputs, scores and context 2 b h m n head_dim each.
- cross-attention over an external sequence (``attention.cross``, Llama-3.2-Vision; m = context_tokens): Q and
  out on the t text tokens, K and V on the b m external tokens, ``scores`` and ``context`` 2 b h n m head_dim each
  (O(n m d): linear in the text length), the same in full and causally (no query is masked). Its K and V are
  computed once per sequence, so a decode step (forward(n) - forward(n - 1)) has none and its cores read m keys.

The full n x n score matrix is counted (that is what eager attention and FlopCounterMode do); the causal count is
reported beside it, with only the unmasked query-key pairs of causal self-attention: n (n + 1) / 2; with a window
W, m (m + 1) / 2 + (n - m) W, m = min(n, W) (Jiang et al. 2023, Mistral 7B, §2); with chunks of C (Llama 4), the
pairs of each chunk. Every function takes :class:`~embedcalc.analysis.structure.Dims`, so sweeps evaluate them on
numpy arrays.
"""

from __future__ import annotations

from embedcalc.analysis.compressed import compressed_tensors
from embedcalc.analysis.indexers import block_indexer_tensors, indexer_tensors
from embedcalc.analysis.structure import (
    Dims,
    Num,
    head_width,
    kv_width,
    minimum,
    projected_kv_width,
    q_heads,
    qk_width,
    v_width,
)
from embedcalc.analysis.tensor import ParamTensor, norm_tensors
from embedcalc.analysis.tensor import linear as _linear
from embedcalc.config.layer_plan import Attention
from embedcalc.config.resolved import ResolvedShape
from embedcalc.config.spec_shapes import DisentangledShape


def _window_pairs(n: Num, window: int | None) -> Num:
    """Causal pairs of n queries when each sees at most ``window`` keys (itself included)."""
    if window is None:
        return n * (n + 1) // 2
    m = minimum(n, window)
    return m * (m + 1) // 2 + (n - m) * window


def _block_pairs(n: Num, blocks: int, size: int) -> Num:
    """Causal pairs of n queries that each see ``blocks`` blocks of ``size`` keys, their own (partial) block among
    them: the query at position i sees min(i + 1, (blocks - 1) size + i mod size + 1) keys."""
    m = minimum(n, blocks * size)
    rest = n - m  # queries past the first blocks x size positions
    return (
        m * (m + 1) // 2
        + rest * ((blocks - 1) * size + 1)
        + (rest // size) * (size * (size - 1) // 2)
        + (rest % size) * (rest % size - 1) // 2
    )


def score_pairs(
    n: Num, causal: bool, window: int | None = None, chunk: int | None = None, topk: int | None = None,
    blocks: tuple[int, int] | None = None,
) -> Num:  # fmt: skip
    """Query-key pairs computed per head: n² in full; causal, windowed and chunked counts of docs/layers.md. A
    sparse layer's queries each attend to the ``topk`` keys its indexer selects: n min(n, topk) in full (every
    query gathers min(n, topk) keys), and causally the pairs of a window of topk (a query at position i has
    min(i + 1, topk) earlier keys to choose from). A block-sparse layer's (``blocks`` = (top-k blocks, block
    size)) core runs over every key with the unselected blocks masked, n² in full as transformers' eager path and
    embedcalc's torch model compute it, and causally the keys of its selected blocks (:func:`_block_pairs`)."""
    if blocks is not None and causal:
        return _block_pairs(n, *blocks)
    if topk is not None:
        return _window_pairs(n, topk) if causal else n * minimum(n, topk)
    if not causal:
        return n * n
    if chunk is None:
        return _window_pairs(n, window)
    return (n // chunk) * _window_pairs(chunk, window) + _window_pairs(n % chunk, window)


def attention_flops(
    a: Attention, x: Dims, layers: Num, t: Num, t_kv: Num, score_tokens: Num, prefix: str, cross: bool = False,
    d_in: Num | None = None,
) -> list[tuple[str, Num]]:  # fmt: skip
    """Forward FLOPs of ``layers`` layers of one attention sublayer: queries on ``t`` tokens, keys and values on
    ``t_kv``, ``score_tokens`` = b x pairs per head. Written as (tokens) x (per-token coefficient). ``d_in``: the
    width Q/K/V read when it is not embed_dim (a shared block's concatenated input, Zamba2)."""
    d, h = x.d, q_heads(a, x)
    qk, v = qk_width(a, x), v_width(a, x)
    scores = (f"{prefix}/scores", score_tokens * (layers * 2 * h * qk))
    context = (f"{prefix}/context", score_tokens * (layers * 2 * h * v))
    out = (f"{prefix}/out", t * (layers * 2 * h * v * d))
    if a.out_groups:  # grouped low-rank (DeepSeek-V4): each group h v / g -> r, then g r -> d
        out = (f"{prefix}/out", t * (layers * 2 * a.out_rank * (h * v + a.out_groups * d)))
    if a.kind == "standard":
        hd = head_width(a, x)
        if not cross:  # K and V as many as the layer projects itself (values from keys, shared K and V)
            qkv = t * (layers * 2 * (d if d_in is None else d_in) * (h * hd + projected_kv_width(a, x)))
        else:  # K and V of the encoder output
            qkv = t * (layers * 2 * d * h * hd) + t_kv * (layers * 2 * d * projected_kv_width(a, x))
        gate = [(f"{prefix}/gate", t * (layers * 2 * d * h * hd))] if a.output_gate else []
        gate += [(f"{prefix}/head_gate", t * (layers * 2 * d * h))] if a.head_gate else []
        return [(f"{prefix}/qkv", qkv), scores, context, *gate, out]
    terms: list[tuple[str, Num]] = []
    if a.q_lora_rank is not None:
        terms.append((f"{prefix}/q_a", t * (layers * 2 * d * a.q_lora_rank)))
        terms.append((f"{prefix}/q_b", t * (layers * 2 * a.q_lora_rank * h * qk)))
    else:
        terms.append((f"{prefix}/q", t * (layers * 2 * d * h * qk)))
    terms.append((f"{prefix}/kv_a", t_kv * (layers * 2 * d * (a.kv_lora_rank + a.qk_rope_head_dim))))
    terms.append(
        (f"{prefix}/kv_b", t_kv * (layers * 2 * a.kv_lora_rank * h * (a.qk_nope_head_dim + a.v_head_dim)))
    )
    return [*terms, scores, context, out]


def disentangled_flops(spec: DisentangledShape, x: Dims, layers: Num, t: Num) -> list[tuple[str, Num]]:
    """The position terms of ``layers`` layers of disentangled attention on ``t`` tokens (module docstring)."""
    rows, width = spec.rows, x.h * x.hd
    return [("attention/pos_proj", layers * (2 * rows * x.d * width * spec.projections)),
            ("attention/pos_scores", t * (layers * 2 * rows * width * spec.terms))]  # fmt: skip


def attention_tensors(
    config: ResolvedShape, a: Attention, x: Dims, prefix: str, d_in: Num | None = None
) -> list[ParamTensor]:
    """The tensors of one attention sublayer (keys ``prefix/...``), docs/layers.md; ``d_in``: the width Q/K/V read
    when it is not embed_dim (a shared block's concatenated input, Zamba2)."""
    d, h = x.d, q_heads(a, x)
    if a.compressed:  # DeepSeek-V4 (analysis/compressed.py)
        hd = head_width(a, x)
        out = compressed_tensors(a, x, h, hd, prefix, lambda key, width: norm_tensors(config, key, width))
        value = h * hd
    elif a.kind == "standard":
        hd = head_width(a, x)
        q, kv = h * hd, kv_width(a, x)
        out = _linear(
            f"{prefix}/qkv", d if d_in is None else d_in, q + projected_kv_width(a, x), a.qkv_bias, "qkv"
        )
        keys = 0 if a.kv_shared else 1  # a layer reusing another's keys has no key norm
        if a.qk_norm == "head":
            out += norm_tensors(config, f"{prefix}/qk_norm", hd, 1 + keys)
        elif a.qk_norm == "full":
            # replicated under TP: q and k are gathered around it
            out += norm_tensors(config, f"{prefix}/qk_norm", q)
            out += norm_tensors(config, f"{prefix}/qk_norm", kv, keys)
        value = h * v_width(a, x)
        if a.block_indexer:
            out += block_indexer_tensors(a, x, prefix)
    else:  # mla, DeepSeek-V2 §2.1
        qk, rope = a.qk_nope_head_dim + a.qk_rope_head_dim, a.qk_rope_head_dim
        if a.q_lora_rank is not None:
            out = _linear(f"{prefix}/q_a", d, a.q_lora_rank, a.qkv_bias, "none")
            out += norm_tensors(config, f"{prefix}/q_a_norm", a.q_lora_rank)
            out += _linear(f"{prefix}/q_b", a.q_lora_rank, h * qk, False, "column")
        else:
            out = _linear(f"{prefix}/q", d, h * qk, False, "column")
        out += _linear(f"{prefix}/kv_a", d, a.kv_lora_rank + rope, a.qkv_bias, "none")
        out += norm_tensors(config, f"{prefix}/kv_a_norm", a.kv_lora_rank)
        out += _linear(
            f"{prefix}/kv_b", a.kv_lora_rank, h * (a.qk_nope_head_dim + a.v_head_dim), False, "column"
        )
        value = h * a.v_head_dim
        if a.query_scale:  # Mistral Large 4's softmax scaling: a scale and a bias per head
            out += [ParamTensor(f"{prefix}/query_scale", (h,)) for _ in range(2)]
        if a.indexer:
            out += indexer_tensors(a, x, prefix)
    if config.disentangled is not None and prefix == "attention" and not config.disentangled.share_keys:
        for _ in range(config.disentangled.terms):  # DeBERTa's pos_key_proj (c2p), pos_query_proj (p2c)
            out += _linear(f"{prefix}/pos_proj", d, h * head_width(a, x), True, "none")
    if a.sinks:
        out.append(ParamTensor(f"{prefix}/sinks", (h,), split="column"))
    if a.head_gate:  # Laguna: softplus(g_proj(x)) scales each head's context before out
        out += _linear(f"{prefix}/head_gate", d, h, False, "column")
    if a.output_gate:  # Qwen3-Next: sigmoid(gate(x)) scales the context before out
        out += _linear(f"{prefix}/gate", d, h * head_width(a, x), a.qkv_bias, "column")
    if a.out_groups:  # DeepSeek-V4: per group of heads value / g -> r (split with the heads), then g r -> d
        out += _linear(f"{prefix}/out", value // a.out_groups, a.out_groups * a.out_rank, False, "column")
        out += _linear(f"{prefix}/out", a.out_groups * a.out_rank, d, a.out_bias, "row")
    else:
        out += _linear(f"{prefix}/out", value, d, a.out_bias, "row")
    if a.tanh_gates:  # Mllama's cross_attn_attn_gate: tanh(g) scales the sublayer's output
        out.append(ParamTensor(f"{prefix}/tanh_gate", (1,)))
    return out
