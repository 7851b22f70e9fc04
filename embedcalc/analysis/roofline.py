"""Time on a device by the roofline model (Williams et al. 2009, "Roofline: an insightful visual performance model"):
per component, FLOPs and bytes moved, and time = max(FLOPs / (peak × e_c), bytes / (bandwidth × e_m)), summed.

Built only on the public counts: :func:`~embedcalc.analysis.params.param_tensors` (weights by breakdown key),
:func:`~embedcalc.analysis.flops.forward_flops` (matmul FLOPs by the same keys; attention cores end in ``/scores``
and ``/context``) and :func:`~embedcalc.analysis.memory.estimate_memory` (capacity). A weight of key K is read by
the matmul of key K (a tied LM head reads the token table). Conventions, stated because peers differ:

- **Bytes moved** per component, by kind: ``weight`` (every weight the component uses, read once per forward,
  whatever the batch; lookup tables read only the looked-up rows: batch × tokens rows of the token table, unless it
  is tied to the LM head, which reads all of it), ``activation`` (a matmul reads its input and writes its output:
  T × (in + out) elements, T = FLOPs / (2 in out); an attention core reads Q, K, V and writes its output, and with
  eager attention also writes the scores and reads the probabilities, b h m n each), ``kv_read`` (decode: K and V
  of every cached token, read by the cores) and ``kv_write`` (the new tokens' K and V written to the cache, counted
  on the QKV projection). A **decode step** moves the weights it reads and the KV cache it reads, nothing else: its
  activations are one token per sequence (b x width vectors, kilobytes, that stay in on-chip memory between
  kernels) and the new token's K and V are 1/n of the cache read, so decode time is (weight reads + KV reads) /
  bandwidth when memory-bound, the standard decode roofline. Element-wise work (norms, activations, softmax,
  residuals) is assumed fused: no traffic
  of its own. This, and efficiency 1 by default, make every time a **lower bound**.
- **Prefill** (time to first token) is one forward over the prompt (encoder-decoder: the source through the
  encoder and the target prompt through the decoder); with ``sdpa`` its attention FLOPs are the causal ones
  (flash kernels skip masked blocks), with ``eager`` the full n × n.
- **Decode** at KV length n is the marginal cost of the n-th token: causal forward FLOPs at length n minus those at
  n − 1, component by component. For self-attention that is 2·b·h·min(n, window)·head_dim per layer for each of
  Q·Kᵀ and A·V (one query against every cached key); for cross-attention 2·b·h·src_len·head_dim; every projection
  on one token per sequence; the encoder contributes nothing. With ``--gen-tokens G`` after a prompt of P tokens,
  the G decode steps run at KV lengths P+1 … P+G (the cache then holds P+G tokens, as the memory estimate counts);
  ``decode_s_per_token`` is the last step's, the mean is exact (each component's time is the max of two affine
  functions of n between the window's kink, summed in closed form).
- **Parallelism**: per device. Tensor parallelism divides FLOPs, KV traffic, activations and the weights of
  split tensors by ``tp`` (replicated tensors are read whole on every rank). Inference runs the pipeline stages one
  after another for a request, so prefill and decode latencies are the whole model's / tp; training assumes a full
  pipeline (many micro-batches, bubble not modelled): per-device work is the model's / (tp · pp).
- **Training step** = 3 × the forward's FLOPs and bytes per component (backward ≈ two forward-shaped passes,
  Kaplan et al. 2020 §2.1), plus an ``optimizer`` component that reads and writes weights, gradients and
  optimizer state once (bytes from the memory estimate, with ZeRO sharding).
- **Peaks**: the workload dtype's dense peak (float32 -> fp32, bfloat16 -> bf16, float16 and the weight-only
  int8/int4 -> fp16, multiplied after dequantisation).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from embedcalc.analysis.memory import MemoryEstimate, estimate_memory
from embedcalc.analysis.roofline_traffic import (
    Lengths,
    Traffic,
    Weights,
    decode_lengths,
    decode_step_flops,
    matmul_flops,
    per_device,
    phase_traffic,
    prefill_lengths,
    prompt_len,
    weights_of,
)  # fmt: skip
from embedcalc.analysis.workload import Workload
from embedcalc.config.hardware import Device, PeakDtype, peak_dtype
from embedcalc.config.schema import ModelConfig
from embedcalc.errors import UnsupportedEnvironmentError

Bound = Literal["compute", "memory"]
KV_DTYPE_BYTES: dict[str, int] = {"fp8": 1, "int8": 1, "bf16": 2, "fp16": 2, "fp32": 4}


@dataclass(frozen=True)
class Efficiency:
    """Fractions of the peak FLOP/s and of the memory bandwidth a run reaches (1: the roofline, a lower bound)."""

    compute: float = 1.0
    memory: float = 1.0
    source: str = "default 1: times are lower bounds"


@dataclass(frozen=True)
class ComponentTime:
    """One component's roofline: its traffic, arithmetic intensity, bound and time."""

    key: str
    traffic: Traffic
    compute_s: float
    memory_s: float

    @property
    def time_s(self) -> float:
        return max(self.compute_s, self.memory_s)

    @property
    def bound(self) -> Bound:
        return "compute" if self.compute_s > 0 and self.compute_s >= self.memory_s else "memory"

    @property
    def intensity(self) -> float | None:
        """FLOPs per byte moved (None when nothing is moved)."""
        return self.traffic.flops / self.traffic.bytes if self.traffic.bytes else None

    def as_json(self) -> dict[str, Any]:
        t = self.traffic
        return {
            "flops": t.flops, "bytes": t.bytes, "weight_bytes": t.weight_bytes,
            "activation_bytes": t.activation_bytes, "kv_read_bytes": t.kv_read_bytes,
            "kv_write_bytes": t.kv_write_bytes, "intensity": self.intensity, "bound": self.bound,
            "time_s": self.time_s,
        }  # fmt: skip


