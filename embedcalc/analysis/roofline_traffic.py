"""Bytes moved by each component of a forward (prefill) or a decode step: the traffic side of the roofline.

The conventions are stated once, in :mod:`embedcalc.analysis.roofline`; this module implements them on the public
counts (:func:`~embedcalc.analysis.params.param_tensors` for weights, :func:`~embedcalc.analysis.flops.forward_flops`
for FLOPs by the same keys).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from embedcalc.analysis.flops import forward_flops
from embedcalc.analysis.memory_inference import kv_cache_bytes
from embedcalc.analysis.params import count_params, param_tensors
from embedcalc.analysis.workload import DTYPE_BYTES, Parallelism, Workload
from embedcalc.config.schema import ModelConfig

_CORE = ("scores", "context")
_LOOKUPS = ("embedding/token", "embedding/position", "embedding/type")


@dataclass(frozen=True)
class Traffic:
    """FLOPs and bytes moved by one component in one phase, on one device."""

    flops: int = 0
    weight_bytes: int = 0
    activation_bytes: int = 0
    kv_read_bytes: int = 0
    kv_write_bytes: int = 0

    @property
    def bytes(self) -> int:
        return self.weight_bytes + self.activation_bytes + self.kv_read_bytes + self.kv_write_bytes

    def __add__(self, other: Traffic) -> Traffic:
        return Traffic(*(a + b for a, b in zip(_fields(self), _fields(other), strict=True)))

    def scaled(self, factor: int) -> Traffic:
        return Traffic(*(factor * v for v in _fields(self)))

    def divided(self, tp: int, weights_split: int) -> Traffic:
        """Per TP rank: everything / tp, except weights, of which ``weights_split`` bytes are split."""
        replicated = self.weight_bytes - weights_split
        return Traffic(-(-self.flops // tp), replicated + -(-weights_split // tp),
                       -(-self.activation_bytes // tp), -(-self.kv_read_bytes // tp),
                       -(-self.kv_write_bytes // tp))  # fmt: skip


def _fields(t: Traffic) -> tuple[int, int, int, int, int]:
    return t.flops, t.weight_bytes, t.activation_bytes, t.kv_read_bytes, t.kv_write_bytes


# --- by component ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Weights:
    """Parameters by breakdown key: element count, split element count, matrix shape (out, in), active count."""

    numel: dict[str, int]
    split: dict[str, int]
    shape: dict[str, tuple[int, int]]
    layers: dict[str, int]
    active: dict[str, int] | None
    experts: tuple[int, int] | None = None  # (num_experts, top_k) of the MoE layers, None without MoE


def weights_of(config: ModelConfig) -> Weights:
    numel: dict[str, int] = {}
    split: dict[str, int] = {}
    shape: dict[str, tuple[int, int]] = {}
    layers: dict[str, int] = {}
    for t in param_tensors(config):
        numel[t.key] = numel.get(t.key, 0) + t.numel
        if getattr(t, "split", "none") != "none":
            split[t.key] = split.get(t.key, 0) + t.numel
        if len(t.shape) == 2 and t.key not in shape:
            shape[t.key] = (t.shape[0], t.shape[1])
            layers[t.key] = t.copies
    active: Any = getattr(
        count_params(config), "active", None
    )  # MoE: the layer model's active-per-token params
    moe = [b.ffn for b in config.named_blocks.values() if b.ffn.moe]
    experts = (moe[0].num_experts, moe[0].top_k) if moe else None
    return Weights(numel, split, shape, layers, active.as_dict() if active is not None else None, experts)


def _weight_bytes(numel: int, dtype: str) -> int:
    return math.ceil(numel * DTYPE_BYTES[dtype])


@dataclass(frozen=True)
class Lengths:
    """Per stack: query tokens per sequence m and key tokens n of self- and cross-attention, in one phase."""

    self_m: dict[str, int]
    self_n: dict[str, int]
    cross_n: int
    lookups: int  # tokens looked up in the token table per sequence
    self_cache_bytes: int | None = None  # decode: the self-attention KV cache read per step (all layers)


def prefill_lengths(config: ModelConfig, w: Workload) -> Lengths:
    if config.architecture == "encoder-decoder":
        tgt = w.tgt_len if w.tgt_len is not None else w.seq_len
        m = {"encoder": w.seq_len, "decoder": tgt}
        return Lengths(m, dict(m), w.seq_len, w.seq_len + tgt)
    stack = "encoder" if config.architecture == "encoder" else "decoder"
    return Lengths({stack: w.seq_len}, {stack: w.seq_len}, 0, w.seq_len)


def decode_lengths(config: ModelConfig, w: Workload, kv_len: int, kv_bytes: int | None = None) -> Lengths:
    """One query per sequence against ``kv_len`` cached tokens. The bytes read are the memory model's KV cache at
    that length (per-layer windows and chunks, latent attention's compressed cache) in the KV dtype, less an
    encoder-decoder's cross-attention part, which the cross cores read."""
    window = getattr(config, "sliding_window", None)
    cached = kv_len if window is None else min(kv_len, window)
    at = replace(_at_kv_len(config, w, kv_len), parallel=Parallelism())  # the whole model; per_device splits it
    total = kv_cache_bytes(config, at)
    if config.architecture == "encoder-decoder":
        cross_layers = config.resolved_decoder_layers
        total -= 2 * w.batch_size * w.seq_len * cross_layers * config.kv_dim * at.activation_bytes
    if kv_bytes is not None:
        total = total * kv_bytes // at.activation_bytes
    return Lengths({"decoder": 1}, {"decoder": cached}, w.seq_len, 1, total)


def _core_traffic(key: str, config: ModelConfig, w: Workload, lengths: Lengths, layers: int, decode: bool,
                  kv_bytes: int) -> Traffic:  # fmt: skip
    """Bytes of one attention core (Q·Kᵀ or A·V) of one stack, all its layers (module docstring)."""
    stack, kind, _ = key.split("/")[-3:]
    b, e = w.batch_size, w.activation_bytes
    q, kv = config.num_heads * config.resolved_head_dim, config.resolved_kv_heads * config.resolved_head_dim
    m = lengths.self_m.get(stack, 0)
    n = lengths.cross_n if kind == "cross_attention" else lengths.self_n.get(stack, 0)
    keys = b * n * kv * layers  # K (scores) or V (context) elements
    activation = b * m * q * layers * e  # Q read (scores) or the output written (context)
    if w.attention == "eager":
        activation += b * config.num_heads * m * n * layers * e  # scores written / probabilities read
    if decode:  # one query per sequence: its vectors stay on chip; the cache is what is read
        if kind != "cross_attention" and lengths.self_cache_bytes is not None:
            return Traffic(kv_read_bytes=lengths.self_cache_bytes // 2)  # K (scores) or V (context), exact halves
        return Traffic(kv_read_bytes=keys * kv_bytes)
    return Traffic(activation_bytes=activation + keys * e)


def phase_traffic(config: ModelConfig, w: Workload, flops: Mapping[str, int], lengths: Lengths, decode: bool,
                   kv_bytes: int, weights: Weights) -> dict[str, Traffic]:  # fmt: skip
    """Per component, the whole model's traffic for one phase (before the TP split)."""
    out: dict[str, Traffic] = {}
    e, b = w.activation_bytes, w.batch_size
    tied = config.resolved_lm_head and config.tie_embeddings
    caches = w.mode == "inference" and config.architecture != "encoder"
    for key, f in flops.items():
        if f <= 0:
            continue
        if key.rsplit("/", 1)[-1] in _CORE:
            layers = weights.layers.get(key.rsplit("/", 1)[0] + "/qkv", 1)
            out[key] = Traffic(flops=f) + _core_traffic(key, config, w, lengths, layers, decode, kv_bytes)
            continue
        wkey = "embedding/token" if key == "head/lm" and tied else key
        out_f, in_f = weights.shape.get(wkey, (1, 1))
        tokens = f / (2 * out_f * in_f)  # token-layers through this matmul
        numel = weights.numel.get(wkey, 0)
        if decode and key.endswith("cross_attention/qkv"):  # K and V of the source are cached: Q only
            numel = numel * (out_f - 2 * config.resolved_kv_heads * config.resolved_head_dim) // out_f
        numel = _active(weights, wkey, numel, tokens)
        if key.endswith("/moe/experts") and weights.experts is not None:
            experts, top_k = weights.experts
            per_layer_tokens = w.batch_size * (1 if decode else max(lengths.self_m.values(), default=1))
            numel = numel * min(experts, per_layer_tokens * top_k) // experts  # the experts its tokens reach
        moved = 0 if decode else round(tokens * (in_f + out_f)) * e  # decode: b x width vectors, on chip
        out[key] = Traffic(flops=f, weight_bytes=_weight_bytes(numel, w.dtype), activation_bytes=moved)
    if caches and not decode:  # decode: the new token's K and V, 1/n of the cache read, are not counted
        _add_kv_writes(config, w, lengths, decode, kv_bytes, weights, out)
    for key, numel in weights.numel.items():
        if key in out:
            continue
        if decode and key.startswith("encoder/"):
            continue  # the encoder does not run while decoding
        if key in _LOOKUPS:
            width = weights.shape.get(key, (1, numel))[1]
            rows = b * lengths.lookups if key == "embedding/token" else lengths.lookups
            read = min(numel, rows * width)
            looked_up = 0 if decode else b * lengths.lookups * width * e
            out[key] = Traffic(weight_bytes=_weight_bytes(read, w.dtype), activation_bytes=looked_up)
        elif key not in flops:
            out[key] = Traffic(weight_bytes=_weight_bytes(numel, w.dtype))
    return out


def _active(weights: Weights, key: str, numel: int, tokens: float) -> int:
    """MoE: a step reads at most the experts its tokens activate (active params per token × tokens)."""
    if weights.active is None or key not in weights.active:
        return numel
    return min(numel, weights.active[key] * max(1, math.ceil(tokens)))


def _add_kv_writes(config: ModelConfig, w: Workload, lengths: Lengths, decode: bool, kv_bytes: int,
                   weights: Weights, out: dict[str, Traffic]) -> None:  # fmt: skip
    """K and V of the new tokens written to the cache, on the projection that makes them."""
    kv = config.resolved_kv_heads * config.resolved_head_dim
    b = w.batch_size
    layers = weights.layers.get("decoder/attention/qkv", 0)
    new = lengths.self_m.get("decoder", 0)
    if "decoder/attention/qkv" in out:
        out["decoder/attention/qkv"] += Traffic(kv_write_bytes=2 * b * new * kv * layers * kv_bytes)
    if not decode and "decoder/cross_attention/qkv" in out:  # the source's K and V, once
        cross_layers = weights.layers.get("decoder/cross_attention/qkv", 0)
        out["decoder/cross_attention/qkv"] += Traffic(
            kv_write_bytes=2 * b * lengths.cross_n * kv * cross_layers * kv_bytes
        )


def per_device(config: ModelConfig, w: Workload, traffic: dict[str, Traffic], weights: Weights,
                divisor: int) -> dict[str, Traffic]:  # fmt: skip
    """Per device: split by ``divisor`` (tp, or tp × pp), weights of replicated tensors whole."""
    if divisor == 1:
        return traffic
    out = {}
    for key, t in traffic.items():
        wkey = "embedding/token" if key == "head/lm" and config.tie_embeddings else key
        share = weights.split.get(wkey, 0) / weights.numel[wkey] if weights.numel.get(wkey) else 1.0
        out[key] = t.divided(divisor, round(t.weight_bytes * share))
    return out


def matmul_flops(config: ModelConfig, w: Workload, causal: bool) -> dict[str, int]:
    estimate = forward_flops(config, w)
    chosen = (
        estimate.causal_breakdown if causal and estimate.causal_breakdown is not None else estimate.breakdown
    )
    return chosen.as_dict()


def _at_kv_len(config: ModelConfig, w: Workload, n: int) -> Workload:
    if config.architecture == "encoder-decoder":
        return replace(w, tgt_len=n, gen_tokens=0)
    return replace(w, seq_len=n, gen_tokens=0)


def decode_step_flops(config: ModelConfig, w: Workload, kv_len: int) -> dict[str, int]:
    """Matmul FLOPs of the decode step at KV length ``kv_len``: causal forward(n) − forward(n − 1) by key."""
    now = matmul_flops(config, _at_kv_len(config, w, kv_len), True)
    before = matmul_flops(config, _at_kv_len(config, w, kv_len - 1), True)
    return {k: v - before.get(k, 0) for k, v in now.items() if v - before.get(k, 0)}


def prompt_len(config: ModelConfig, w: Workload) -> int:
    """Tokens in the decoder's cache after prefill (the target prompt of an encoder-decoder)."""
    if config.architecture == "encoder-decoder":
        return w.tgt_len if w.tgt_len is not None else w.seq_len
    return w.seq_len
