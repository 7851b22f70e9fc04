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
  (flash kernels skip masked blocks), with ``eager`` the full n × n. Its LM head runs on the positions whose
  logits are computed (the workload's ``logits``: each prompt's last by default, as servers sample from).
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
- **Peaks**: the workload dtype's dense peak (fp32, bf16, fp16; the weight-only int8/int4 -> fp16, multiplied
  after dequantisation); under fp8 the linear layers' GEMMs run at the FP8 peak and the other matmuls (attention's
  score and context, the LM head, the MoE router) at bf16's (:mod:`embedcalc.config.dtypes`); a device without
  FP8 refuses fp8 (exit 3). Weight bytes are those the weights are stored in (fp8 1 byte, int8/int4 packed with
  their fp16 scales and zeros per group: :func:`embedcalc.analysis.memory.inference.stored_bytes`).

This module owns the conventions and the result types (:class:`RooflineEstimate` and its parts); the times are
computed in :mod:`embedcalc.analysis.time.estimate`, the bytes moved in :mod:`embedcalc.analysis.roofline.traffic`,
the capacity search and the KV cache dtype in :mod:`embedcalc.analysis.memory.capacity_search`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from embedcalc.analysis.memory.capacity_search import Capacity
from embedcalc.analysis.roofline.traffic import Traffic
from embedcalc.devices.catalogue import PeakDtype

Bound = Literal["compute", "memory"]


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

    def to_json(self) -> dict[str, Any]:
        t = self.traffic
        return {
            "flops": t.flops, "bytes": t.bytes, "weight_bytes": t.weight_bytes,
            "activation_bytes": t.activation_bytes, "kv_read_bytes": t.kv_read_bytes,
            "kv_write_bytes": t.kv_write_bytes, "intensity": self.intensity, "bound": self.bound,
            "time_s": self.time_s,
        }  # fmt: skip


@dataclass(frozen=True)
class Phase:
    """One phase (prefill, decode, forward, training_step) component by component, plus the expected-time model's
    terms that belong to no component (kernel overhead, element-wise traffic, communication, pipeline bubble), by
    name, in seconds (none in the lower bound)."""

    name: str
    components: tuple[ComponentTime, ...]
    extra: tuple[tuple[str, float], ...] = ()

    @property
    def components_s(self) -> float:
        return sum(c.time_s for c in self.components)

    @property
    def time_s(self) -> float:
        return self.components_s + sum(v for _, v in self.extra)

    def terms(self) -> dict[str, float]:
        """The phase's time as terms: its components at the achieved fractions, then each extra term."""
        return {"kernels at the achieved fractions of peak": self.components_s, **dict(self.extra)}

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
        return "compute" if compute >= self.components_s - compute and compute > 0 else "memory"


@dataclass(frozen=True)
class Schedule:
    """A training step's schedule: micro-batches per replica per optimizer step (the accumulation steps), the
    sequences per step over all replicas, and the pipeline bubble's share of the step's pipeline time."""

    accumulation_steps: int
    global_batch: int
    bubble_fraction: float

    def to_json(self) -> dict[str, Any]:
        return {"accumulation_steps": self.accumulation_steps, "global_batch": self.global_batch,
                "bubble_fraction": self.bubble_fraction}  # fmt: skip


@dataclass(frozen=True)
class TimeModel:
    """What produced the expected times: the calibration (its name, the published runs it was fitted on, its
    error on the runs it was not) or the --efficiency that replaced its achieved fractions."""

    name: str
    fitted_on: tuple[str, ...]
    held_out: tuple[str, ...]
    held_out_median_error: float
    held_out_max_ratio: float
    override: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"calibration": self.name, "fitted_on": list(self.fitted_on), "held_out": list(self.held_out),
                "held_out_median_error": self.held_out_median_error, "held_out_max_ratio": self.held_out_max_ratio,
                "efficiency_override": self.override}  # fmt: skip


@dataclass(frozen=True)
class TrainingRun:
    """A whole training run at the step time."""

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
    schedule: Schedule | None = None
    model: TimeModel | None = None  # None: this is the roofline at peak (the lower bound)
    lower_bound: RooflineEstimate | None = None

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

    @property
    def prefill_s(self) -> float | None:
        return self._phase_s("prefill")

    @property
    def forward_s(self) -> float | None:
        """The forward pass, or the prefill where the workload generates."""
        return self._phase_s("forward") or self.prefill_s

    @property
    def step_s(self) -> float | None:
        return self._phase_s("training_step")

    @property
    def decode_tokens_per_s(self) -> float | None:
        mean = self.decode_s_per_token_mean
        return 1 / mean if mean else None

    @property
    def batch_decode_tokens_per_s(self) -> float | None:
        mean = self.decode_s_per_token_mean
        return self.batch_size / mean if mean else None

    @property
    def total_generation_s(self) -> float | None:
        prefill = self.prefill_s
        return None if prefill is None or self.decode_total_s is None else prefill + self.decode_total_s

    @property
    def bounds(self) -> dict[str, Bound]:
        """Each phase's bound (compute or memory), by phase name."""
        return {name: p.bound for name, p in self.phases.items()}

    def terms(self) -> dict[str, dict[str, float]]:
        """Each phase's expected-time terms, for the phases that have terms beyond their components."""
        return {name: p.terms() for name, p in self.phases.items() if p.extra}

    def times_json(self) -> dict[str, Any]:
        """The headline time keys (the ones ``lower_bound`` repeats at peak)."""
        run = self.training
        return {
            "forward_s": self.forward_s,
            "prefill_s": self.prefill_s,
            "decode_s_per_token": self.decode_s_per_token,
            "decode_s_per_token_mean": self.decode_s_per_token_mean,
            "decode_tokens_per_s": self.decode_tokens_per_s,
            "batch_decode_tokens_per_s": self.batch_decode_tokens_per_s,
            "total_generation_s": self.total_generation_s,
            "step_s": self.step_s,
            "train": None if run is None else {
                "tokens": run.tokens, "devices": run.devices, "tokens_per_step": run.tokens_per_step,
                "wall_s": run.wall_s, "device_hours": run.device_hours, "price_per_hour": run.price_per_hour,
                "cost": run.cost,
            },
        }  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        times = self.times_json()
        cap = self.capacity
        bound = self.lower_bound
        return {
            "hardware": self.hardware, "dtype": self.dtype, "kv_dtype": self.kv_dtype,
            "peak_flops_per_s": self.peak_flops_per_s, "memory_bandwidth_bytes_per_s": self.bandwidth_bytes_per_s,
            "efficiency": {"compute": self.efficiency.compute, "memory": self.efficiency.memory,
                           "source": self.efficiency.source},
            "model": None if self.model is None else self.model.to_json(),
            "lower_bound": None if bound is None else bound.times_json(),
            **{k: v for k, v in times.items() if k != "train"},
            "decode_kv_len": self.decode_kv_len,
            "max_batch_size": cap.max_batch_size if cap else None,
            "max_context": cap.max_context if cap else None,
            "max_context_limited_by": cap.context_limited_by if cap else None,
            "memory_limit_bytes": cap.limit_bytes if cap else None,
            "memory_limit_source": cap.limit_source if cap else None,
            "train": times["train"],
            "schedule": None if self.schedule is None else self.schedule.to_json(),
            "terms": self.terms(),
            "bound": self.bounds,
            "breakdown": {name: {c.key: c.to_json() for c in p.components} for name, p in self.phases.items()},
        }  # fmt: skip