@dataclass(frozen=True)
class Phase:
    """One phase (prefill, decode, forward, training_step) component by component."""

    name: str
    components: tuple[ComponentTime, ...]

    @property
    def time_s(self) -> float:
        return sum(c.time_s for c in self.components)

    @property
    def flops(self) -> int:
        return sum(c.traffic.flops for c in self.components)

    @property
    def bytes(self) -> int:
        return sum(c.traffic.bytes for c in self.components)

    @property
    def bound(self) -> Bound:
        """The bound of the components that take most of the time."""
        compute = sum(c.time_s for c in self.components if c.bound == "compute")
        return "compute" if compute >= self.time_s - compute and compute > 0 else "memory"


@dataclass(frozen=True)
class Capacity:
    """The largest batch and context that fit ``limit_bytes`` (the device's memory or --max-memory)."""

    limit_bytes: int
    limit_source: str
    max_batch_size: int | None  # None: not even batch 1 fits
    max_context: int | None
    context_limited_by: Literal["memory", "max_seq_len"] | None


@dataclass(frozen=True)
class TrainingRun:
    """A whole training run at the roofline step time."""

    tokens: int
    devices: int
    tokens_per_step: int
    wall_s: float
    device_hours: float
    price_per_hour: float | None

    @property
    def cost(self) -> float | None:
        return None if self.price_per_hour is None else self.device_hours * self.price_per_hour


