"""Inference memory (bytes): weights in their inference format, the KV cache and the peak activations of one forward
pass with no autograd, on one tensor-parallel rank. :mod:`embedcalc.analysis.memory` assembles them per device.

Weights, in the format each tensor is stored in (:func:`stored_bytes`; the formats are
:mod:`embedcalc.config.dtypes`'): fp32 4 bytes per parameter, bf16 / fp16 2. Under fp8 and the weight-only
int8 / int4 only the linear layers' weight matrices inside the layers are low-precision (:func:`low_precision`);
embeddings, the LM head, the pooler, norms, biases and the MoE router stay in the activation dtype (bf16 under
fp8, fp16 under int8/int4), as DeepSeek-V3 (§3.3.1) keeps its embedding, output head, gating and norms out of FP8
and GPTQ / AWQ quantize only the layers' ``nn.Linear`` weights. fp8 stores 1 byte per parameter (its per-tensor
or per-block scales, one fp32 per 128 x 128 block at most, are not counted). int8 / int4 pack 8 / 4 bits per
parameter (a tensor's bits rounded up to whole bytes) plus, per row of the (out, in) matrix and per group of
``quant_group_size`` consecutive input values (the last group of a row may be shorter), an fp16 scale and an
fp16 zero point: 4 bytes a group. The convention: GPTQ (Frantar et al. 2022, §"group-wise quantization") and AWQ
(Lin et al. 2023) choose a scale and a zero per group of g input channels of every output row; their
checkpoints (AutoGPTQ's ``QuantLinear``: ``scales`` fp16 [in / g, out], ``qzeros`` packed [in / g, out x bits /
32]) pack the zero in ``bits`` bits, so this count, a full fp16 zero, is an upper bound by 2 - bits / 8 bytes a
group (int4 at g = 128: 4 bytes vs 2.5 per 64 bytes of weights). int4 at group size 32 adds exactly 25 % to the
packed weights: 4 bytes of scale and zero per 16 bytes of weights. mxfp4 / nvfp4 store each row of an (out, in)
matrix in blocks of 32 / 16 input values, 17 / 9 bytes a block (the last block of a row padded to full size, as
gpt-oss's ``*_blocks`` tensors are), and nvfp4 adds 8 bytes of fp32 per-tensor scales per matrix
(:data:`embedcalc.config.dtypes.BLOCK_FORMATS`): Llama-2-7B comes to 3,965,198,336 bytes in mxfp4 and
4,167,574,528 in nvfp4 (its 6,476,005,376 layer-matrix parameters at 17/32 or 9/16 byte, 4 nvfp4 matrices a layer
as embedcalc holds them, fused QKV and gate/up: a checkpoint that stores q, k, v, gate and up apart holds 8 bytes
more for each), the 262,410,240 other parameters in bf16.

Which matrices the low-precision formats cover is the config's ``quantized``: ``layers`` (the default, above) or
``experts``, only the routed experts' (gpt-oss: its ``quantization_config`` leaves attention, the router, the
embeddings and the head in bf16; 13,761,264,768 bytes for gpt-oss-20b, its safetensors' ``total_size``).

KV cache (decoder self-attention; GQA-aware), a sum over the decoder's layers: 2 (K and V) x batch x tokens x
num_kv_heads x head_dim x bytes per standard layer, tokens capped per layer at its window or chunk (Mistral's
rolling buffer cache, Jiang et al. 2023, §2); multi-head latent attention caches kv_lora_rank + qk_rope_head_dim
values per token (the compressed latent and the shared rope key, DeepSeek-V2 §2.1.2), the same on every TP rank.
A cross-attention layer over an external sequence (Llama-3.2-Vision) caches the K and V of its context_tokens
tokens per sequence, whatever the text length: 2 x batch x context_tokens x num_kv_heads x head_dim x bytes.
An encoder-decoder's decoder also caches the cross-attention K and V of the source: 2 x batch x src_len x decoder
layers x num_kv_heads x head_dim x bytes. Encoders cache nothing.

Peak inference activations are an estimate of the largest set of tensors alive at once in one forward pass with
no autograd: the residual stream plus, for the costliest sublayer, its live intermediates: Q/K/V and the context
(and with eager attention the score matrix and its softmax, 2 x b h n n; DeBERTa's core is always eager), or
the FFN's inner tensors (2 t f; gated 3 t f; mixture of experts (top_k expert_dim + shared) per token, a latent
MoE's two latent_dim-wide tensors, and the router logits), or the LM head's input and logits: one position per
sequence by default (b (d + vocab): the position a server samples from; vLLM and transformers' ``generate``
compute no others), every position with ``logits="all"`` (t (d + vocab), scoring a text). An encoder-decoder's
decoder also holds the encoder output. A sparse attention layer's core holds its gathered keys and values over
min(n, index_topk) keys per query under either ``--attention``, and its indexer, just before, its own transient
n x n tensors beside the query and key latents (``<stack>/attention/indexer``; the sparse-attention section below).

:class:`RankWidths` (one block's attention and FFN widths on one TP rank) is shared with the training terms in
:mod:`embedcalc.analysis.memory.training`. Every term takes a :class:`~embedcalc.analysis.structure.Dims`, so the
sweep grid evaluates these same functions on numpy arrays.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from math import prod

from embedcalc.analysis.breakdown import Breakdown
from embedcalc.analysis.compressed import compressed_cache_values
from embedcalc.analysis.memory.disentangled import eager_core
from embedcalc.analysis.mixers import mixer_live_bytes
from embedcalc.analysis.parallel import Stage, stage_dims
from embedcalc.analysis.structure import (
    Dims,
    Num,
    cross_attention,
    head_width,
    kv_heads,
    maximum,
    minimum,
    q_heads,
    v_width,
)
from embedcalc.analysis.workload import DTYPE_BYTES, Workload, logit_rows
from embedcalc.config.dtypes import BLOCK_FORMATS
from embedcalc.config.layer_plan import Attention, Block
from embedcalc.config.resolved import ResolvedShape

SCALE_ZERO_BYTES = 4  # an fp16 scale and an fp16 zero point per group of a weight-only format
_HIGH_PRECISION = frozenset({"router", "shared_gate", "relative_bias", "scores", "context"})
_STACKS = ("encoder/", "decoder/")
_BITS = {"int8": 8, "int4": 4}
MASK_BYTES = 1  # a bool per selected slot of a sparse layer
FP32_BYTES = 4  # a fused kernel's log-sum-exp statistics
INDEX_BYTES = 8  # int64 indices (torch.sort, torch.gather)


def low_precision(key: str, matrix: bool = True, parts: str | None = None) -> bool:
    """Whether the tensor (or matmul) of breakdown ``key`` is one a low-precision dtype holds in it (module
    docstring): a weight matrix (``matrix``; biases and norms are vectors) of a stack's layers, not the MoE router
    or gate, nor attention's score and context matmuls (which multiply activations: they run in the activation
    dtype); with ``parts`` ``experts`` (the config's ``quantized``) only the routed experts' matrices."""
    inside = matrix and key.startswith(_STACKS) and key.rsplit("/", 1)[-1] not in _HIGH_PRECISION
    return inside and (parts != "experts" or key.endswith("/moe/experts"))


def stored_bytes(key: str, shape: tuple[Num, ...], copies: Num, w: Workload, parts: str | None = None) -> Num:
    """Bytes of ``copies`` copies of one parameter tensor of ``shape`` as ``w.dtype`` stores it (module
    docstring): the activation dtype for every tensor but the low-precision ones (``parts``: the config's
    ``quantized``); fp8 1 byte a parameter; mxfp4 / nvfp4 whole blocks of each row and nvfp4's per-matrix scales;
    int8 / int4 the packed bits plus an fp16 scale and zero per group of ``w.quant_group_size`` inputs of each
    row."""
    numel = prod(shape)
    if w.dtype not in ("fp8", *BLOCK_FORMATS, *_BITS) or not low_precision(key, len(shape) == 2, parts):
        return copies * numel * int(DTYPE_BYTES[w.activation_dtype])
    if w.dtype == "fp8":
        return copies * numel
    out_f, in_f = shape
    if w.dtype in BLOCK_FORMATS:
        f = BLOCK_FORMATS[w.dtype]
        return copies * (out_f * -(-in_f // f.block) * f.block_bytes + f.per_matrix_bytes)
    packed = -(-(numel * _BITS[w.dtype]) // 8)
    groups = out_f * -(-in_f // w.quant_group_size)
    return copies * (packed + groups * SCALE_ZERO_BYTES)


def weight_bytes(
    tensors: Iterable[tuple[str, tuple[Num, ...], Num]], w: Workload, parts: str | None = None
) -> Num:
    """Bytes of the weights ``(key, shape, copies)`` in their stored formats (:func:`stored_bytes`)."""
    total: Num = 0
    for key, shape, copies in tensors:
        total = total + stored_bytes(key, shape, copies, w, parts)
    return total


# --- widths on one tensor-parallel rank ----------------------------------------------------------------------------


@dataclass(frozen=True)
class RankWidths:
    """Attention and FFN widths of one block on one TP rank (``tp`` 1: the whole block)."""

    heads: Num
    q: Num  # all query heads' width (Q and, for MLA, K)
    kv: Num  # K (or V) width of standard attention
    v: Num  # the context width (input of the output projection)
    f: Num  # dense FFN width
    fe: Num
    fs: Num


def rank_widths(block: Block, x: Dims, tp: int, a: Attention | None = None) -> RankWidths:
    a = a or block.attention
    w = x.widths(block)
    if a is not None and a.latent:
        heads = x.h // tp if tp > 1 else x.h
        qk = a.qk_nope_head_dim + a.qk_rope_head_dim
        return RankWidths(
            heads, heads * qk, heads * qk, heads * a.v_head_dim, w.f // tp, w.fe // tp, w.fs // tp
        )
    hd, g = (head_width(a, x), kv_heads(a, x)) if a is not None else (x.hd, x.g)
    vd = v_width(a, x) if a is not None else hd
    h = q_heads(a, x) if a is not None else x.h
    if tp == 1:
        return RankWidths(h, h * hd, g * hd, h * vd, w.f, w.fe, w.fs)
    q = h * hd // tp
    return RankWidths(h // tp, q, maximum(1, g // tp) * hd, h * vd // tp, w.f // tp, w.fe // tp, w.fs // tp)


# --- KV cache ------------------------------------------------------------------------------------------------------


def kv_cache_values(a: Attention, x: Dims, tp: int = 1) -> Num:
    """Values one layer caches per token on one TP rank: K and V of its KV heads, or MLA's latent + rope key (and
    a sparse layer's indexer key, replicated like the latent: transformers' ``DynamicIndexedLayer``; a
    block-sparse layer's indexer key: ``MiniMaxM3VLSparseCacheLayer``)."""
    if a.latent:
        return a.kv_cache_width
    if a.kv_shared:  # its keys and values are an earlier layer's, cached there
        return 0
    if a.compressed:  # DeepSeek-V4: one key per token that is also its value, replicated
        return head_width(a, x) * a.compressed_kv_copies
    g = kv_heads(a, x)
    heads = g if tp == 1 else maximum(1, g // tp)
    # keys of head_dim, values of v_head_dim (or head_dim); a block indexer's key, replicated
    return heads * (head_width(a, x) + v_width(a, x)) + a.index_cache_width


def kv_cache_terms(config: ResolvedShape, workload: Workload, x: Dims, tp: int = 1) -> Num:
    """KV cache bytes of the decoder layers in ``x`` on one TP rank (module docstring)."""
    if config.architecture == "encoder":
        return 0
    cached = (x.n if config.architecture == "decoder" else x.n_dec) + workload.gen_tokens
    values: Num = 0
    for sd, block, layers in x.decoder_blocks():
        if block.attention is None:
            continue
        limit = block.attention.cache_limit
        tokens = cached if limit is None else minimum(cached, limit)
        if block.attention.external:  # cross-attention caches the external tokens, not the text
            tokens = block.attention.context
        values = values + layers * tokens * kv_cache_values(block.attention, x, tp)
        if block.attention.compressed:  # DeepSeek-V4's pooled entries and compressor state (replicated)
            values = values + layers * compressed_cache_values(block.attention, cached)
        if sd.stack.cross_attention:  # the cross-attention K and V of the source
            values = values + layers * x.n * kv_cache_values(cross_attention(config), x, tp)
    return x.b * values * workload.activation_bytes


def kv_cache_bytes(config: ResolvedShape, workload: Workload, decoder_layers: int | None = None) -> int:
    """K and V of the first ``decoder_layers`` decoder layers (default all) on one TP rank (module docstring)."""
    x = Dims.of(config, workload.batch_size, workload.seq_len, workload.tgt_len)
    if decoder_layers is not None:
        plans = tuple(
            replace(sd, blocks=tuple(config.stack_plan("decoder").counts(0, decoder_layers)))
            if sd.name == "decoder" else sd
            for sd in x.stacks
        )  # fmt: skip
        x = replace(x, stacks=plans)
    return int(kv_cache_terms(config, workload, x, workload.parallel.tp))


# --- sparse attention (DeepSeek Sparse Attention) ----------------------------------------------------------------

# Activation bytes of a sparse attention layer (DeepSeek Sparse Attention, DeepSeek-V3.2-Exp report §2.1-2.2;
# the torch reference is ``embedcalc.modeling.sparse_attention``), beside MLA's terms, which it shares.
#
# Each query attends to k' = min(n_kv, index_topk) keys. Under ``--attention eager`` the core is the torch
# reference's: it gathers each query's keys and values (no custom kernel: a gather, then two batched matmuls) and
# holds, per query-key pair and per head, the gathered key (d_qk values), the gathered value (d_v) and the softmax
# weights (1), plus per pair one 1-byte mask (a selected slot the query may not see) and, in a layer with its own
# indexer, the int64 index of the selected key (a sharing layer reuses its source's). Training saves exactly these
# for the backward pass (:func:`sparse_core_saved`, in place of the n x n_kv score terms of dense attention); a
# forward pass without autograd holds the gathered K and V with the scores and the weights
# (:func:`sparse_core_live`). Under ``sdpa`` (the default) the core is a fused sparse kernel, as dense attention's
# is (DeepSeek's FlashMLA sparse kernels run the MQA mode of MLA, V3.2-Exp §2.1, one latent shared by every head,
# never gathered per head): it saves the fp32 log-sum-exp per query and head and the selection's int64 indices,
# and holds nothing per pair beyond them. The torch reference itself always gathers: ``bench`` of a sparse model
# measures the eager terms whatever ``--attention`` says.
#
# The lightning indexer selects without autograd: the core depends on its scores only through integer indices, so
# the model's loss sends it no gradient (DeepSeek-V3.2-Exp §2.1 detaches its input and trains it by its own KL
# objective, not modelled). Its tensors are transient, alive one layer at a time (:func:`index_working_bytes`): the
# queries (index_heads x index_head_dim per token), the head weights (index_heads) and the keys (index_head_dim),
# then per query-key pair either the index_heads ReLU'd dot products with their weighted sum, or, at the top-k, the
# scores with the sort's values and int64 order — the larger of the two. Inference counts them as a peak candidate
# of their own; training adds the largest once, on top of the saved activations (``<stack>/index_working_set``).


def selected(a: Attention, n_kv: Num) -> Num:
    """Keys each query of a sparse layer attends to: min(n_kv, index_topk)."""
    return minimum(n_kv, a.index_topk)


def sparse_core_saved(
    a: Attention, b: Num, n: Num, n_kv: Num, heads: Num, qk: Num, v: Num, e: int, gathered: bool
) -> Num:
    """Bytes the core saves for the backward pass (the comment above). ``gathered``: per query-key pair, the
    gathered K (``qk``, all heads of the rank) and V (``v``) and the weights (``heads``) in e bytes, the mask, and
    the indexer layer's index; fused: the log-sum-exp of each query and head and the indexer layer's index."""
    index = 0 if a.index_shared else INDEX_BYTES
    pairs = b * n * selected(a, n_kv)
    if not gathered:
        return (b * n) * (FP32_BYTES * heads) + pairs * index
    return pairs * (e * (qk + v + heads) + MASK_BYTES + index)


def sparse_core_live(a: Attention, b: Num, n: Num, heads: Num, qk: Num, v: Num, e: int) -> Num:
    """Bytes of the gathered core alive at once without autograd: gathered K and V, the scores and the weights."""
    return (b * n * selected(a, n)) * (e * (qk + v + 2 * heads))


def index_working_bytes(a: Attention, b: Num, n: Num, e: int) -> Num:
    """The indexer's transient tensors in one layer (the comment above); 0 for a layer sharing its selection."""
    if a.index_shared:
        return 0
    heads, width = a.index_heads, a.index_head_dim
    per_token = e * (heads * width + heads + width)
    per_pair = maximum(e * (heads + 1), 2 * e + INDEX_BYTES)
    return (b * n) * per_token + (b * n * n) * per_pair


# --- peak activations of one forward pass --------------------------------------------------------------------------


def peak_candidates(config: ResolvedShape, workload: Workload, x: Dims, tp: int = 1) -> dict[str, Num]:
    """The sets of activations alive at once in one forward pass (no autograd) on one TP rank, by stage of the
    pass; the peak is the largest (module docstring)."""
    b, e = x.b, workload.activation_bytes
    out: dict[str, Num] = {}

    def keep(key: str, value: Num) -> None:
        out[key] = maximum(out[key], value) if key in out else value

    for sd in x.stacks:
        if not sd.blocks:
            continue
        n, n_mem = x.tokens(config, sd.stack)
        t = b * n
        memory = (
            b * n_mem * (e * x.d) if sd.stack.cross_attention else 0
        )  # encoder output held by the decoder
        context = max((bl.attention.context for bl, _ in sd.blocks if bl.attention is not None), default=0)
        memory = memory + b * context * (e * x.d)  # the external sequence cross-attention layers read
        base = t * (2 * e * x.d) + memory  # residual stream and the sublayer's input/output
        for block, _ in sd.blocks:
            a, r = block.attention, rank_widths(block, x, tp)
            if block.mixer is not None:  # beside attention (Falcon-H1) the attention's output waits for it
                held = t * (e * x.d) if block.parallel_mixers else 0
                keep(f"{sd.name}/mixer", base + held + mixer_live_bytes(block.mixer, x, n, e))
            if a is None:
                pass
            elif a.latent:
                q_path = e * (a.q_lora_rank or 0) + e * r.q
                kv_path = e * (a.kv_lora_rank + a.qk_rope_head_dim) + e * (r.q + r.v)
                attention = t * (q_path + kv_path + e * r.v)
            elif a.external:  # Q and the context on the text, K and V on the external tokens
                attention = t * (2 * e * r.q) + (b * a.context) * (2 * e * r.kv)
            else:
                attention = t * (e * (r.q + 2 * r.kv) + e * r.q)
            if (
                a is not None and a.kind == "sparse"
            ):  # the core (gathered under eager); the indexer on its own
                if workload.attention == "eager":
                    attention = attention + sparse_core_live(a, b, n, r.heads, r.q, r.v, e)
                keep(f"{sd.name}/attention", base + attention)
                if not a.index_shared:
                    q_path = e * (a.q_lora_rank or 0) + e * (a.kv_lora_rank + a.qk_rope_head_dim)
                    keep(f"{sd.name}/attention/indexer", base + t * q_path + index_working_bytes(a, b, n, e))
            elif a is not None:
                if eager_core(config, workload, a.external):  # DeBERTa's core is always eager
                    keys = a.context if a.external else n
                    attention = attention + (b * n * keys) * (2 * e * r.heads)
                keep(f"{sd.name}/attention", base + attention)
            ffn = block.ffn
            if ffn is None:
                continue
            inner = 3 if ffn.gated else 2
            if ffn.moe:
                latent = 2 * ffn.latent_dim  # a latent MoE's projected input and the experts' combined output
                keep(f"{sd.name}/moe",
                     base + t * (e * (ffn.top_k * r.fe + r.fs) * inner + e * ffn.num_experts + e * latent))  # fmt: skip
            else:
                keep(f"{sd.name}/ffn", base + t * (e * r.f * inner))
    if config.resolved_lm_head and x.last:
        n_last, _ = x.tokens(config, x.stacks[-1].stack)
        vocab_rank = -(-config.vocab_size // tp)
        keep("head/lm", logit_rows(workload.logits, b, n_last) * (e * (x.d_tok + vocab_rank)))
    return out


def peak_inference_activations(
    config: ResolvedShape, workload: Workload, stage: Stage | None = None
) -> Breakdown:
    """The largest set of activations alive at once in one forward pass (no autograd) on one TP rank."""
    x = Dims.of(config, workload.batch_size, workload.seq_len, workload.tgt_len)
    if stage is not None:
        x = stage_dims(config, stage, x)
    stages = peak_candidates(config, workload, x, workload.parallel.tp)
    out = Breakdown()
    if stages:
        key = max(stages, key=lambda k: stages[k])
        out.add(key, stages[key])
    return out
