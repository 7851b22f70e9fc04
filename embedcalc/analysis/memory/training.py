"""Training memory (bytes) per parameter and the activations saved for the backward pass, on one tensor-parallel
rank and one micro-batch. :mod:`embedcalc.analysis.memory` adds the ZeRO sharding and the pipeline's micro-batches
in flight.

Weights, gradients and optimizer state are exact for the stated precision recipe:

- fp32: weights 4, gradients 4, AdamW moments 8 bytes per parameter (4 + 4 + 8 = 16).
- bf16 / fp16 mixed precision (Micikevicius et al. 2018; Rajbhandari et al. 2020, ZeRO §3): weights 2,
  gradients 2, and an fp32 master copy plus two fp32 moments, 12 bytes per parameter (2 + 2 + 12 = 16).
- fp8 training holds the same (Transformer Engine and DeepSeek-V3 §3.3 keep bf16 weights and gradients and cast
  each GEMM's operands to fp8 as it runs; the transient fp8 copies are not counted); only its GEMMs are faster.
- Optimizers (state per parameter, fp32): AdamW two moments (8 bytes); 8-bit AdamW (bitsandbytes) two uint8
  moments plus an fp32 absmax per 256 values (2 + 8/256 bytes; fp32 under 4096 values), paged variants the same
  bytes; SGD with momentum one buffer (4 bytes);
  Adafactor (Shazeer & Stern 2018, default beta1=None) factored second moments, rows + columns of each matrix and
  the full vector for 1-D tensors. Mixed precision adds the 4-byte fp32 master copy to each.

Saved activations follow Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer
Models", §4.1, eq. 1: 34 s b h + 5 a s² b bytes per layer for 16-bit activations, a 4h FFN and dropout),
generalised term by term to any dtype, GQA, head_dim, FFN width, gated FFNs and dropout 0:

- attention: input of the QKV projection (t d), Q and K for Q·Kᵀ (t (q + kv)), V (t kv), the softmax output
  (b h n²), with dropout its 1-byte mask and its output (b h n² each), the input of the output projection (t q),
  the 1-byte mask of the residual dropout (t d);
- FFN: input (t d), activation input and output (2 t f; gated: gate, up, act(gate), product = 4 t f), 1-byte
  dropout mask (t d);
- norms: each saves its input (t d); a layer has one per sublayer (two with sandwich norms, one for a parallel
  block with one norm); q/k norms save Q and K once more;
- latent attention: the input, q_a's and kv_a's outputs and their normalised copies, Q, K, V, the context;
- sparse attention: latent attention's terms, with the core over min(n, index_topk) keys in place of the n² terms
  (eager: the torch reference's gathered keys and values; sdpa: a fused sparse kernel's statistics and the
  selection), and the largest indexer's transient tensors added once
  (the sparse-attention terms of :mod:`embedcalc.analysis.memory.inference`);
- disentangled attention (DeBERTa): the standard terms with an always-eager core, plus per layer and position term
  the broadcast position keys / queries, the pre-gather scores (b h n 2 span), the n x n int64 gather index and the
  divisor, p2c's second K, and once per stack the normed table (:mod:`embedcalc.analysis.memory.disentangled`);
- mixture of experts: the input, the router logits (t E), each token's top_k routed copies with their inner
  tensors (as a dense FFN of expert_dim, top_k times), the shared experts' inner tensors; a latent MoE's routed
  copies are latent_dim wide, and its out-projection keeps the experts' combined output (t latent_dim).

``--attention sdpa`` (flash / memory-efficient kernels) saves no b h n² tensor, only its output and the fp32
log-sum-exp (4 b h n bytes). ``--recompute selective`` drops the b h n² terms (recomputed, Korthikanti §4.3);
``--recompute full`` keeps only each layer's input (t d). Either way the backward pass re-materialises one block
(full) or one attention core (selective) at a time: that working set is added once (``<stack>/recompute_working_set``).
Outside the layers: the embedding output (t d) and its dropout mask, the final norm input, and for an LM head its
input (t d) plus fp32 logits for the loss (4 t vocab). With token_embed_dim != embed_dim (OPT-350m) two more
inputs of t token_embed_dim are saved: the token lookup's (for embedding/project_in) and the LM matmul's (after
head/project_out).

With tensor parallelism (no sequence parallelism; Korthikanti eq. 2: s b h (10 + 24/t + 5 a s / (h t))) the
terms inside the attention and FFN (Q, K, V, scores, context, FFN inner) are divided by tp; layer inputs, norms
and residual dropout masks are replicated.
"""