@dataclass(frozen=True)
class RooflineEstimate:
    """The time side of one result: phases by component, headline times, capacity and a training run."""

    hardware: str | None
    dtype: PeakDtype | None
    kv_dtype: str | None
    peak_flops_per_s: float | None
    bandwidth_bytes_per_s: float | None
    efficiency: Efficiency
    phases: dict[str, Phase] = field(default_factory=dict)
    decode_kv_len: int | None = None
    decode_steps: int = 0
    decode_total_s: float | None = None
    capacity: Capacity | None = None
    training: TrainingRun | None = None
    batch_size: int = 1

    def _phase_s(self, name: str) -> float | None:
        return self.phases[name].time_s if name in self.phases else None

    @property
    def decode_s_per_token(self) -> float | None:
        return self._phase_s("decode")

    @property
    def decode_s_per_token_mean(self) -> float | None:
        if self.decode_total_s is None:
            return self.decode_s_per_token
        return self.decode_total_s / self.decode_steps

    def as_json(self) -> dict[str, Any]:
        mean = self.decode_s_per_token_mean
        prefill = self._phase_s("prefill")
        total = None if prefill is None or self.decode_total_s is None else prefill + self.decode_total_s
        cap, run = self.capacity, self.training
        return {
            "hardware": self.hardware, "dtype": self.dtype, "kv_dtype": self.kv_dtype,
            "peak_flops_per_s": self.peak_flops_per_s, "memory_bandwidth_bytes_per_s": self.bandwidth_bytes_per_s,
            "efficiency": {"compute": self.efficiency.compute, "memory": self.efficiency.memory,
                           "source": self.efficiency.source},
            "lower_bound": self.efficiency.compute == 1 and self.efficiency.memory == 1,
            "forward_s": self._phase_s("forward") or prefill,
            "prefill_s": prefill,
            "decode_kv_len": self.decode_kv_len,
            "decode_s_per_token": self.decode_s_per_token,
            "decode_s_per_token_mean": mean,
            "decode_tokens_per_s": 1 / mean if mean else None,
            "batch_decode_tokens_per_s": self.batch_size / mean if mean else None,
            "total_generation_s": total,
            "step_s": self._phase_s("training_step"),
            "max_batch_size": cap.max_batch_size if cap else None,
            "max_context": cap.max_context if cap else None,
            "max_context_limited_by": cap.context_limited_by if cap else None,
            "memory_limit_bytes": cap.limit_bytes if cap else None,
            "memory_limit_source": cap.limit_source if cap else None,
            "train": None if run is None else {
                "tokens": run.tokens, "devices": run.devices, "tokens_per_step": run.tokens_per_step,
                "wall_s": run.wall_s, "device_hours": run.device_hours, "price_per_hour": run.price_per_hour,
                "cost": run.cost,
            },
            "bound": {name: p.bound for name, p in self.phases.items()},
            "breakdown": {name: {c.key: c.as_json() for c in p.components} for name, p in self.phases.items()},
        }  # fmt: skip


# --- time ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Roofline:
    """The device side: peak FLOP/s, bandwidth, efficiencies."""

    peak_flops_per_s: float
    bandwidth_bytes_per_s: float
    efficiency: Efficiency

    def component(self, key: str, t: Traffic) -> ComponentTime:
        compute = t.flops / (self.peak_flops_per_s * self.efficiency.compute)
        memory = t.bytes / (self.bandwidth_bytes_per_s * self.efficiency.memory)
        return ComponentTime(key, t, compute, memory)

    def phase(self, name: str, traffic: Mapping[str, Traffic]) -> Phase:
        return Phase(name, tuple(self.component(k, t) for k, t in traffic.items()))


def device_roofline(device: Device, dtype: str, efficiency: Efficiency) -> Roofline:
    """The peak for the workload ``dtype`` on ``device``; exit 4 when the device has no such rate."""
    peak = device.peak(peak_dtype(dtype))
    if peak is None:
        have = ", ".join(device.peak_flops_per_s)
        raise UnsupportedEnvironmentError(
            f"--hardware {device.name}: no {peak_dtype(dtype)} peak in the catalogue (it lists {have}); "
            f"choose a --dtype it runs", code="no_peak_for_dtype",
        )  # fmt: skip
    return Roofline(peak, device.bandwidth, efficiency)


# --- the estimate -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TimeRequest:
    """What the user asked of the time model (the CLI's --hardware, --efficiency, --kv-dtype, --train-* flags)."""

    device: Device | None = None
    efficiency: Efficiency = field(default_factory=Efficiency)
    kv_dtype: str | None = None  # None: the activation dtype
    train_tokens: int | None = None
    devices: int | None = None
    price_per_hour: float | None = None
    memory_limit_bytes: int | None = None  # --max-memory (the device's memory otherwise)


def kv_element_bytes(w: Workload, kv_dtype: str | None) -> int:
    return w.activation_bytes if kv_dtype is None else KV_DTYPE_BYTES[kv_dtype]


def _traffic(config: ModelConfig, w: Workload, flops: Mapping[str, int], lengths: Lengths, decode: bool,
             kv_bytes: int, weights: Weights, divisor: int) -> dict[str, Traffic]:  # fmt: skip
    raw = phase_traffic(config, w, flops, lengths, decode, kv_bytes, weights)
    return per_device(config, w, raw, weights, divisor)


