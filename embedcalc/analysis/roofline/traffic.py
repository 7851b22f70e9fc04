"""Bytes moved by each component of a forward (prefill) or a decode step: the traffic side of the roofline.

The conventions are stated once, in :mod:`embedcalc.analysis.roofline`; this module implements them on the public
counts (:func:`~embedcalc.analysis.params.param_tensors` for weights, :func:`~embedcalc.analysis.flops.forward_flops`
for FLOPs by the same keys).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from embedcalc.analysis.flops import forward_flops
from embedcalc.analysis.memory import stored_bytes
from embedcalc.analysis.mixers import decode_step_terms, ssm_state_bytes
from embedcalc.analysis.params import param_tensors
from embedcalc.analysis.roofline.lengths import Lengths, at_kv_len, cache_bytes, prompt_len
from embedcalc.analysis.structure import Dims, cross_attention, stacks
from embedcalc.analysis.workload import Workload, logit_rows
from embedcalc.config.layer_plan import Attention
from embedcalc.config.resolved import ResolvedShape

_CORE = ("scores", "context")
_STATEFUL = ("/mixer/ssm", "/mixer/conv")  # the recurrent mixers' parts that read and write a state
_LOOKUPS = ("embedding/token", "embedding/decoder_token", "embedding/position", "embedding/type")


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
    """Parameters by breakdown key: element count, split element count, matrix shape (out, in), for the routed
    experts' key of each stack the (num_experts, top_k) of its MoE layers (from the layer model), and the bytes
    the key's tensors are stored in (the memory model's :func:`stored_bytes`: fp8, quantization scales)."""

    numel: dict[str, int]
    split: dict[str, int]
    shape: dict[str, tuple[int, int]]
    experts: dict[str, tuple[int, int]] = field(default_factory=dict)
    stored: dict[str, int] = field(default_factory=dict)

    def bytes_read(self, key: str, numel: int) -> int:
        """Bytes of ``numel`` of the elements of ``key``: its stored bytes pro rata (all of them: exact)."""
        total = self.numel.get(key, 0)
        if not total:
            return 0
        return self.stored[key] if numel == total else -(-self.stored[key] * numel // total)


def weights_of(config: ResolvedShape, w: Workload) -> Weights:
    numel: dict[str, int] = {}
    split: dict[str, int] = {}
    shape: dict[str, tuple[int, int]] = {}
    stored: dict[str, int] = {}
    for t in param_tensors(config):
        numel[t.key] = numel.get(t.key, 0) + t.numel
        stored[t.key] = stored.get(t.key, 0) + int(
            stored_bytes(t.key, t.shape, t.copies, w, config.quantized)
        )
        if getattr(t, "split", "none") != "none":
            split[t.key] = split.get(t.key, 0) + t.numel
        if len(t.shape) == 2 and t.key not in shape:
            shape[t.key] = (t.shape[0], t.shape[1])
    experts = {}
    for stack in stacks(config):
        moe = [b.ffn for b in config.stack_plan(stack.name).blocks if b.ffn is not None and b.ffn.moe]
        if moe:
            experts[f"{stack.name}/moe/experts"] = (moe[0].num_experts, moe[0].top_k)
    return Weights(numel, split, shape, experts, stored)


def experts_reached(num_experts: int, top_k: int, tokens: int) -> float:
    """Expected distinct experts a layer's ``tokens`` tokens route to, each choosing ``top_k`` of ``num_experts``
    uniformly (balanced routing, what the load-balancing losses of GShard, Lepikhin et al. 2021 §2.2, and
    DeepSeek-V3 §2.1.2 aim at): E (1 − (1 − k/E)^T), the occupancy of T draws of k distinct bins; exactly k for one
    token."""
    if tokens <= 1:
        return float(min(top_k, num_experts))
    # E (1 - (1 - k/E)^T) written as -E expm1(T log1p(-k/E)): with E above ~2^53 / k, 1 - k/E rounds to 1.0 and the
    # plain form gives 0 experts (a ZeroDivisionError downstream, issue 33); this form keeps ~k T for small k T / E.
    # Never fewer than the k experts one token reaches, never more than E.
    fraction = min(top_k / num_experts, 1.0)
    reached = num_experts if fraction >= 1.0 else -num_experts * math.expm1(tokens * math.log1p(-fraction))
    return float(min(max(reached, min(top_k, num_experts)), num_experts))


def _attention_layers(config: ResolvedShape, stack: str, cross: bool) -> list[tuple[Attention, int]]:
    """(attention, layers) of ``stack`` from the layer model: each block's own heads, widths and MLA shape; the
    cross-attention of an encoder-decoder's decoder layers."""
    plan = config.stack_plan(stack).counts()
    if cross:
        return [(cross_attention(config), sum(n for _, n in plan))]
    return [(block.attention, n) for block, n in plan if block.attention is not None]


