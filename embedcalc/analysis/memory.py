"""Memory estimates (bytes) for inference and training, by component.

Inference = weights + KV cache + peak activations of one forward pass.
Training  = weights + gradients + optimizer state + activations saved for the backward pass.
All of it per device: with ``--tp/--pp/--dp/--zero`` (see ``analysis/parallel.py``) the numbers are those of the
heaviest pipeline stage's device; every stage is listed beside it.

Weights, gradients and optimizer state are exact for the stated precision recipe:

- float32: weights 4, gradients 4, AdamW moments 8 bytes per parameter (4 + 4 + 8 = 16).
- bfloat16 / float16 mixed precision (Micikevicius et al. 2018; Rajbhandari et al. 2020, ZeRO §3): weights 2,
  gradients 2, and an fp32 master copy plus two fp32 moments, 12 bytes per parameter (2 + 2 + 12 = 16).
- int8 / int4 are weight-only inference formats: 1 and 0.5 bytes per parameter, activations in float16.
- Optimizers (state per parameter, fp32): AdamW two moments (8 bytes); SGD with momentum one buffer (4 bytes);
  Adafactor (Shazeer & Stern 2018, default beta1=None) factored second moments, rows + columns of each matrix and
  the full vector for 1-D tensors. Mixed precision adds the 4-byte fp32 master copy to each.

KV cache (decoder self-attention; GQA-aware), a sum over the decoder's layers: 2 (K and V) x batch x tokens x
num_kv_heads x head_dim x bytes per standard layer, tokens capped per layer at its window or chunk (Mistral's
rolling buffer cache, Jiang et al. 2023, §2); multi-head latent attention caches kv_lora_rank + qk_rope_head_dim
values per token (the compressed latent and the shared rope key, DeepSeek-V2 §2.1.2), the same on every TP rank.
An encoder-decoder's decoder also caches the cross-attention K and V of the source: 2 x batch x src_len x decoder
layers x num_kv_heads x head_dim x bytes. Encoders cache nothing.

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
- mixture of experts: the input, the router logits (t E), each token's top_k routed copies with their inner
  tensors (as a dense FFN of expert_dim, top_k times), the shared experts' inner tensors.

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
and residual dropout masks are replicated. With pipeline parallelism and the 1F1B schedule, stage i holds the
activations of pp - i micro-batches in flight (Narayanan et al. 2021), so the first stage holds as many layers'
worth as the whole model would for one micro-batch.

Peak inference activations are an estimate of the largest set of tensors alive at once in one forward pass with
no autograd: the residual stream plus, for the costliest sublayer, its live intermediates: Q/K/V and the context
(and with eager attention the score matrix and its softmax, 2 x b h n n), or the FFN's inner tensors (2 t f;
gated 3 t f; mixture of experts (top_k expert_dim + shared) per token and the router logits), or the logits
(t vocab). An encoder-decoder's decoder also holds the encoder output.

Every term takes a :class:`~embedcalc.analysis.structure.Dims`, so the sweep grid evaluates these same functions on
numpy arrays (one device, no parallelism); :func:`memory_terms` gives the grid its columns.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from math import prod
from typing import Any

from embedcalc.analysis.breakdown import Breakdown
from embedcalc.analysis.parallel import Stage, sharded_shape, stage_dims, stage_layout, stage_tensors
from embedcalc.analysis.params import model_tensors
from embedcalc.analysis.structure import (
    Dims,
    Num,
    StackDims,
    cross_attention,
    maximum,
    minimum,
    sublayer_norms,
)
from embedcalc.analysis.workload import DTYPE_BYTES, WEIGHT_ONLY_DTYPES, Workload
from embedcalc.config.blocks import Attention, Block
from embedcalc.config.schema import ModelConfig

FP32_BYTES = 4
MASK_BYTES = 1  # torch saves dropout masks as bool tensors
MEMORY_KEYS = (
    "weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes", "kv_cache_bytes", "total_bytes",
)  # fmt: skip


class _MemoryKinds:
    """The five DESIGN.md §5 memory kinds (bytes) and their sum; subclasses are dataclasses that hold them."""

    weights_bytes: int
    gradients_bytes: int
    optimizer_bytes: int
    activations_bytes: int
    kv_cache_bytes: int

    @property
    def total_bytes(self) -> int:
        return (
            self.weights_bytes + self.gradients_bytes + self.optimizer_bytes
            + self.activations_bytes + self.kv_cache_bytes
        )  # fmt: skip


@dataclass(frozen=True)
class StageMemory(_MemoryKinds):
    """Bytes on one device of one pipeline stage."""

    index: int
    num_layers: int
    params: int
    weights_bytes: int
    gradients_bytes: int
    optimizer_bytes: int
    activations_bytes: int
    kv_cache_bytes: int

    def as_dict(self) -> dict[str, int]:
        return {
            "stage": self.index, "num_layers": self.num_layers, "params": self.params,
            **{k: getattr(self, k) for k in MEMORY_KEYS},
        }  # fmt: skip


@dataclass(frozen=True)
class MemoryEstimate(_MemoryKinds):
    """Bytes by kind (DESIGN.md §5 keys) on the heaviest device, the activations breakdown, and every stage."""

    weights_bytes: int
    gradients_bytes: int
    optimizer_bytes: int
    activations_bytes: int
    kv_cache_bytes: int
    activations: Breakdown
    stages: list[StageMemory] = field(default_factory=list)

    def as_dict(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in MEMORY_KEYS}

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {**self.as_dict(), "activations_breakdown": self.activations.as_dict()}
        if len(self.stages) > 1:
            out["stages"] = [s.as_dict() for s in self.stages]
        return out


# --- bytes per parameter ------------------------------------------------------------------------------------------


def mixed_precision(dtype: str) -> bool:
    """Training in bfloat16 / float16 keeps an fp32 master copy (module docstring)."""
    return dtype != "float32"


def training_param_bytes(dtype: str) -> int:
    """Bytes per parameter of the training weights, and of the gradients: 2 in mixed precision, else 4."""
    return 2 if mixed_precision(dtype) else FP32_BYTES


def weight_bytes(num_params: Num, dtype: str) -> Num:
    """Bytes of the weights; int4 packs two parameters per byte (rounded up)."""
    if dtype == "int4":
        return (num_params + 1) // 2
    return num_params * int(DTYPE_BYTES[dtype])


def optimizer_state_bytes(shape: tuple[Num, ...], optimizer: str, mixed: bool) -> Num:
    """Optimizer state of one tensor (module docstring); ``mixed`` adds the fp32 master copy."""
    numel = prod(shape)
    if optimizer == "adamw":
        state = 2 * numel
    elif optimizer == "sgd":
        state = numel
    else:  # adafactor: factored second moment for matrices, full for vectors
        state = sum(shape[:2]) * prod(shape[2:]) if len(shape) >= 2 else numel
    return FP32_BYTES * (state + numel) if mixed else FP32_BYTES * state


# --- per-layer terms on one tensor-parallel rank -------------------------------------------------------------------


@dataclass(frozen=True)
class _Rank:
    """Attention and FFN widths of one block on one TP rank (``tp`` 1: the whole block)."""

    heads: Num
    q: Num  # all query heads' width (Q and, for MLA, K)
    kv: Num  # K (or V) width of standard attention
    v: Num  # the context width (input of the output projection)
    f: Num  # dense FFN width
    fe: Num
    fs: Num


def _rank(block: Block, x: Dims, tp: int, a: Attention | None = None) -> _Rank:
    a = a or block.attention
    w = x.widths(block)
    if a.kind == "mla":
        heads = x.h // tp if tp > 1 else x.h
        qk = a.qk_nope_head_dim + a.qk_rope_head_dim
        return _Rank(heads, heads * qk, heads * qk, heads * a.v_head_dim, w.f // tp, w.fe // tp, w.fs // tp)
    if tp == 1:
        return _Rank(x.h, x.q, x.kv, x.q, w.f, w.fe, w.fs)
    q = x.q // tp
    return _Rank(x.h // tp, q, maximum(1, x.g // tp) * x.hd, q, w.f // tp, w.fe // tp, w.fs // tp)


def kv_cache_values(a: Attention, x: Dims, tp: int = 1) -> Num:
    """Values one layer caches per token on one TP rank: K and V of its KV heads, or MLA's latent + rope key."""
    if a.kind == "mla":
        return a.kv_lora_rank + a.qk_rope_head_dim
    heads = x.g if tp == 1 else maximum(1, x.g // tp)
    return 2 * heads * x.hd


def kv_cache_terms(config: ModelConfig, workload: Workload, x: Dims, tp: int = 1) -> Num:
    """KV cache bytes of the decoder layers in ``x`` on one TP rank (module docstring)."""
    if config.architecture == "encoder":
        return 0
    cached = (x.n if config.architecture == "decoder" else x.n_dec) + workload.gen_tokens
    values: Num = 0
    for sd in x.stacks:
        if sd.name != "decoder":
            continue
        for block, layers in sd.blocks:
            limit = block.attention.cache_limit
            tokens = cached if limit is None else minimum(cached, limit)
            values = values + layers * tokens * kv_cache_values(block.attention, x, tp)
            if sd.stack.cross_attention:  # the cross-attention K and V of the source
                values = values + layers * x.n * kv_cache_values(cross_attention(config), x, tp)
    return x.b * values * workload.activation_bytes


def kv_cache_bytes(config: ModelConfig, workload: Workload, decoder_layers: int | None = None) -> int:
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


def _attention_saved(
    config: ModelConfig,
    workload: Workload,
    a: Attention,
    r: _Rank,
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
    if a.kind == "mla":  # input, q_a out + normed, kv_a out + normed latent, Q, K, V, the context
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
    if workload.attention == "sdpa":
        scores: Num = t * (FP32_BYTES * r.heads)  # log-sum-exp statistics
    elif recompute != "none":
        scores = 0
    else:
        scores = (b * n * n_kv) * ((e + ((MASK_BYTES + e) if dropout else 0)) * r.heads)
    return [(f"{prefix}/linear", linear), (f"{prefix}/scores", scores)]


def _ffn_saved(
    config: ModelConfig, workload: Workload, block: Block, r: _Rank, x: Dims, t: Num
) -> tuple[str, Num]:
    e, d, ffn = workload.activation_bytes, x.d, block.ffn
    inner = 4 if ffn.gated else 2  # activation input and output; gated: gate, up, act(gate), product
    mask = MASK_BYTES * d if config.dropout > 0 else 0
    if not ffn.moe:
        return "ffn", t * (e * d + e * r.f * inner + mask)
    routed = ffn.top_k * (e * d + e * r.fe * inner)
    return "moe", t * (e * d + e * ffn.num_experts + routed + e * r.fs * inner + mask)


def layer_saved(
    config: ModelConfig, workload: Workload, x: Dims, block: Block, sd: StackDims, tp: int, recompute: str
) -> list[tuple[str, Num]]:
    """Saved bytes of one layer of ``block`` on one TP rank, by component (keys relative to the stack)."""
    n, n_mem = x.tokens(config, sd.stack)
    e, t = workload.activation_bytes, x.b * n
    if recompute == "full":
        return [("layer_input", t * (e * x.d))]
    r = _rank(block, x, tp)
    terms = _attention_saved(config, workload, block.attention, r, x, n, n, "attention", recompute)
    attention_norms, cross_norms, ffn_norms = sublayer_norms(config)
    norms = attention_norms + ffn_norms
    if sd.stack.cross_attention:
        a = cross_attention(config)
        terms += _attention_saved(config, workload, a, _rank(block, x, tp, a), x, n, n_mem, "cross_attention",
                                  recompute, cross=True)  # fmt: skip
        norms += cross_norms
    return [*terms, _ffn_saved(config, workload, block, r, x, t), ("norms", t * (norms * e * x.d))]


def _add(out: dict[str, Num], key: str, value: Num) -> None:
    out[key] = out[key] + value if key in out else value


def saved_terms(
    config: ModelConfig, workload: Workload, x: Dims, tp: int = 1
) -> tuple[dict[str, Num], list[tuple[str, Num]]]:
    """Activations kept for the backward pass of one micro-batch on one TP rank of the layers in ``x``:
    (by key, the recompute working set) — the working set is the largest of the candidates, added once."""
    out: dict[str, Num] = {}
    b, e, d = x.b, workload.activation_bytes, x.d
    mask = MASK_BYTES * d if config.dropout > 0 else 0
    working: list[tuple[str, Num]] = []
    for sd in x.stacks:
        n, _ = x.tokens(config, sd.stack)
        t = b * n
        if x.first:
            projected = e * x.d_tok if config.embedding_projection else 0
            _add(out, f"{sd.name}/embedding", t * (e * d + projected + mask))
        for block, layers in sd.blocks:
            for key, value in layer_saved(config, workload, x, block, sd, tp, workload.recompute):
                _add(out, f"{sd.name}/{key}", layers * value)
            if workload.recompute != "none":
                plain = layer_saved(config, workload, x, block, sd, tp, "none")
                if workload.recompute == "selective":
                    # eager re-materialises the n² tensors; sdpa keeps its O(n) statistics either way: nothing
                    plain = [
                        (k, v) for k, v in plain if k.endswith("/scores") and workload.attention == "eager"
                    ]
                size: Num = 0
                for _, value in plain:
                    size = size + value
                working.append((sd.name, size))
        if config.resolved_final_norm and x.last:
            _add(out, f"{sd.name}/final_norm", t * (e * d))
    last = x.stacks[-1]
    if config.resolved_lm_head and x.last:
        n_last, _ = x.tokens(config, last.stack)
        vocab_rank = -(-config.vocab_size // tp)
        head_inputs = d + (x.d_tok if config.embedding_projection else 0)
        _add(out, "head/lm", (b * n_last) * (e * head_inputs + FP32_BYTES * vocab_rank))
    if config.resolved_pooler and x.last:
        _add(out, "pooler", b * (e * d))
    return out, working


def _recompute_key(working: list[tuple[str, Num]]) -> tuple[str, Num]:
    """The largest working set and its stack: (stack, bytes); ties go to the later stack name, as max() does."""
    if not working:
        return "encoder", 0
    if all(isinstance(v, int) for _, v in working):
        size, name = max((v, k) for k, v in working)
        return name, size
    return working[0][0], functools.reduce(maximum, [v for _, v in working])


def saved_activations(config: ModelConfig, workload: Workload, stage: Stage | None = None) -> Breakdown:
    """Activations kept for the backward pass of one micro-batch on one TP rank of ``stage`` (default: all)."""
    x = Dims.of(config, workload.batch_size, workload.seq_len, workload.tgt_len)
    if stage is not None:
        x = stage_dims(config, stage, x)
    terms, working = saved_terms(config, workload, x, workload.parallel.tp)
    out = Breakdown()
    for key, value in terms.items():
        out.add(key, value)
    if workload.recompute != "none":
        name, size = _recompute_key(working)
        out.add(f"{name}/recompute_working_set", size)
    return out


def peak_candidates(config: ModelConfig, workload: Workload, x: Dims, tp: int = 1) -> dict[str, Num]:
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
        base = t * (2 * e * x.d) + memory  # residual stream and the sublayer's input/output
        for block, _ in sd.blocks:
            a, r = block.attention, _rank(block, x, tp)
            if a.kind == "mla":
                q_path = e * (a.q_lora_rank or 0) + e * r.q
                kv_path = e * (a.kv_lora_rank + a.qk_rope_head_dim) + e * (r.q + r.v)
                attention = t * (q_path + kv_path + e * r.v)
            else:
                attention = t * (e * (r.q + 2 * r.kv) + e * r.q)
            if workload.attention == "eager":
                attention = attention + (b * n * n) * (2 * e * r.heads)
            keep(f"{sd.name}/attention", base + attention)
            inner = 3 if block.ffn.gated else 2
            if block.ffn.moe:
                ffn = block.ffn
                keep(
                    f"{sd.name}/moe", base + t * (e * (ffn.top_k * r.fe + r.fs) * inner + e * ffn.num_experts)
                )
            else:
                keep(f"{sd.name}/ffn", base + t * (e * r.f * inner))
    if config.resolved_lm_head and x.last:
        n_last, _ = x.tokens(config, x.stacks[-1].stack)
        vocab_rank = -(-config.vocab_size // tp)
        keep("head/lm", (b * n_last) * (e * (x.d_tok + vocab_rank)))
    return out


def peak_inference_activations(
    config: ModelConfig, workload: Workload, stage: Stage | None = None
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


# --- the whole model on one device (the sweep grid's columns) -------------------------------------------------------


def memory_terms(config: ModelConfig, workload: Workload, x: Dims, params: Num) -> dict[str, Num]:
    """Inference and training memory of one device without parallelism at sizes ``x`` (ints or arrays)."""
    weights = weight_bytes(params, workload.dtype)
    candidates = list(peak_candidates(config, workload, x).values())
    activations = functools.reduce(maximum, candidates) if candidates else 0
    kv_cache = kv_cache_terms(config, workload, x)
    out: dict[str, Num] = {
        "inference_weights_bytes": weights,
        "inference_activations_bytes": activations,
        "kv_cache_bytes": kv_cache,
        "inference_total_bytes": weights + activations + kv_cache,
    }
    if workload.dtype in WEIGHT_ONLY_DTYPES:
        return out
    mixed = mixed_precision(workload.dtype)
    optimizer: Num = 0
    for t in model_tensors(config, x):
        optimizer = optimizer + t.copies * optimizer_state_bytes(t.shape, workload.optimizer, mixed)
    terms, working = saved_terms(config, workload, x)
    saved: Num = 0
    for value in terms.values():
        saved = saved + value
    if workload.recompute != "none":
        saved = saved + _recompute_key(working)[1]
    per_param = training_param_bytes(workload.dtype)
    return out | {
        "training_weights_bytes": params * per_param,
        "gradients_bytes": params * per_param,
        "optimizer_bytes": optimizer,
        "training_activations_bytes": saved,
        "training_total_bytes": params * (2 * per_param) + optimizer + saved,
    }


# --- per device, per pipeline stage -----------------------------------------------------------------------------------


def _stage_memory(
    config: ModelConfig, workload: Workload, stage: Stage, tensors: list[tuple[Any, int]]
) -> StageMemory:
    par = workload.parallel
    shapes = [(sharded_shape(t, par, config), n, t.expert) for t, n in tensors]
    params = sum(prod(shape) * n for shape, n, _ in shapes)
    x = stage_dims(config, stage, Dims.of(config, workload.batch_size, workload.seq_len, workload.tgt_len))
    if workload.mode == "inference":
        activations = peak_inference_activations(config, workload, stage)
        return StageMemory(
            stage.index, stage.num_layers, params, weight_bytes(params, workload.dtype), 0, 0,
            activations.total, int(kv_cache_terms(config, workload, x, par.tp)),
        )  # fmt: skip
    mixed = mixed_precision(workload.dtype)
    in_flight = par.pp - stage.index  # 1F1B: micro-batches whose activations stage i holds
    per_param = training_param_bytes(workload.dtype)
    zero, dp = par.zero, par.dp

    def sharded(total_dense: int, total_expert: int, level: int) -> int:
        """ZeRO: dense state over dp ranks, expert state over the dp / ep ranks that hold the same experts."""
        if zero < level:
            return total_dense + total_expert
        return -(-total_dense // dp) + -(-total_expert // max(1, dp // par.ep))

    expert_params = sum(prod(shape) * n for shape, n, expert in shapes if expert)
    dense_params = params - expert_params
    optimizer = [
        sum(
            optimizer_state_bytes(shape, workload.optimizer, mixed) * n
            for shape, n, e in shapes
            if e == expert
        )
        for expert in (False, True)
    ]
    return StageMemory(
        stage.index, stage.num_layers, params,
        weights_bytes=sharded(dense_params * per_param, expert_params * per_param, 3),
        gradients_bytes=sharded(dense_params * per_param, expert_params * per_param, 2),
        optimizer_bytes=sharded(optimizer[0], optimizer[1], 1),
        activations_bytes=in_flight * saved_activations(config, workload, stage).total,
        kv_cache_bytes=0,
    )  # fmt: skip


def estimate_memory(config: ModelConfig, workload: Workload) -> MemoryEstimate:
    """Per-device memory of ``workload``: the heaviest pipeline stage, with every stage listed."""
    if workload.mode == "training" and workload.dtype in WEIGHT_ONLY_DTYPES:
        raise ValueError(f"{workload.dtype} is a weight-only inference format; train in float32 or bfloat16")
    layout = stage_layout(config, workload.parallel.pp)
    per_stage = stage_tensors(config, workload.parallel)
    stages = [_stage_memory(config, workload, s, t) for s, t in zip(layout, per_stage, strict=True)]
    heaviest = max(stages, key=lambda s: s.total_bytes)
    stage = layout[heaviest.index]
    if workload.mode == "inference":
        activations = peak_inference_activations(config, workload, stage)
    else:
        activations = Breakdown()
        in_flight = workload.parallel.pp - stage.index
        for key, value in saved_activations(config, workload, stage).items():
            activations.add(key, in_flight * value)
    return MemoryEstimate(
        weights_bytes=heaviest.weights_bytes,
        gradients_bytes=heaviest.gradients_bytes,
        optimizer_bytes=heaviest.optimizer_bytes,
        activations_bytes=heaviest.activations_bytes,
        kv_cache_bytes=heaviest.kv_cache_bytes,
        activations=activations,
        stages=stages,
    )
