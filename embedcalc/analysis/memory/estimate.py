"""Memory estimates (bytes) per device, by component: the result types, the sweep grid's columns and the
per-pipeline-stage assembly with ZeRO sharding.

Inference = weights + KV cache + peak activations of one forward pass (:mod:`embedcalc.analysis.memory.inference`).
Training  = weights + gradients + optimizer state + activations saved for the backward pass
(:mod:`embedcalc.analysis.memory.training`).
Weights include the model's persistent buffers (MiniMax's lightning decay tables; :mod:`embedcalc.analysis.buffers`),
reported again beside them as ``buffers_bytes`` (a part of ``weights_bytes``, not added twice).
All of it per device: with ``--tp/--pp/--dp/--zero`` (see ``analysis/parallel.py``) the numbers are those of the
heaviest pipeline stage's device; every stage is listed beside it. ZeRO (Rajbhandari et al. 2020) shards the dense
state over the dp ranks and the expert state over the dp / ep ranks that hold the same experts: stage 1 the
optimizer state, 2 also the gradients, 3 also the weights. With context parallelism (``--cp``) every rank holds all
its stage's weights and the activations of its seq_len / cp tokens (fused attention saves only linear terms, so they
are exactly those of a seq_len / cp workload); ZeRO shards over dp × cp ranks, as Megatron's distributed optimizer
does over its data-parallel-with-context-parallel group.

With pipeline parallelism and the 1F1B schedule, stage i holds the training activations of pp - i
micro-batches in flight (Narayanan et al. 2021), so the first stage holds as many layers' worth as the whole
model would for one micro-batch. The interleaved schedule (``--pp-virtual v``) holds 1 + (pp - 1) / (pp · v) times
as much (Korthikanti et al. 2022, §4.2.3: the first stage's activations over p micro-batches, rounded down to
whole bytes), the same factor on every stage.

Every term takes a :class:`~embedcalc.analysis.structure.Dims`, so the sweep grid evaluates these same functions on
numpy arrays (one device, no parallelism); :func:`memory_terms` gives the grid its columns.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from math import prod
from typing import Any

from embedcalc.analysis.breakdown import Breakdown
from embedcalc.analysis.buffers import buffer_bytes
from embedcalc.analysis.memory.inference import (
    kv_cache_terms,
    peak_candidates,
    peak_inference_activations,
    weight_bytes,
)
from embedcalc.analysis.memory.training import (
    mixed_precision,
    optimizer_state_bytes,
    recompute_working_set,
    saved_activations,
    saved_terms,
    training_param_bytes,
)
from embedcalc.analysis.mixers import state_terms
from embedcalc.analysis.parallel import Stage, sharded_shape, stage_dims, stage_layout, stage_tensors
from embedcalc.analysis.params import model_tensors
from embedcalc.analysis.structure import Dims, Num, maximum
from embedcalc.analysis.workload import INFERENCE_ONLY_DTYPES, Parallelism, Workload, context_local
from embedcalc.config.resolved import ResolvedShape

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
    recurrent_state_bytes: (
        int  # the recurrent mixers' state (Mamba-2): constant in the context, beside the KV cache
    )
    buffers_bytes: int  # the persistent buffers, a part of weights_bytes (analysis/buffers.py)

    @property
    def total_bytes(self) -> int:
        return (self.model_state_bytes + self.buffers_bytes + self.activations_bytes + self.kv_cache_bytes
                + self.recurrent_state_bytes)  # fmt: skip

    @property
    def model_state_bytes(self) -> int:
        """Weights + gradients + optimizer state: the "model states" of ZeRO (Rajbhandari et al. 2020, §3), which a
        training step reads and writes once; the buffers (a part of ``weights_bytes``) are not among them."""
        return self.weights_bytes - self.buffers_bytes + self.gradients_bytes + self.optimizer_bytes

    def _kinds(self) -> dict[str, int]:
        """The DESIGN.md §5 keys, and the recurrent state and the buffers (a part of the weights) where the model has
        them (keys added, none renamed)."""
        out = {k: getattr(self, k) for k in MEMORY_KEYS}
        if self.recurrent_state_bytes:
            out["recurrent_state_bytes"] = self.recurrent_state_bytes
        if self.buffers_bytes:
            out["buffers_bytes"] = self.buffers_bytes
        return out


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
    recurrent_state_bytes: int = 0
    buffers_bytes: int = 0

    def as_dict(self) -> dict[str, int]:
        return {"stage": self.index, "num_layers": self.num_layers, "params": self.params, **self._kinds()}


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
    recurrent_state_bytes: int = 0
    buffers_bytes: int = 0

    def as_dict(self) -> dict[str, int]:
        return self._kinds()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {**self.as_dict(), "activations_breakdown": self.activations.as_dict()}
        if len(self.stages) > 1:
            out["stages"] = [s.as_dict() for s in self.stages]
        return out


# --- the whole model on one device (the sweep grid's columns) -------------------------------------------------------


def memory_terms(config: ResolvedShape, workload: Workload, x: Dims, params: Num) -> dict[str, Num]:
    """Inference and training memory of one device without parallelism at sizes ``x`` (ints or arrays)."""
    buffers = buffer_bytes(config, x, workload.activation_bytes)
    tensors = ((t.key, t.shape, t.copies) for t in model_tensors(config, x))
    weights = weight_bytes(tensors, workload, config.quantized) + buffers
    candidates = list(peak_candidates(config, workload, x).values())
    activations = functools.reduce(maximum, candidates) if candidates else 0
    kv_cache = kv_cache_terms(config, workload, x)
    state = state_terms(config, x, workload.activation_bytes)
    out: dict[str, Num] = {
        "inference_weights_bytes": weights,
        "inference_activations_bytes": activations,
        "kv_cache_bytes": kv_cache,
        "inference_total_bytes": weights + activations + kv_cache + state,
    }
    if config.has_recurrent_state:
        out["recurrent_state_bytes"] = state
    if workload.dtype in INFERENCE_ONLY_DTYPES:
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
        saved = saved + recompute_working_set(working)[1]
    per_param = training_param_bytes(workload.dtype)
    buffers = buffer_bytes(config, x, per_param)
    return out | {
        "training_weights_bytes": params * per_param + buffers,
        "gradients_bytes": params * per_param,
        "optimizer_bytes": optimizer,
        "training_activations_bytes": saved,
        "training_total_bytes": params * (2 * per_param) + buffers + optimizer + saved,
    }


# --- per device, per pipeline stage -----------------------------------------------------------------------------------


def held_activations(one_schedule: int, par: Parallelism) -> int:
    """Activation bytes a stage holds under the interleaved schedule, given what plain 1F1B holds (module docstring):
    × (1 + (p − 1) / (p · v)), exact in integers; unchanged at v = 1."""
    p, v = par.pp, par.pp_virtual
    return one_schedule * (p * v + p - 1) // (p * v) if v > 1 else one_schedule


def _stage_memory(
    config: ResolvedShape, workload: Workload, stage: Stage, tensors: list[tuple[Any, int]]
) -> StageMemory:
    par = workload.parallel
    shapes = [(sharded_shape(t, par, config), n, t.expert) for t, n in tensors]
    params = sum(prod(shape) * n for shape, n, _ in shapes)
    x = stage_dims(config, stage, Dims.of(config, workload.batch_size, workload.seq_len, workload.tgt_len))
    if workload.mode == "inference":
        activations = peak_inference_activations(config, workload, stage)
        stored = weight_bytes(((t.key, shape, n) for (t, _), (shape, n, _) in zip(tensors, shapes, strict=True)),
                              workload, config.quantized)  # fmt: skip
        buffers = int(buffer_bytes(config, x, workload.activation_bytes))
        return StageMemory(
            stage.index, stage.num_layers, params, int(stored) + buffers, 0, 0,
            activations.total, int(kv_cache_terms(config, workload, x, par.tp)),
            int(state_terms(config, x, workload.activation_bytes)), buffers,
        )  # fmt: skip
    mixed = mixed_precision(workload.dtype)
    in_flight = par.pp - stage.index  # 1F1B: micro-batches whose activations stage i holds
    per_param = training_param_bytes(workload.dtype)
    zero, dp = par.zero, par.gradient_ranks

    def sharded(total_dense: int, total_expert: int, level: int) -> int:
        """ZeRO: dense state over the dp × cp ranks, expert state over the dp × cp / ep ranks that hold the same
        experts."""
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
    buffers = int(buffer_bytes(config, x, per_param))  # never sharded by ZeRO (analysis/buffers.py)
    return StageMemory(
        stage.index, stage.num_layers, params,
        weights_bytes=sharded(dense_params * per_param, expert_params * per_param, 3) + buffers,
        gradients_bytes=sharded(dense_params * per_param, expert_params * per_param, 2),
        optimizer_bytes=sharded(optimizer[0], optimizer[1], 1),
        activations_bytes=held_activations(
            in_flight * saved_activations(config, context_local(workload), stage).total, par
        ),
        kv_cache_bytes=0,
        buffers_bytes=buffers,
    )  # fmt: skip


def estimate_memory(config: ResolvedShape, workload: Workload) -> MemoryEstimate:
    """Per-device memory of ``workload``: the heaviest pipeline stage, with every stage listed."""
    if workload.mode == "training" and workload.dtype in INFERENCE_ONLY_DTYPES:
        raise ValueError(
            f"{workload.dtype} is an inference-only format here; train in fp32, bf16, fp16 or fp8"
        )
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
        for key, value in saved_activations(config, context_local(workload), stage).items():
            activations.add(key, held_activations(in_flight * value, workload.parallel))
    return MemoryEstimate(
        weights_bytes=heaviest.weights_bytes,
        gradients_bytes=heaviest.gradients_bytes,
        optimizer_bytes=heaviest.optimizer_bytes,
        activations_bytes=heaviest.activations_bytes,
        kv_cache_bytes=heaviest.kv_cache_bytes,
        activations=activations,
        stages=stages,
        recurrent_state_bytes=heaviest.recurrent_state_bytes,
        buffers_bytes=heaviest.buffers_bytes,
    )
