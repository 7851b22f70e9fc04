"""Memory estimates (bytes) for inference and training, by component.

Inference = weights + KV cache + peak activations of one forward pass.
Training  = weights + gradients + optimizer state + activations saved for the backward pass.

Weights, gradients and optimizer state are exact for the stated precision recipe:

- float32: weights 4, gradients 4, AdamW moments 8 bytes per parameter (4 + 4 + 8 = 16).
- bfloat16 / float16 mixed precision (Micikevicius et al. 2018; Rajbhandari et al. 2020, ZeRO §3): weights 2,
  gradients 2, and an fp32 master copy plus two fp32 moments, 12 bytes per parameter (2 + 2 + 12 = 16).
- int8 / int4 are weight-only inference formats: 1 and 0.5 bytes per parameter, activations in float16.

KV cache (decoder self-attention; GQA-aware): 2 (K and V) x batch x tokens x layers x num_kv_heads x head_dim x
bytes. An encoder-decoder's decoder also caches the cross-attention K and V of the source: 2 x batch x src_len x
decoder layers x num_kv_heads x head_dim x bytes. Encoders cache nothing.

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
``--recompute full`` keeps only each layer's input (t d). Outside the layers: the embedding output (t d) and its
dropout mask, the final norm input, and for an LM head its input (t d) plus fp32 logits for the loss (4 t vocab).

Peak inference activations are an estimate of the largest set of tensors alive at once in one forward pass with
no autograd: the residual stream plus, for the costliest sublayer, its live intermediates: Q/K/V and the context
(and with eager attention the score matrix and its softmax, 2 x b h n n), or the FFN's inner tensors (2 t f;
gated 3 t f), or the logits (t vocab). An encoder-decoder's decoder also holds the encoder output.
"""

from __future__ import annotations

from dataclasses import dataclass

from embedcalc.analysis.breakdown import Breakdown
from embedcalc.analysis.structure import Stack, stacks
from embedcalc.analysis.workload import WEIGHT_ONLY_DTYPES, Workload
from embedcalc.config.schema import ModelConfig