from __future__ import annotations

import functools
from math import prod

from embedcalc.analysis.altup import altup_saved_bytes
from embedcalc.analysis.breakdown import Breakdown
from embedcalc.analysis.compressed import compressed_saved
from embedcalc.analysis.drafter import drafter_saved
from embedcalc.analysis.memory.disentangled import eager_core, position_terms_saved, table_saved
from embedcalc.analysis.memory.inference import (
    RankWidths,
    index_working_bytes,
    rank_widths,
    sparse_core_saved,
)
from embedcalc.analysis.mixers import mixer_saved_bytes
from embedcalc.analysis.parallel import Stage, stage_dims
from embedcalc.analysis.structure import Dims, Num, StackDims, cross_attention, maximum, sublayer_norms
from embedcalc.analysis.workload import Workload
from embedcalc.config.altup import has_laurel
from embedcalc.config.hyper import hyper_sublayers
from embedcalc.config.layer_plan import FFN, Attention, Block
from embedcalc.config.resolved import ResolvedShape

FP32_BYTES = 4
MASK_BYTES = 1  # torch saves dropout masks as bool tensors


# --- bytes per parameter ------------------------------------------------------------------------------------------


def mixed_precision(dtype: str) -> bool:
    """Training in bf16 / fp16 / fp8 keeps an fp32 master copy (module docstring)."""
    return dtype != "fp32"


def training_param_bytes(dtype: str) -> int:
    """Bytes per parameter of the training weights, and of the gradients: 2 in mixed precision, else 4."""
    return 2 if mixed_precision(dtype) else FP32_BYTES


# bitsandbytes' 8-bit optimizers (Dettmers et al. 2022, "8-bit Optimizers via Block-wise Quantization", §2;
# bitsandbytes/optim/optimizer.py Optimizer2State.init_state): each state is uint8 with one fp32 absmax per block
# of 256 values; tensors under min_8bit_size = 4096 values keep fp32 states. The shared quantile maps are counted
# nowhere (two 256-entry tables per process).
BNB_BLOCK = 256
BNB_MIN_8BIT_SIZE = 4096


