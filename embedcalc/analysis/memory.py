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

KV cache (decoder self-attention; GQA-aware): 2 (K and V) x batch x tokens x layers x num_kv_heads x head_dim x
bytes, tokens capped at ``sliding_window`` when set (Mistral's rolling buffer cache, Jiang et al. 2023, §2). An
encoder-decoder's decoder also caches the cross-attention K and V of the source: 2 x batch x src_len x decoder
layers x num_kv_heads x head_dim x bytes. Encoders cache nothing.

Saved activations follow Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer
Models", §4.1, eq. 1: 34 s b h + 5 a s² b bytes per layer for 16-bit activations, a 4h FFN and dropout),
generalised term by term to any dtype, GQA, head_dim, FFN width, gated FFNs and dropout 0:

- attention: input of the QKV projection (t d), Q and K for Q·Kᵀ (t (q + kv)), V (t kv), the softmax output
  (b h n²), with dropout its 1-byte mask and its output (b h n² each), the input of the output projection (t q),
  the 1-byte mask of the residual dropout (t d);
- FFN: input (t d), activation input and output (2 t f; gated: gate, up, act(gate), product = 4 t f), 1-byte
  dropout mask (t d);
- norms: each saves its input (t d); a layer has two (three with cross-attention).

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
gated 3 t f), or the logits (t vocab). An encoder-decoder's decoder also holds the encoder output.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from math import prod
from typing import Any

from embedcalc.analysis.breakdown import Breakdown
from embedcalc.analysis.parallel import Stage, sharded_shape, stage_layout, stage_tensors
from embedcalc.analysis.structure import Stack, stacks
from embedcalc.analysis.workload import WEIGHT_ONLY_DTYPES, Workload
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


@dataclass(frozen=True)
class _RankDims:
    """Widths on one tensor-parallel rank."""

    d: int
    q: int
    kv: int
    f: int
    heads: int