def _decode_total(roof: Roofline, step: Any, first: int, last: int, kinks: list[int]) -> float:
    """Σ over KV lengths first..last of the decode step time, exact for per-component times that are the max of
    two affine functions of the length between kinks (every layer's window or chunk caps its cache there)."""
    segments, lo = [], first
    for kink in sorted(k for k in set(kinks) if first <= k < last):
        segments.append((lo, kink))
        lo = kink + 1
    segments.append((lo, last))
    total = 0.0
    for lo, hi in segments:
        a, z = step(lo), step(hi)
        for key, ca in a.items():
            cz = z.get(key, ca)
            total += _sum_max_affine(hi - lo, (ca.compute_s, cz.compute_s), (ca.memory_s, cz.memory_s))
    return total


def _sum_max_affine(span: int, f: tuple[float, float], g: tuple[float, float]) -> float:
    """Σ_{x=0..span} max(f(x), g(x)) for f, g affine with the given values at x = 0 and x = span."""

    def line_sum(v: tuple[float, float], lo: int, hi: int) -> float:  # Σ_{x=lo..hi} of the line through v
        if hi < lo:
            return 0.0
        at = (lambda x: v[0]) if span == 0 else (lambda x: v[0] + (v[1] - v[0]) * x / span)
        return (hi - lo + 1) * (at(lo) + at(hi)) / 2

    d0, d1 = f[0] - g[0], f[1] - g[1]
    if d0 >= 0 and d1 >= 0:
        return line_sum(f, 0, span)
    if d0 <= 0 and d1 <= 0:
        return line_sum(g, 0, span)
    cross = math.floor(span * d0 / (d0 - d1))  # last integer x on the side of x = 0
    first, second = (f, g) if d0 > 0 else (g, f)
    return line_sum(first, 0, cross) + line_sum(second, cross + 1, span)


def estimate_time(
    config: ModelConfig, w: Workload, request: TimeRequest, optimizer_bytes: int = 0
) -> RooflineEstimate:
    """The roofline times of ``config`` on ``w`` for ``request.device`` (module docstring); ``optimizer_bytes`` is
    the per-device weights + gradients + optimizer state a training step reads and writes once."""
    device = request.device
    if device is None:
        return RooflineEstimate(
            None, None, request.kv_dtype, None, None, request.efficiency, batch_size=w.batch_size
        )
    roof = device_roofline(device, w.dtype, request.efficiency)
    weights = weights_of(config)
    kv_bytes = kv_element_bytes(w, request.kv_dtype)
    par = w.parallel
    causal = w.attention == "sdpa"
    phases: dict[str, Phase] = {}
    base = RooflineEstimate(device.name, peak_dtype(w.dtype), request.kv_dtype, roof.peak_flops_per_s,
                            roof.bandwidth_bytes_per_s, request.efficiency, batch_size=w.batch_size)  # fmt: skip
    prefill = _traffic(config, w, matmul_flops(config, w, causal), prefill_lengths(config, w), False, kv_bytes,
                       weights, par.tp if w.mode == "inference" else par.tp * par.pp)  # fmt: skip
    if w.mode == "training":
        step = {k: t.scaled(3) for k, t in prefill.items()}
        step["optimizer"] = Traffic(weight_bytes=2 * optimizer_bytes)
        phases["training_step"] = roof.phase("training_step", step)
        return replace(
            base, phases=phases, training=_training_run(config, w, request, phases["training_step"])
        )
    if config.architecture == "encoder":
        phases["forward"] = roof.phase("forward", prefill)
        return replace(base, phases=phases)
    phases["prefill"] = roof.phase("prefill", prefill)
    prompt = prompt_len(config, w)
    steps = max(w.gen_tokens, 1)

    def step_at(n: int) -> dict[str, ComponentTime]:
        traffic = _traffic(config, w, decode_step_flops(config, w, n), decode_lengths(config, w, n, kv_bytes),
                           True, kv_bytes, weights, par.tp)  # fmt: skip
        return {c.key: c for c in roof.phase("decode", traffic).components}

    last = step_at(prompt + steps)
    phases["decode"] = Phase("decode", tuple(last.values()))
    total = None
    if w.gen_tokens:
        caps = [b.attention.cache_limit for b in config.named_blocks.values()]
        kinks = [c for c in caps if c is not None]
        total = _decode_total(roof, step_at, prompt + 1, prompt + w.gen_tokens, kinks)
    return replace(
        base, phases=phases, decode_kv_len=prompt + steps, decode_steps=steps, decode_total_s=total
    )