def _adamw_8bit_state(numel: Num) -> Num:
    """Bytes of 8-bit AdamW's two states for one tensor of ``numel`` values."""
    blockwise = 2 * (numel + FP32_BYTES * (-(-numel // BNB_BLOCK)))
    if isinstance(numel, int):
        return blockwise if numel >= BNB_MIN_8BIT_SIZE else 2 * FP32_BYTES * numel
    import numpy as np

    return np.where(numel >= BNB_MIN_8BIT_SIZE, blockwise, 2 * FP32_BYTES * numel)


def optimizer_state_bytes(shape: tuple[Num, ...], optimizer: str, mixed: bool) -> Num:
    """Optimizer state of one tensor in bytes (module docstring); ``mixed`` adds the fp32 master copy. Paged
    optimizers hold the same bytes (in CUDA unified memory the driver may evict to the host)."""
    numel = prod(shape)
    master = FP32_BYTES * numel if mixed else 0
    if optimizer in ("adamw_8bit", "paged_adamw_8bit"):
        return _adamw_8bit_state(numel) + master
    if optimizer in ("adamw", "paged_adamw"):
        state = 2 * numel
    elif optimizer == "sgd":
        state = numel
    else:  # adafactor: factored second moment for matrices, full for vectors
        state = sum(shape[:2]) * prod(shape[2:]) if len(shape) >= 2 else numel
    return FP32_BYTES * (state + numel) if mixed else FP32_BYTES * state


# --- saved activations, per layer and in total ---------------------------------------------------------------------


def _attention_saved(
    config: ResolvedShape,
    workload: Workload,
    a: Attention,
    r: RankWidths,
    x: Dims,
    n: Num,
    n_kv: Num,
    prefix: str,
    recompute: str,
    cross: bool = False,
) -> list[tuple[str, Num]]:
    """Saved bytes of one attention sublayer on one TP rank (queries on n tokens, keys/values on n_kv)."""
    e, b, d, dropout = workload.activation_bytes, x.b, x.d, config.dropout > 0
    t, t_kv = b * n, b * n_kv
    entries: Num = 0
    if a.compressed:  # DeepSeek-V4 (analysis/compressed.py): its own projections, the pooled entries
        linear, entries = compressed_saved(a, r.q, d, e, b, n)
    elif a.latent:  # input, q_a out + normed, kv_a out + normed latent, Q, K, V, the context
        per_q = e * d + e * r.q + e * r.v + (2 * e * a.q_lora_rank if a.q_lora_rank is not None else 0)
        per_kv = e * (a.kv_lora_rank + a.qk_rope_head_dim) + e * a.kv_lora_rank + e * r.q + e * r.v
        linear = t * per_q + t_kv * per_kv
    else:  # input, Q, K and V, the input of the output projection
        linear = t * (e * d + 2 * e * r.q) + t_kv * (2 * e * r.kv)
        if a.qk_norm != "none":
            linear = linear + t * (e * r.q) + t_kv * (e * r.kv)  # the q/k norms' inputs
    if cross:  # K and V come from the encoder output, saved as their input
        linear = linear + t_kv * (e * d)
    if dropout:
        linear = linear + t * (MASK_BYTES * d)
    eager = eager_core(config, workload, cross)
    if recompute != "none" and (a.kind == "sparse" or eager):
        scores: Num = 0
    elif a.kind == "sparse":  # the core over min(n_kv, index_topk) keys: gathered (eager) or a fused kernel
        scores = sparse_core_saved(a, b, n, n_kv, r.heads, r.q, r.v, e, eager)
    elif not eager:
        scores = t * (FP32_BYTES * r.heads)  # log-sum-exp statistics
    else:  # a compressed layer's core also scores its pooled entries
        scores = (b * n * (n_kv + entries)) * ((e + ((MASK_BYTES + e) if dropout else 0)) * r.heads)
    out = [(f"{prefix}/linear", linear), (f"{prefix}/scores", scores)]
    if config.disentangled is not None and not cross:  # DeBERTa's c2p / p2c terms (memory/disentangled.py)
        positions = position_terms_saved(config.disentangled, b, n, r.heads, r.q, r.kv, d, e, dropout)
        out.append((f"{prefix}/positions", positions))
    return out


def _ffn_saved(
    config: ResolvedShape, workload: Workload, ffn: FFN, r: RankWidths, x: Dims, t: Num
) -> tuple[str, Num]:
    e, d = workload.activation_bytes, x.d
    inner = 4 if ffn.gated else 2  # activation input and output; gated: gate, up, act(gate), product
    mask = MASK_BYTES * d if config.dropout > 0 else 0
    if not ffn.moe:
        return "ffn", t * (e * d + e * r.f * inner + mask)
    di = ffn.latent_dim or d  # a latent MoE's experts read L; fc2_latent_proj keeps their combined output (L)
    routed = ffn.top_k * (e * di + e * r.fe * inner) + e * ffn.latent_dim
    return "moe", t * (e * d + e * ffn.num_experts + routed + e * r.fs * inner + mask)


def layer_saved(
    config: ResolvedShape, workload: Workload, x: Dims, block: Block, sd: StackDims, tp: int, recompute: str
) -> list[tuple[str, Num]]:
    """Saved bytes of one layer of ``block`` on one TP rank, by component (keys relative to the stack)."""
    n, n_mem = x.tokens(config, sd.stack)
    e, t = workload.activation_bytes, x.b * n
    if recompute == "full":  # AltUp (Gemma 3n), hyper-connections (DeepSeek-V4): the input is its n streams
        return [("layer_input", t * (e * x.d * (config.altup_inputs or config.hyper_connections or 1)))]
    r = rank_widths(block, x, tp)
    terms: list[tuple[str, Num]] = []
    a_own = block.attention
    if (
        a_own is not None and a_own.external
    ):  # K and V on the external tokens (one tensor, shared by the layers)
        terms += _attention_saved(config, workload, a_own, r, x, n, a_own.context, "attention", recompute)
    elif a_own is not None:
        terms += _attention_saved(config, workload, a_own, r, x, n, n, "attention", recompute)
    if block.mixer is not None:
        terms.append(("mixer", mixer_saved_bytes(block.mixer, x, n, e)))
    terms += [(where, t * (e * x.d)) for where in block.projections]  # a projection saves its input
    attention_norms, cross_norms, ffn_norms = sublayer_norms(config)
    mixes = block.attention is not None or block.mixer is not None or "mixer" in block.projections
    feeds = block.ffn is not None or "ffn" in block.projections
    norms = (attention_norms if mixes else 0) + (ffn_norms if feeds else 0)
    if sd.stack.cross_attention:
        a = cross_attention(config)
        terms += _attention_saved(config, workload, a, rank_widths(block, x, tp, a), x, n, n_mem, "cross_attention",
                                  recompute, cross=True)  # fmt: skip
        norms += cross_norms
    if block.ffn is not None:
        terms.append(_ffn_saved(config, workload, block.ffn, r, x, t))
    rank = config.laurel_rank if has_laurel(config.laurel_rank, block) else None
    if config.altup_inputs or rank:  # Gemma 3n's AltUp copies and Laurel branch (analysis/altup.py)
        terms.append(("altup", altup_saved_bytes(config.altup_inputs or 0, rank, x.d, t, e)))
    if config.hyper_connections:  # DeepSeek-V4: each sublayer's mix reads the n streams (analysis/hyper.py)
        terms.append(("hyper", t * (e * x.d * config.hyper_connections * len(hyper_sublayers(block)))))
    return [*terms, ("norms", t * (norms * e * x.d))]


def _add(out: dict[str, Num], key: str, value: Num) -> None:
    out[key] = out[key] + value if key in out else value


def saved_terms(
    config: ResolvedShape, workload: Workload, x: Dims, tp: int = 1
) -> tuple[dict[str, Num], list[tuple[str, Num]]]:
    """Activations kept for the backward pass of one micro-batch on one TP rank of the layers in ``x``:
    (by key, the recompute working set) — the working set is the largest of the candidates, added once."""
    out: dict[str, Num] = {}
    b, e, d = x.b, workload.activation_bytes, x.d
    mask = MASK_BYTES * d if config.dropout > 0 else 0
    working: list[tuple[str, Num]] = []
    indexing: list[tuple[str, Num]] = []  # sparse layers' transient indexer tensors (memory/inference.py)
    for sd in x.stacks:
        n, _ = x.tokens(config, sd.stack)
        t = b * n
        if x.first:
            projected = e * x.d_tok if config.embedding_projection else 0
            _add(out, f"{sd.name}/embedding", t * (e * d + projected + mask))
            if config.input_projection_dim:  # a drafter's input vectors, for its projection's weight gradient
                _add(out, f"{sd.name}/embedding", drafter_saved(config, t, d, e)[0])
        if config.disentangled is not None and sd.blocks:  # the normed position table the layers share
            shared = table_saved(config.disentangled, d, e, config.dropout > 0, workload.recompute)
            _add(out, f"{sd.name}/attention/positions", shared)
        for block, layers in sd.blocks:
            for key, value in layer_saved(config, workload, x, block, sd, tp, workload.recompute):
                _add(out, f"{sd.name}/{key}", layers * value)
            if workload.recompute != "none":
                plain = layer_saved(config, workload, x, block, sd, tp, "none")
                if workload.recompute == "selective":
                    # eager (and a sparse layer's gathered core) re-materialises the score tensors; sdpa keeps its
                    # O(n) statistics either way: nothing
                    sparse = block.attention is not None and block.attention.kind == "sparse"
                    eager = eager_core(config, workload) or sparse
                    plain = [(k, v) for k, v in plain if k.endswith("/scores") and eager]
                size: Num = 0
                for _, value in plain:
                    size = size + value
                working.append((sd.name, size))
            if block.attention is not None and block.attention.kind == "sparse":
                indexing.append((sd.name, index_working_bytes(block.attention, b, n, e)))
        if config.resolved_final_norm and x.last:
            _add(out, f"{sd.name}/final_norm", t * (e * d))
    if indexing:  # the largest indexer's transient tensors, on top of what is saved
        name, size = recompute_working_set(indexing)
        _add(out, f"{name}/index_working_set", size)
    last = x.stacks[-1]
    if config.resolved_lm_head and x.last:
        n_last, _ = x.tokens(config, last.stack)
        vocab_rank = -(-config.vocab_size // tp)
        head_inputs = d + (x.d_tok if config.embedding_projection else 0)
        _add(out, "head/lm", (b * n_last) * (e * head_inputs + FP32_BYTES * vocab_rank))
        masked = drafter_saved(config, b * n_last, d, e)[
            1
        ]  # a centroid-masked head's gathered rows, centroids
        if config.head_centroids:
            _add(out, "head/centroids", masked)
    if config.resolved_pooler and x.last:
        _add(out, "pooler", b * (e * d))
    return out, working


def loss_backward_bytes(config: ResolvedShape, workload: Workload) -> int:
    """The cross-entropy's backward working set, on top of the saved activations at the step's peak (the start of
    the backward, when every saved tensor is still alive): ``nll_loss``'s gradient and ``log_softmax``'s, two fp32
    tensors of t x vocab alive together (torch's ``NllLossBackward0`` then ``LogSoftmaxBackward0``; the saved
    log-softmax output is the "fp32 logits for the loss" of the saved activations). The logits themselves are no
    longer held: a trainer keeps only the loss through the backward (transformers' ``Trainer.compute_loss``).
    0 without an LM head."""
    if not config.resolved_lm_head:
        return 0
    x = Dims.of(config, workload.batch_size, workload.seq_len, workload.tgt_len)
    n_last, _ = x.tokens(config, x.stacks[-1].stack)
    return int(2 * FP32_BYTES * workload.batch_size * n_last * config.vocab_size)


def recompute_working_set(working: list[tuple[str, Num]]) -> tuple[str, Num]:
    """The largest working set and its stack: (stack, bytes); ties go to the later stack name, as max() does."""
    if not working:
        return "encoder", 0
    if all(isinstance(v, int) for _, v in working):
        size, name = max((v, k) for k, v in working)
        return name, size
    return working[0][0], functools.reduce(maximum, [v for _, v in working])


def saved_activations(config: ResolvedShape, workload: Workload, stage: Stage | None = None) -> Breakdown:
    """Activations kept for the backward pass of one micro-batch on one TP rank of ``stage`` (default: all)."""
    x = Dims.of(config, workload.batch_size, workload.seq_len, workload.tgt_len)
    if stage is not None:
        x = stage_dims(config, stage, x)
    terms, working = saved_terms(config, workload, x, workload.parallel.tp)
    out = Breakdown()
    for key, value in terms.items():
        out.add(key, value)
    if workload.recompute != "none":
        name, size = recompute_working_set(working)
        out.add(f"{name}/recompute_working_set", size)
    return out