def _core_traffic(key: str, config: ResolvedShape, w: Workload, lengths: Lengths, decode: bool,
                  kv_bytes: int | Fraction) -> Traffic:  # fmt: skip
    """Bytes of one attention core (Q·Kᵀ or A·V) of one stack, summed over its layers (module docstring): Q and K
    (scores) or the probabilities' V and the output (context), in each layer's own widths (MLA: the decompressed
    per-head K and V the cores multiply)."""
    stack, kind, core = key.split("/")[-3:]
    cross = kind == "cross_attention"
    if decode and not cross and lengths.self_cache_bytes is not None:
        return Traffic(kv_read_bytes=lengths.self_cache_bytes // 2)  # K (scores) or V (context), exact halves
    b, e = w.batch_size, w.activation_bytes
    m = lengths.self_m.get(stack, 0)
    n = lengths.cross_n if cross else lengths.self_n.get(stack, 0)
    activation = keys = 0
    for a, layers in _attention_layers(config, stack, cross):
        k_width = a.q_dim if a.latent else a.kv_dim  # MLA: every head's own decompressed K
        v_width = a.value_dim if a.latent else a.v_kv_dim
        out = a.q_dim if core == "scores" else a.value_dim  # Q read, or the context written
        n_a = a.context if a.external else n  # cross-attention over an external sequence reads its tokens
        keys += b * n_a * (k_width if core == "scores" else v_width) * layers
        activation += b * m * out * layers * e
        if w.attention == "eager":  # scores written / probabilities read (a sparse core's selected keys only)
            keys_seen = min(n_a, a.index_topk) if a.kind == "sparse" else n_a
            activation += b * a.num_heads * m * keys_seen * layers * e
    if decode:  # one query per sequence: its vectors stay on chip; the cache is what is read
        return Traffic(kv_read_bytes=int(keys * kv_bytes))
    return Traffic(activation_bytes=activation + keys * e)


def _index_traffic(key: str, config: ResolvedShape, w: Workload, lengths: Lengths, decode: bool) -> Traffic:
    """The sparse layers' index scores (all their layers): a decode step reads every cached indexer key; a prefill
    reads the indexer's queries, weights and keys and writes the m x n index scores the top-k selection reads."""
    if decode:
        return Traffic(kv_read_bytes=lengths.index_cache_bytes)
    stack = key.split("/")[0]
    b, e = w.batch_size, w.activation_bytes
    m, n = lengths.self_m.get(stack, 0), lengths.self_n.get(stack, 0)
    moved = 0
    for a, layers in _attention_layers(config, stack, False):
        if a.indexer:
            moved += (
                layers * b * (m * (a.index_heads * (a.index_head_dim + 1) + n) + n * a.index_head_dim) * e
            )
    return Traffic(activation_bytes=moved)


def phase_traffic(config: ResolvedShape, w: Workload, flops: Mapping[str, int], lengths: Lengths, decode: bool,
                   kv_bytes: int | Fraction, weights: Weights) -> dict[str, Traffic]:  # fmt: skip
    """Per component, the whole model's traffic for one phase (before the TP split)."""
    out: dict[str, Traffic] = {}
    e, b = w.activation_bytes, w.batch_size
    tied = config.resolved_lm_head and config.tie_embeddings
    caches = w.mode == "inference" and config.architecture != "encoder"
    for key, f in flops.items():
        if f <= 0:
            continue
        if key.rsplit("/", 1)[-1] in _CORE:
            out[key] = Traffic(flops=f) + _core_traffic(key, config, w, lengths, decode, kv_bytes)
            continue
        if key.endswith("/index_scores"):
            out[key] = Traffic(flops=f) + _index_traffic(key, config, w, lengths, decode)
            continue
        if key.endswith(_STATEFUL):
            out[key] = _state_traffic(config, w, key, f, lengths, decode, kv_bytes, weights, caches)
            continue
        wkey = _head_table(config) if key == "head/lm" and tied else key
        out_f, in_f = weights.shape.get(wkey, (1, 1))
        tokens = f / (2 * out_f * in_f)  # token-layers through this matmul
        numel = weights.numel.get(wkey, 0)
        if decode and key.endswith("cross_attention/qkv"):  # K and V of the source are cached: Q only
            numel = numel * (out_f - 2 * config.resolved_kv_heads * config.resolved_head_dim) // out_f
        if key in weights.experts:  # the routed experts a layer's tokens reach, not all of them
            experts, top_k = weights.experts[key]
            per_layer = b * (1 if decode else lengths.self_m.get(key.split("/")[0], 1))
            numel = _experts_numel(numel, experts, top_k, per_layer)
        moved = 0 if decode else round(tokens * (in_f + out_f)) * e  # decode: b x width vectors, on chip
        out[key] = Traffic(flops=f, weight_bytes=weights.bytes_read(wkey, numel), activation_bytes=moved)
    if caches and not decode:  # decode: the new token's K and V, 1/n of the cache read, are not counted
        _add_kv_writes(config, w, kv_bytes, out)
    for key, numel in weights.numel.items():
        if key in out:
            continue
        if decode and key.startswith("encoder/"):
            continue  # the encoder does not run while decoding
        if key in _LOOKUPS:
            width = weights.shape.get(key, (1, numel))[1]
            rows = b * lengths.lookups if key.endswith("token") else lengths.lookups
            read = min(numel, rows * width)
            looked_up = 0 if decode else b * lengths.lookups * width * e
            out[key] = Traffic(weight_bytes=weights.bytes_read(key, read), activation_bytes=looked_up)
        elif key not in flops:
            out[key] = Traffic(weight_bytes=weights.bytes_read(key, numel))
    return out


def _state_traffic(config: ResolvedShape, w: Workload, key: str, f: int, lengths: Lengths, decode: bool,
                   kv_bytes: int | Fraction, weights: Weights, caches: bool) -> Traffic:  # fmt: skip
    """A recurrent mixer's scan or convolution, all its layers (analysis/mixers.py): a decode step reads and writes
    the state (the SSM state, or the convolution's window); a prefill reads the inputs and writes the outputs, and
    writes the final state once."""
    stack, _, part = key.split("/")
    mixers = [(b.mixer, n) for b, n in config.stack_plan(stack).counts() if b.mixer is not None]
    b, e = w.batch_size, w.activation_bytes
    state = int(
        b
        * sum(
            n
            * (
                m.ssm_state_values * ssm_state_bytes(m, kv_bytes)
                if part == "ssm"
                else m.conv_state_values * kv_bytes
            )
            for m, n in mixers
        )
    )
    weight = weights.bytes_read(key, weights.numel.get(key, 0))
    if decode:
        return Traffic(flops=f, weight_bytes=weight, kv_read_bytes=state, kv_write_bytes=state)
    # ssm: reads its inputs and writes its output; conv: reads and writes conv_dim channels
    io = sum(n * (m.scan_io_values if part == "ssm" else 2 * m.conv_dim) for m, n in mixers)
    tokens = b * lengths.self_m.get(stack, 0)
    return Traffic(flops=f, weight_bytes=weight, activation_bytes=tokens * io * e,
                   kv_write_bytes=state if caches else 0)  # fmt: skip


def _experts_numel(numel: int, experts: int, top_k: int, tokens: int) -> int:
    """Elements of a stack's routed experts read by a step whose layers each see ``tokens`` tokens."""
    if tokens <= 1:
        return numel * min(top_k, experts) // experts
    return round(numel * experts_reached(experts, top_k, tokens) / experts)


def _add_kv_writes(
    config: ResolvedShape, w: Workload, kv_bytes: int | Fraction, out: dict[str, Traffic]
) -> None:
    """Prefill: the prompt's K and V written to the cache (the memory model's KV cache at the prompt length, per
    layer windows and MLA's compressed latent), on the projection that makes them (qkv, or MLA's kv_a); an
    encoder-decoder's cross-attention K and V of the source on its cross qkv, once."""
    self_bytes, cross_bytes = cache_bytes(config, w, prompt_len(config, w), kv_bytes)
    maker = next((k for k in ("decoder/attention/qkv", "decoder/attention/kv_a") if k in out), None)
    if maker is not None:
        out[maker] += Traffic(kv_write_bytes=self_bytes)
    if cross_bytes and "decoder/cross_attention/qkv" in out:
        out["decoder/cross_attention/qkv"] += Traffic(kv_write_bytes=cross_bytes)


def _head_table(config: ResolvedShape) -> str:
    """The table a tied LM head reads: the decoder's own (T5Gemma's decoder_token_table), else the shared one."""
    return "embedding/decoder_token" if config.decoder_token_table else "embedding/token"


def per_device(config: ResolvedShape, w: Workload, traffic: dict[str, Traffic], weights: Weights,
                divisor: int) -> dict[str, Traffic]:  # fmt: skip
    """Per device: split by ``divisor`` (tp, or tp × pp), weights of replicated tensors whole."""
    if divisor == 1:
        return traffic
    out = {}
    for key, t in traffic.items():
        wkey = _head_table(config) if key == "head/lm" and config.tie_embeddings else key
        share = weights.split.get(wkey, 0) / weights.numel[wkey] if weights.numel.get(wkey) else 1.0
        out[key] = t.divided(divisor, round(t.weight_bytes * share))
    return out


def matmul_flops(config: ResolvedShape, w: Workload, causal: bool) -> dict[str, int]:
    estimate = forward_flops(config, w)
    chosen = (
        estimate.causal_breakdown if causal and estimate.causal_breakdown is not None else estimate.breakdown
    )
    return chosen.as_dict()


def prefill_flops(config: ResolvedShape, w: Workload, causal: bool) -> dict[str, int]:
    """Matmul FLOPs of an inference prefill: the forward's, with the LM head (every ``head/`` matmul) through the
    rows whose logits are computed (``logit_rows``: by default each sequence's last position, as vLLM's
    ``LogitsProcessor``, TensorRT-LLM without ``gather_context_logits`` and transformers' ``generate``
    (``logits_to_keep=1``) run it). An encoder's forward and a training step compute every position's."""
    flops = matmul_flops(config, w, causal)
    if w.mode != "inference" or config.architecture == "encoder":
        return flops
    positions = w.decoder_len
    kept = logit_rows(w.logits, w.batch_size, positions)
    return {
        k: v * kept // (w.batch_size * positions) if k.startswith("head/") else v for k, v in flops.items()
    }


def decode_step_flops(config: ResolvedShape, w: Workload, kv_len: int) -> dict[str, int]:
    """Matmul FLOPs of the decode step at KV length ``kv_len``: causal forward(n) − forward(n − 1) by key, latent
    attention's cores absorbed (:func:`_absorbed`); a recurrent mixer's, one step of its recurrence
    (analysis/mixers.py)."""
    now = matmul_flops(config, at_kv_len(config, w, kv_len), True)
    before = matmul_flops(config, at_kv_len(config, w, kv_len - 1), True)
    out = {k: v - before.get(k, 0) for k, v in now.items() if v - before.get(k, 0) and "/mixer/" not in k}
    return _absorbed(config, out) | decode_step_terms(config, Dims.of(config, w.batch_size, 1))


def _absorbed(config: ResolvedShape, step: dict[str, int]) -> dict[str, int]:
    """A decode step's latent-attention cores as engines and embedcalc's torch model run them: against the
    compressed cache, W_UK absorbed into the query and W_UV applied after the context (DeepSeek-V2 §2.1.2;
    FlashMLA, vLLM's and TensorRT-LLM's MLA decode kernels, ``modeling/latent_attention._absorbed``). Each head's
    score is then a dot product over the latent and the rope key (kv_lora_rank + qk_rope_head_dim wide, not
    qk_nope + qk_rope) and its context a sum of latents (kv_lora_rank wide, not v_head_dim): DeepSeek-V3's cores
    cost 3× and 4× the decompressed form's per cached position, while the cache is read once either way (the
    decompressed form would also expand every cached position through kv_b, which no engine does in decode). The
    new token's W_UK and W_UV products cost what its kv_b does (kv_lora_rank × heads × (qk_nope + v) MACs), so
    kv_b stays as counted. A stack whose latent layers differ in widths, or mix with other attention, keeps the
    decompressed count (no such model is known)."""
    out = dict(step)
    for stack in stacks(config):
        layers = [a for a, _ in _attention_layers(config, stack.name, False)]
        widths = {(a.kv_lora_rank, a.qk_nope_head_dim, a.qk_rope_head_dim, a.v_head_dim) for a in layers}
        if not layers or not all(a.latent for a in layers) or len(widths) != 1:
            continue
        rank, nope, rope, value = widths.pop()
        if rank is None or nope is None or rope is None or value is None:
            continue
        for core, latent, decompressed in (("scores", rank + rope, nope + rope), ("context", rank, value)):
            key = f"{stack.name}/attention/{core}"
            if key in out:  # exact: the count is a multiple of the decompressed width
                out[key] = out[key] * latent // decompressed
    return out