def _training_run(config: ModelConfig, w: Workload, request: TimeRequest, step: Phase) -> TrainingRun | None:
    """Wall time, device-hours and cost of ``request.train_tokens`` tokens on ``request.devices`` devices."""
    if request.train_tokens is None:
        return None
    par = w.parallel
    devices = request.devices or par.devices
    replicas = max(1, devices // (par.tp * par.pp))
    # a full pipeline finishes one micro-batch per replica per step time
    tokens_per_step = w.batch_size * _tokens_per_sequence(config, w) * replicas
    wall = request.train_tokens / tokens_per_step * step.time_s
    return TrainingRun(request.train_tokens, devices, tokens_per_step, wall, wall * devices / 3600,
                       request.price_per_hour)  # fmt: skip


def _tokens_per_sequence(config: ModelConfig, w: Workload) -> int:
    """Training tokens in one sequence: seq_len, plus the target's tgt_len for an encoder-decoder."""
    return w.seq_len + (prompt_len(config, w) if config.architecture == "encoder-decoder" else 0)


# --- capacity and the KV cache dtype ------------------------------------------------------------------------------


def kv_adjusted_total(memory: MemoryEstimate, w: Workload, kv_dtype: str | None) -> int:
    """Per-device bytes with the KV cache held in ``kv_dtype`` (exact: the estimate's KV bytes are elements × the
    activation bytes)."""
    kv = memory.kv_cache_bytes * kv_element_bytes(w, kv_dtype) // w.activation_bytes
    return memory.total_bytes - memory.kv_cache_bytes + kv


def with_kv_dtype(memory: MemoryEstimate, w: Workload, kv_dtype: str | None) -> MemoryEstimate:
    """The memory estimate with its KV cache (and each stage's) held in ``kv_dtype``."""
    if kv_dtype is None:
        return memory
    scale, per = kv_element_bytes(w, kv_dtype), w.activation_bytes
    stages = [replace(s, kv_cache_bytes=s.kv_cache_bytes * scale // per) for s in memory.stages]
    return replace(memory, kv_cache_bytes=memory.kv_cache_bytes * scale // per, stages=stages)


_MAX_BATCH = 1 << 40


def _largest(fits: Any, lo: int, hi: int) -> int:
    """The largest value in [lo, hi] with fits(value), given fits(lo) and a monotone fits."""
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def capacity(
    config: ModelConfig, w: Workload, limit_bytes: int, source: str, kv_dtype: str | None
) -> Capacity:
    """The largest batch (at this context) and the largest context (at this batch) within ``limit_bytes`` per
    device; the context is prompt + generated tokens, at most max_seq_len."""

    def fits(trial: Workload) -> bool:
        return kv_adjusted_total(estimate_memory(config, trial), trial, kv_dtype) <= limit_bytes

    batch: int | None = None
    if fits(replace(w, batch_size=1)):
        hi = 1
        while hi < _MAX_BATCH and fits(replace(w, batch_size=2 * hi)):
            hi *= 2
        batch = _largest(lambda b: fits(replace(w, batch_size=b)), hi, min(2 * hi, _MAX_BATCH))
    extra = w.gen_tokens if config.architecture == "decoder" else 0
    cap = config.max_seq_len - extra
    context: int | None = None
    limited: Literal["memory", "max_seq_len"] | None = None
    if cap >= 1 and fits(replace(w, seq_len=1)):
        if fits(replace(w, seq_len=cap)):
            context, limited = cap + extra, "max_seq_len"
        else:
            context = _largest(lambda n: fits(replace(w, seq_len=n)), 1, cap) + extra
            limited = "memory"
    return Capacity(limit_bytes, source, batch, context, limited)