FP32_BYTES = 4
MASK_BYTES = 1  # torch saves dropout masks as bool tensors


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes by kind (DESIGN.md §5 keys) and the breakdown of activations."""

    weights_bytes: int
    gradients_bytes: int
    optimizer_bytes: int
    activations_bytes: int
    kv_cache_bytes: int
    activations: Breakdown

    @property
    def total_bytes(self) -> int:
        return (
            self.weights_bytes
            + self.gradients_bytes
            + self.optimizer_bytes
            + self.activations_bytes
            + self.kv_cache_bytes
        )

    def as_dict(self) -> dict[str, int]:
        return {
            "weights_bytes": self.weights_bytes,
            "gradients_bytes": self.gradients_bytes,
            "optimizer_bytes": self.optimizer_bytes,
            "activations_bytes": self.activations_bytes,
            "kv_cache_bytes": self.kv_cache_bytes,
            "total_bytes": self.total_bytes,
        }


def _lengths(config: ModelConfig, workload: Workload, stack: Stack) -> tuple[int, int]:
    if config.architecture == "encoder-decoder" and stack.name == "decoder":
        return (workload.tgt_len if workload.tgt_len is not None else workload.seq_len), workload.seq_len
    return workload.seq_len, workload.seq_len


def weight_bytes(num_params: int, dtype: str) -> int:
    """Bytes of the weights; int4 packs two parameters per byte (rounded up)."""
    if dtype == "int4":
        return (num_params + 1) // 2
    return num_params * {"float32": 4, "bfloat16": 2, "float16": 2, "int8": 1}[dtype]


def kv_cache_bytes(config: ModelConfig, workload: Workload, cached_tokens: int | None = None) -> int:
    """K and V of every decoder layer for ``batch_size`` sequences (see the module docstring)."""
    e, b, kv = workload.activation_bytes, workload.batch_size, config.kv_dim
    if config.architecture == "encoder":
        return 0
    if config.architecture == "decoder":
        tokens = cached_tokens if cached_tokens is not None else workload.seq_len
        return 2 * b * tokens * config.num_layers * kv * e
    tgt = cached_tokens if cached_tokens is not None else (workload.tgt_len or workload.seq_len)
    layers = config.resolved_decoder_layers
    return 2 * b * tgt * layers * kv * e + 2 * b * workload.seq_len * layers * kv * e


def _attention_saved(
    config: ModelConfig, workload: Workload, b: int, n: int, n_kv: int, keys: tuple[str, str]
) -> list[tuple[str, int]]:
    """Saved bytes of one attention sublayer (queries on n tokens, keys/values on n_kv tokens)."""
    e, d, q, kv, h = (
        workload.activation_bytes,
        config.embed_dim,
        config.q_dim,
        config.kv_dim,
        config.num_heads,
    )
    dropout = config.dropout > 0
    linear_key, score_key = keys
    linear = e * b * n * d + e * b * n * q + e * b * n_kv * 2 * kv + e * b * n * q
    if n_kv != n:  # cross-attention: K and V are projected from the encoder output, saved once more
        linear += e * b * n_kv * d
    if dropout:
        linear += MASK_BYTES * b * n * d
    if workload.recompute != "none" or workload.attention == "sdpa":
        scores = FP32_BYTES * b * h * n if workload.attention == "sdpa" else 0
    else:
        per_score = e + ((MASK_BYTES + e) if dropout else 0)
        scores = per_score * b * h * n * n_kv
    return [(linear_key, linear), (score_key, scores)]


def _layer_saved(config: ModelConfig, workload: Workload, stack: Stack) -> list[tuple[str, int]]:
    """Saved bytes of one block of ``stack`` by component (keys relative to the stack)."""
    n, n_mem = _lengths(config, workload, stack)
    b, e, d, f = workload.batch_size, workload.activation_bytes, config.embed_dim, config.resolved_ffn_dim
    t = b * n
    if workload.recompute == "full":
        return [("layer_input", e * t * d)]
    terms = _attention_saved(config, workload, b, n, n, ("attention/linear", "attention/scores"))
    norms = 2
    if stack.cross_attention:
        terms += _attention_saved(
            config, workload, b, n, n_mem, ("cross_attention/linear", "cross_attention/scores")
        )
        norms = 3
    ffn = e * t * d + e * t * f * (4 if config.gated else 2)
    if config.dropout > 0:
        ffn += MASK_BYTES * t * d
    terms += [("ffn", ffn), ("norms", norms * e * t * d)]
    return terms


def saved_activations(config: ModelConfig, workload: Workload) -> Breakdown:
    """Activations kept for the backward pass of one training step, by component."""
    out = Breakdown()
    b, e, d = workload.batch_size, workload.activation_bytes, config.embed_dim
    all_stacks = stacks(config)
    for stack in all_stacks:
        n, _ = _lengths(config, workload, stack)
        t = b * n
        out.add(f"{stack.name}/embedding", e * t * d + (MASK_BYTES * t * d if config.dropout > 0 else 0))
        for key, value in _layer_saved(config, workload, stack):
            out.add(f"{stack.name}/{key}", stack.num_layers * value)
        if config.resolved_norm_placement == "pre":
            out.add(f"{stack.name}/final_norm", e * t * d)
    if config.resolved_lm_head:
        n_last, _ = _lengths(config, workload, all_stacks[-1])
        t = b * n_last
        out.add("head/lm", e * t * d + FP32_BYTES * t * config.vocab_size)
    if config.resolved_pooler:
        out.add("pooler", e * b * d)
    return out


def peak_inference_activations(config: ModelConfig, workload: Workload) -> Breakdown:
    """The largest set of activations alive at once in one forward pass (no autograd), by stage."""
    b, e, d, f = workload.batch_size, workload.activation_bytes, config.embed_dim, config.resolved_ffn_dim
    q, kv, h = config.q_dim, config.kv_dim, config.num_heads
    stages: dict[str, int] = {}
    all_stacks = stacks(config)
    for stack in all_stacks:
        n, n_mem = _lengths(config, workload, stack)
        t = b * n
        memory = e * b * n_mem * d if stack.cross_attention else 0  # encoder output held by the decoder
        base = 2 * e * t * d + memory  # residual stream and the sublayer's input/output
        attention = e * t * (q + 2 * kv) + e * t * q
        if workload.attention == "eager":
            attention += 2 * e * b * h * n * n
        ffn = e * t * f * (3 if config.gated else 2)
        stages[f"{stack.name}/attention"] = base + attention
        stages[f"{stack.name}/ffn"] = base + ffn
    if config.resolved_lm_head:
        n_last, _ = _lengths(config, workload, all_stacks[-1])
        stages["head/lm"] = e * b * n_last * (d + config.vocab_size)
    key = max(stages, key=lambda k: stages[k])
    out = Breakdown()
    out.add(key, stages[key])
    return out


def estimate_memory(config: ModelConfig, workload: Workload, num_params: int) -> MemoryEstimate:
    """Memory of ``workload`` on one device (no parallelism), by DESIGN.md §5 key."""
    if workload.mode == "inference":
        activations = peak_inference_activations(config, workload)
        return MemoryEstimate(
            weights_bytes=weight_bytes(num_params, workload.dtype),
            gradients_bytes=0,
            optimizer_bytes=0,
            activations_bytes=activations.total,
            kv_cache_bytes=kv_cache_bytes(config, workload) if config.architecture != "encoder" else 0,
            activations=activations,
        )
    if workload.dtype in WEIGHT_ONLY_DTYPES:
        raise ValueError(f"{workload.dtype} is a weight-only inference format; train in float32 or bfloat16")
    mixed = workload.dtype != "float32"
    activations = saved_activations(config, workload)
    return MemoryEstimate(
        weights_bytes=num_params * (2 if mixed else 4),
        gradients_bytes=num_params * (2 if mixed else 4),
        optimizer_bytes=num_params * (12 if mixed else 8),
        activations_bytes=activations.total,
        kv_cache_bytes=0,
        activations=activations,
    )
