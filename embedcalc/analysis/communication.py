"""Communication volume per device for one training step or one inference forward, by collective (DESIGN.md §11).

Conventions, stated because peers differ:

- **Ring algorithms** (Patarasuk & Yuan 2009; NCCL's defaults for large messages): for a payload of P bytes over a
  group of N devices, an all-reduce sends 2 (N − 1) / N x P bytes per device, a reduce-scatter or an all-gather
  (N − 1) / N x P (P the full, unsharded size), an all-to-all (N − 1) / N x P, and a point-to-point send P.
  ``payload_bytes`` is P summed over the calls of an entry; ``wire_bytes`` what one device sends for them.
- **DP** (PyTorch DDP, Li et al. 2020): gradients are all-reduced in buckets, the first of 1 MiB and the rest of
  25 MiB (DDP's ``bucket_cap_mb`` default), so the call count is 1 + ceil((G − 1 MiB) / 25 MiB) for G gradient
  bytes on the device. Gradients travel in the gradient dtype (4 bytes in float32, 2 in mixed precision).
- **ZeRO** (Rajbhandari et al. 2020, §7): stages 1 and 2 reduce-scatter the gradients and all-gather the updated
  weights (in the weight dtype) once per step; stage 3 (FSDP) all-gathers the weights in the forward and again in
  the backward and reduce-scatters the gradients: 1.5x the DP volume, as the paper states. Inference with ZeRO-3
  all-gathers the weights once.
- **TP** (Megatron-LM, Shoeybi et al. 2019 §3; Korthikanti et al. 2022 §4.2.2 for sequence parallelism): each
  attention and FFN sublayer (and cross-attention) all-reduces its b x n x d output in the forward and the
  gradient of its input in the backward; with ``--sequence-parallel`` each all-reduce becomes an all-gather plus a
  reduce-scatter of the same tensor (the same bytes on the wire). The vocab-parallel token embedding all-reduces
  its output in the forward; the vocab-parallel LM head all-reduces its input gradient in the backward, and the
  parallel cross-entropy all-reduces three fp32 values per token (max, sum of exponentials, target logit).
- **PP** (Narayanan et al. 2021): each stage boundary sends the b x n x d activations forward and their gradient
  backward once per micro-batch; a 1F1B schedule needs at least pp micro-batches, which is what is counted. A
  device of a middle stage sends one tensor per direction per micro-batch.
- **EP** (expert parallelism; Lepikhin et al. 2021, GShard): every MoE layer dispatches its tokens' top_k copies to
  the experts' devices and combines them back, an all-to-all of t x top_k x d each way, forward and backward.

With ``--ep`` the experts' gradients are in fact reduced over the dp / ep ranks that hold the same experts; they
are counted here in the one dp all-reduce (an upper bound). The numbers are for the busiest device: the pipeline stage with the most layers and parameters.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal

from embedcalc.analysis.parallel import stage_layout, stage_params
from embedcalc.analysis.structure import stacks
from embedcalc.analysis.workload import Workload
from embedcalc.config.schema import ModelConfig

Kind = Literal["all-reduce", "reduce-scatter", "all-gather", "all-to-all", "send"]
Group = Literal["dp", "tp", "pp", "ep"]

MIB = 2**20
DDP_FIRST_BUCKET_BYTES = 1 * MIB
DDP_BUCKET_BYTES = 25 * MIB
FP32_BYTES = 4


@dataclass(frozen=True)
class Collective:
    """``count`` calls of one collective over a group moving ``payload_bytes`` in all (the full tensors, summed)."""

    kind: Kind
    group: Group
    group_size: int
    purpose: str
    count: int
    payload_bytes: int

    @property
    def wire_bytes(self) -> int:
        """Bytes one device sends for all ``count`` calls, by the ring volumes of the module docstring."""
        n, p = self.group_size, self.payload_bytes
        if self.kind == "all-reduce":
            return -(-2 * (n - 1) * p // n)
        if self.kind == "send":
            return p
        return -(-(n - 1) * p // n)

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind, "group": self.group, "group_size": self.group_size, "purpose": self.purpose,
            "count": self.count, "payload_bytes": self.payload_bytes, "wire_bytes": self.wire_bytes,
        }  # fmt: skip


@dataclass(frozen=True)
class CommunicationEstimate:
    """Every collective one device takes part in, for one step (training) or one forward (inference)."""

    collectives: list[Collective] = field(default_factory=list)

    @property
    def wire_bytes(self) -> int:
        return sum(c.wire_bytes for c in self.collectives)

    def by_group(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for c in self.collectives:
            out[c.group] = out.get(c.group, 0) + c.wire_bytes
        return out

    def time_s(self, bandwidth_bytes_per_s: float) -> float:
        """Seconds on a link of ``bandwidth_bytes_per_s`` per direction, nothing overlapped with compute."""
        return self.wire_bytes / bandwidth_bytes_per_s

    def as_json(self) -> dict[str, Any]:
        return {
            "wire_bytes": self.wire_bytes,
            "by_group": self.by_group(),
            "collectives": [c.as_dict() for c in self.collectives],
        }


def ddp_buckets(gradient_bytes: int) -> int:
    """All-reduce calls DDP makes for ``gradient_bytes`` of gradients (module docstring)."""
    if gradient_bytes <= 0:
        return 0
    rest = max(gradient_bytes - DDP_FIRST_BUCKET_BYTES, 0)
    return 1 + -(-rest // DDP_BUCKET_BYTES)


def _stack_lengths(config: ModelConfig, workload: Workload) -> dict[str, int]:
    """Tokens per sequence of each stack (an encoder-decoder's decoder runs tgt_len, default seq_len)."""
    tgt = workload.tgt_len if workload.tgt_len is not None else workload.seq_len
    return {s.name: (tgt if s.name == "decoder" and config.architecture == "encoder-decoder" else workload.seq_len)
            for s in stacks(config)}  # fmt: skip


def _tp(config: ModelConfig, workload: Workload, sequence_parallel: bool) -> list[Collective]:
    par, e, b = workload.parallel, workload.activation_bytes, workload.batch_size
    if par.tp == 1:
        return []
    training = workload.mode == "training"
    lengths = _stack_lengths(config, workload)
    busiest = max(stage_layout(config, par.pp), key=lambda s: s.num_layers)
    out: list[Collective] = []
    for stack in stacks(config):
        layers = busiest.layers.get(stack.name, 0)
        if not layers:
            continue
        sublayers = 3 if stack.cross_attention else 2
        payload = b * lengths[stack.name] * config.embed_dim * e
        calls = layers * sublayers * (2 if training else 1)
        if sequence_parallel:
            out.append(
                Collective(
                    "all-gather", "tp", par.tp, f"{stack.name} sublayer inputs", calls, calls * payload
                )
            )
            out.append(Collective("reduce-scatter", "tp", par.tp, f"{stack.name} sublayer outputs", calls,
                                  calls * payload))  # fmt: skip
        else:
            what = "outputs (forward) and input gradients (backward)" if training else "outputs"
            out.append(Collective("all-reduce", "tp", par.tp, f"{stack.name} sublayer {what}", calls,
                                  calls * payload))  # fmt: skip
    first, last = stacks(config)[0], stacks(config)[-1]
    if busiest.first:
        payload = b * lengths[first.name] * config.embed_dim * e
        out.append(Collective("all-reduce", "tp", par.tp, "vocab-parallel embedding output", 1, payload))
    if busiest.last and config.resolved_lm_head and training:
        tokens = b * lengths[last.name]
        out.append(
            Collective("all-reduce", "tp", par.tp, "LM head input gradient", 1, tokens * config.embed_dim * e)
        )
        out.append(
            Collective("all-reduce", "tp", par.tp, "parallel cross-entropy", 3, 3 * tokens * FP32_BYTES)
        )
    return out


def _dp(config: ModelConfig, workload: Workload) -> list[Collective]:
    par = workload.parallel
    if par.dp == 1:
        return []
    params = max(stage_params(config, par))
    mixed = workload.dtype != "float32"
    grads, weights = params * (2 if mixed else 4), params * (2 if mixed else 4)
    if workload.mode != "training":
        return [Collective("all-gather", "dp", par.dp, "ZeRO-3 weights", 1, weights)] if par.zero == 3 else []
    if par.zero == 0:
        return [Collective("all-reduce", "dp", par.dp, "DDP gradient buckets", ddp_buckets(grads), grads)]
    gathers = 2 if par.zero == 3 else 1
    what = "weights (forward and backward)" if par.zero == 3 else "updated weights"
    return [
        Collective("reduce-scatter", "dp", par.dp, "gradients", 1, grads),
        Collective("all-gather", "dp", par.dp, what, gathers, gathers * weights),
    ]


def _pp(config: ModelConfig, workload: Workload) -> list[Collective]:
    par = workload.parallel
    if par.pp == 1:
        return []
    lengths = _stack_lengths(config, workload)
    n = max(lengths.values())
    payload = workload.batch_size * n * config.embed_dim * workload.activation_bytes
    directions = 2 if workload.mode == "training" else 1
    return [Collective("send", "pp", par.pp, "stage boundary activations" + (" and gradients" if directions == 2
                                                                             else ""),
                       par.pp * directions, par.pp * directions * payload)]  # fmt: skip


def _ep(config: ModelConfig, workload: Workload) -> list[Collective]:
    ep = getattr(workload.parallel, "ep", 1)
    if ep == 1:
        return []
    lengths = _stack_lengths(config, workload)
    busiest = max(stage_layout(config, workload.parallel.pp), key=lambda s: s.num_layers)
    out: list[Collective] = []
    offset = 0
    for stack in stacks(config):
        plan = config.stack_plan(stack.name)
        start = max(busiest.start - offset, 0)
        stop = min(busiest.stop - offset, plan.num_layers)
        offset += plan.num_layers
        if start >= stop:
            continue
        for block, count in plan.counts(start, stop):
            if not block.ffn.moe:
                continue
            tokens = workload.batch_size * lengths[stack.name]
            payload = tokens * block.ffn.top_k * config.embed_dim * workload.activation_bytes
            calls = count * 2 * (2 if workload.mode == "training" else 1)
            out.append(Collective("all-to-all", "ep", ep, f"{stack.name} MoE dispatch and combine", calls,
                                  calls * payload))  # fmt: skip
    return out


def communication(
    config: ModelConfig, workload: Workload, sequence_parallel: bool = False
) -> CommunicationEstimate:
    """The collectives of one device for ``workload`` under its parallel settings (module docstring)."""
    return CommunicationEstimate(
        [*_dp(config, workload), *_tp(config, workload, sequence_parallel), *_pp(config, workload),
         *_ep(config, workload)]
    )  # fmt: skip


def without_parallelism(workload: Workload) -> Workload:
    """The same workload on one device (what a scaling efficiency is measured against)."""
    return replace(workload, parallel=type(workload.parallel)())