def _rank_dims(config: ModelConfig, tp: int) -> _RankDims:
    hd = config.resolved_head_dim
    return _RankDims(
        d=config.embed_dim,
        q=config.q_dim // tp,
        kv=max(1, config.resolved_kv_heads // tp) * hd,
        f=config.resolved_ffn_dim // tp,
        heads=config.num_heads // tp,
    )


def _lengths(config: ModelConfig, workload: Workload, stack: Stack) -> tuple[int, int]:
    if config.architecture == "encoder-decoder" and stack.name == "decoder":
        return (workload.tgt_len if workload.tgt_len is not None else workload.seq_len), workload.seq_len
    return workload.seq_len, workload.seq_len


def weight_bytes(num_params: int, dtype: str) -> int:
    """Bytes of the weights; int4 packs two parameters per byte (rounded up)."""
    if dtype == "int4":
        return (num_params + 1) // 2
    return num_params * {"float32": 4, "bfloat16": 2, "float16": 2, "int8": 1}[dtype]


def _kv_tokens(config: ModelConfig, workload: Workload) -> int:
    """Self-attention tokens cached per sequence: the prompt (target for encoder-decoders) plus generated ones."""
    prompt = workload.seq_len
    if config.architecture == "encoder-decoder":
        prompt = workload.tgt_len if workload.tgt_len is not None else workload.seq_len
    return prompt + workload.gen_tokens


def kv_cache_bytes(config: ModelConfig, workload: Workload, decoder_layers: int | None = None) -> int:
    """K and V of ``decoder_layers`` decoder blocks (default all) on one TP rank (module docstring)."""
    if config.architecture == "encoder":
        return 0
    e, b = workload.activation_bytes, workload.batch_size
    kv = _rank_dims(config, workload.parallel.tp).kv
    layers = config.num_layers if config.architecture == "decoder" else config.resolved_decoder_layers
    layers = layers if decoder_layers is None else decoder_layers
    cached = _kv_tokens(config, workload)
    if config.sliding_window is not None:
        cached = min(cached, config.sliding_window)
    if config.architecture == "encoder-decoder":
        cached += workload.seq_len  # the cross-attention K and V of the source
    return 2 * b * cached * layers * kv * e


def _attention_saved(
    config: ModelConfig, workload: Workload, r: _RankDims, n: int, n_kv: int, prefix: str
) -> list[tuple[str, int]]:
    """Saved bytes of one attention sublayer on one TP rank (queries on n tokens, keys/values on n_kv)."""
    e, b, dropout = workload.activation_bytes, workload.batch_size, config.dropout > 0
    linear = e * b * n * r.d + e * b * n * r.q + e * b * n_kv * 2 * r.kv + e * b * n * r.q
    if n_kv != n or prefix == "cross_attention":  # K and V come from the encoder output, saved as their input
        linear += e * b * n_kv * r.d
    if dropout:
        linear += MASK_BYTES * b * n * r.d
    if workload.attention == "sdpa":
        scores = FP32_BYTES * b * r.heads * n  # log-sum-exp statistics
    elif workload.recompute != "none":
        scores = 0
    else:
        scores = (e + ((MASK_BYTES + e) if dropout else 0)) * b * r.heads * n * n_kv
    return [(f"{prefix}/linear", linear), (f"{prefix}/scores", scores)]


def _layer_saved(config: ModelConfig, workload: Workload, stack: Stack) -> list[tuple[str, int]]:
    """Saved bytes of one block of ``stack`` on one TP rank, by component (keys relative to the stack)."""
    n, n_mem = _lengths(config, workload, stack)
    b, e = workload.batch_size, workload.activation_bytes
    r = _rank_dims(config, workload.parallel.tp)
    t = b * n
    if workload.recompute == "full":
        return [("layer_input", e * t * r.d)]
    terms = _attention_saved(config, workload, r, n, n, "attention")
    if stack.cross_attention:
        terms += _attention_saved(config, workload, r, n, n_mem, "cross_attention")
    ffn = e * t * r.d + e * t * r.f * (4 if config.gated else 2)
    if config.dropout > 0:
        ffn += MASK_BYTES * t * r.d
    norms = 3 if stack.cross_attention else 2
    return [*terms, ("ffn", ffn), ("norms", norms * e * t * r.d)]


def saved_activations(config: ModelConfig, workload: Workload, stage: Stage | None = None) -> Breakdown:
    """Activations kept for the backward pass of one micro-batch on one TP rank of ``stage`` (default: all)."""
    out = Breakdown()
    b, e, d = workload.batch_size, workload.activation_bytes, config.embed_dim
    all_stacks = stacks(config)
    first = stage is None or stage.first
    last = stage is None or stage.last
    for stack in all_stacks:
        n, _ = _lengths(config, workload, stack)
        t = b * n
        layers = stack.num_layers if stage is None else stage.layers.get(stack.name, 0)
        if first:
            projected = e * t * config.resolved_token_embed_dim if config.embedding_projection else 0
            out.add(
                f"{stack.name}/embedding",
                e * t * d + projected + (MASK_BYTES * t * d if config.dropout > 0 else 0),
            )
        for key, value in _layer_saved(config, workload, stack):
            out.add(f"{stack.name}/{key}", layers * value)
        if config.resolved_final_norm and last:
            out.add(f"{stack.name}/final_norm", e * t * d)
    if config.resolved_lm_head and last:
        n_last, _ = _lengths(config, workload, all_stacks[-1])
        vocab_rank = -(-config.vocab_size // workload.parallel.tp)
        head_inputs = d + (config.resolved_token_embed_dim if config.embedding_projection else 0)
        out.add("head/lm", e * b * n_last * head_inputs + FP32_BYTES * b * n_last * vocab_rank)
    if config.resolved_pooler and last:
        out.add("pooler", e * b * d)
    if workload.recompute != "none":
        name, size = _recompute_working_set(config, workload, stage)
        out.add(f"{name}/recompute_working_set", size)
    return out


def _recompute_working_set(config: ModelConfig, workload: Workload, stage: Stage | None) -> tuple[str, int]:
    """What the backward pass re-materialises at a time: one block's activations (full recompute) or one
    attention core's n² tensors (selective), for the largest block this stage holds: (stack, bytes)."""
    plain = replace(workload, recompute="none")
    sizes: list[tuple[int, str]] = []
    for stack in stacks(config):
        if stage is not None and not stage.layers.get(stack.name):
            continue
        terms = _layer_saved(config, plain, stack)
        if workload.recompute == "selective":
            # eager re-materialises the n² tensors; sdpa keeps its O(n) statistics either way: nothing extra
            terms = [(k, v) for k, v in terms if k.endswith("/scores") and workload.attention == "eager"]
        sizes.append((sum(v for _, v in terms), stack.name))
    size, name = max(sizes, default=(0, "encoder"))
    return name, size


def peak_inference_activations(
    config: ModelConfig, workload: Workload, stage: Stage | None = None
) -> Breakdown:
    """The largest set of activations alive at once in one forward pass (no autograd) on one TP rank."""
    b, e = workload.batch_size, workload.activation_bytes
    r = _rank_dims(config, workload.parallel.tp)
    stages: dict[str, int] = {}
    all_stacks = stacks(config)
    for stack in all_stacks:
        if stage is not None and not stage.layers.get(stack.name):
            continue
        n, n_mem = _lengths(config, workload, stack)
        t = b * n
        memory = e * b * n_mem * r.d if stack.cross_attention else 0  # encoder output held by the decoder
        base = 2 * e * t * r.d + memory  # residual stream and the sublayer's input/output
        attention = e * t * (r.q + 2 * r.kv) + e * t * r.q
        if workload.attention == "eager":
            attention += 2 * e * b * r.heads * n * n
        stages[f"{stack.name}/attention"] = base + attention
        stages[f"{stack.name}/ffn"] = base + e * t * r.f * (3 if config.gated else 2)
    if config.resolved_lm_head and (stage is None or stage.last):
        n_last, _ = _lengths(config, workload, all_stacks[-1])
        vocab_rank = -(-config.vocab_size // workload.parallel.tp)
        stages["head/lm"] = e * b * n_last * (config.resolved_token_embed_dim + vocab_rank)
    out = Breakdown()
    if stages:
        key = max(stages, key=lambda k: stages[k])
        out.add(key, stages[key])
    return out


def optimizer_state_bytes(shape: tuple[int, ...], optimizer: str, mixed: bool) -> int:
    """Optimizer state of one tensor (module docstring); ``mixed`` adds the fp32 master copy."""
    numel = prod(shape)
    if optimizer == "adamw":
        state = 2 * numel
    elif optimizer == "sgd":
        state = numel
    else:  # adafactor: factored second moment for matrices, full for vectors
        state = sum(shape[:2]) * prod(shape[2:]) if len(shape) >= 2 else numel
    return FP32_BYTES * (state + (numel if mixed else 0))


def _stage_memory(
    config: ModelConfig, workload: Workload, stage: Stage, tensors: list[tuple[Any, int]]
) -> StageMemory:
    par = workload.parallel
    shapes = [(sharded_shape(t, par, config), n) for t, n in tensors]
    params = sum(prod(shape) * n for shape, n in shapes)
    decoder_layers = stage.layers.get("decoder", 0)
    if workload.mode == "inference":
        activations = peak_inference_activations(config, workload, stage)
        return StageMemory(
            stage.index, stage.num_layers, params, weight_bytes(params, workload.dtype), 0, 0,
            activations.total, kv_cache_bytes(config, workload, decoder_layers),
        )  # fmt: skip
    mixed = workload.dtype != "float32"
    in_flight = par.pp - stage.index  # 1F1B: micro-batches whose activations stage i holds
    optimizer = sum(optimizer_state_bytes(shape, workload.optimizer, mixed) * n for shape, n in shapes)
    weights = params * (2 if mixed else 4)
    gradients = params * (2 if mixed else 4)
    zero, dp = par.zero, par.dp
    return StageMemory(
        stage.index, stage.num_layers, params,
        weights_bytes=-(-weights // dp) if zero >= 3 else weights,
        gradients_bytes=-(-gradients // dp) if zero >= 2 else gradients,
        optimizer_bytes=-(-optimizer // dp) if zero >= 1 else optimizer,
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
