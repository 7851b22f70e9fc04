"""Communication volume per device for one training step or one inference forward, by collective (DESIGN.md §11).

Conventions, stated because peers differ:

- **Ring algorithms** (Patarasuk & Yuan 2009; NCCL's defaults for large messages): for a payload of P bytes over a
  group of N devices, an all-reduce sends 2 (N − 1) / N x P bytes per device, a reduce-scatter or an all-gather
  (N − 1) / N x P (P the full, unsharded size), an all-to-all (N − 1) / N x P, and a point-to-point send P.
  ``payload_bytes`` is P summed over the calls of an entry; ``wire_bytes`` what one device sends for them.
- **DP** (PyTorch DDP, Li et al. 2020): gradients are all-reduced in buckets filled with whole tensors in the
  order the gradients become ready, the first up to 1 MiB and the rest up to 25 MiB (DDP's ``bucket_cap_mb``
  default), a tensor larger than that being a bucket of its own
  (:func:`~embedcalc.analysis.comm.gradient_buckets.ddp_buckets`). Gradients travel in the gradient dtype (4 bytes in
  float32, 2 in mixed precision).
- **ZeRO** (Rajbhandari et al. 2020, §7): stages 1 and 2 reduce-scatter the gradients and all-gather the updated
  weights (in the weight dtype) once per step. Stage 3 is counted as FSDP2 runs it (``fully_shard`` on every block,
  on each stack's relative-position table and on the root): each unit all-gathers its weights in the forward,
  every unit but the root again in the backward (the root stays gathered), and each unit reduce-scatters its
  gradients; a unit's payload is its tensors padded along the
  first dimension to a multiple of dp. About 1.5x the DP volume, as the paper states. Inference with ZeRO-3
  all-gathers the weights once.
- **TP** (Megatron-LM, Shoeybi et al. 2019 §3), in the torch layout DTensor shards (separate q, k, v and gate, up
  modules, transformers' layout): every row-parallel projection (attention output, FFN output, cross-attention
  output) all-reduces its b x n x d output in the forward, and every column-parallel projection all-reduces the
  gradient of its input in the backward (q, k, v: three; latent attention's q_b and kv_b: their latent widths;
  gate and up: two; Megatron's fused QKV would do one; a layer whose values are its keys has q and k, one that
  reuses an earlier layer's keys and values q alone). The vocab-parallel lookup of each stack all-reduces its
  output; the vocab-parallel LM head all-reduces its input gradient, and the parallel cross-entropy three fp32
  values per token (max, sum of exponentials, target logit) in the forward. With ``sequence_parallel`` the same
  tensors move as all-gather plus reduce-scatter (the same bytes on the wire; Korthikanti et al. 2022 §4.2.2).
- **PP** (Narayanan et al. 2021): each stage boundary sends the b x n x d activations forward and their gradient
  backward once per micro-batch; a 1F1B schedule needs at least pp micro-batches, which is what is counted. A
  device of a middle stage sends one tensor per direction per micro-batch.
- **EP** (expert parallelism; Lepikhin et al. 2021, GShard): every MoE layer dispatches its tokens' top_k copies to
  the experts' devices and combines them back, an all-to-all of t x top_k x d each way, forward and backward.

- **CP** (context parallelism, Megatron-core with TransformerEngine's ``AttnFuncWithCPAndKVP2P``): each rank holds
  seq_len / cp tokens of every sequence; in every attention layer the key/value chunks travel round the ring of cp
  ranks point to point, cp − 1 sends of the rank's own chunk (b × seq_len / cp tokens × its K and V widths: the KV
  heads its TP rank holds) in the forward, and in the backward the chunks again and their gradients (2 (cp − 1)
  sends). Every other volume is that of the rank's seq_len / cp tokens, and the gradients are reduced over dp × cp
  ranks (the CP ranks hold the same weights).

With ``--ep`` the experts' gradients are in fact reduced over the dp / ep ranks that hold the same experts; they
are counted here in the one dp all-reduce (an upper bound). The numbers are for the busiest device: the pipeline
stage with the most layers and parameters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from embedcalc.analysis.memory import mixed_precision
from embedcalc.analysis.parallel import stage_layout, stage_params
from embedcalc.analysis.structure import projected_kv, stacks
from embedcalc.analysis.workload import Workload, context_local
from embedcalc.config.resolved import ResolvedShape

Kind = Literal["all-reduce", "reduce-scatter", "all-gather", "all-to-all", "send"]
Group = Literal["dp", "tp", "pp", "ep", "cp"]

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
    phase: Literal["forward", "backward", "step"] = "step"

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
            "phase": self.phase,
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

    def to_json(self) -> dict[str, Any]:
        return {
            "wire_bytes": self.wire_bytes,
            "by_group": self.by_group(),
            "collectives": [c.as_dict() for c in self.collectives],
        }


def _stack_lengths(config: ResolvedShape, workload: Workload) -> dict[str, int]:
    """Tokens per sequence of each stack (an encoder-decoder's decoder runs tgt_len, default seq_len)."""
    tgt = workload.tgt_len if workload.tgt_len is not None else workload.seq_len
    return {s.name: (tgt if s.name == "decoder" and config.architecture == "encoder-decoder" else workload.seq_len)
            for s in stacks(config)}  # fmt: skip


def _projection_inputs(block: Any, d: int, cross: bool) -> tuple[int, list[int]]:
    """(row-parallel projections, input widths of the column-parallel projections) of one layer of ``block``.

    The torch layout (transformers'): q, k and v are separate column-parallel modules, as are gate and up, so each
    all-reduces its input gradient on its own; latent attention's q_b and kv_b read the replicated low-rank latents
    (widths q_lora_rank and kv_lora_rank); gated attention's output gate is a fourth. MoE experts are sharded inside
    their stacked tensors and add no collective of their own here; a shared-expert FFN is a dense FFN.
    Cross-attention over an external sequence (Llama-3.2-Vision) all-reduces only its q input's gradient: its k
    and v read the external states, which the text model takes as an input (no gradient into a vision tower).
    """
    attention, ffn = block.attention, block.ffn
    if attention is None:  # a recurrent mixer is replicated (analysis/mixers.py): no collective; or no mixer
        columns, rows = [], 0
    elif attention.latent:
        columns, rows = [attention.q_lora_rank or d, attention.kv_lora_rank], 1
    elif attention.external:  # k and v read the external states, an input of the model: no gradient to reduce
        columns, rows = [d], 1
    else:  # q, the k and v it projects itself (none when shared, k alone when the values are the keys), gate
        gates = int(attention.output_gate) + int(attention.head_gate)
        columns, rows = [d] * (1 + projected_kv(attention) + gates), 1
    if cross:
        rows, columns = rows + 1, [*columns, d, d, d]
    if ffn is not None and (not ffn.moe or ffn.shared_dim):
        rows, columns = rows + 1, [*columns, *([d, d] if ffn.gated else [d])]
    return rows, columns


def _tp(config: ResolvedShape, workload: Workload, sequence_parallel: bool) -> list[Collective]:
    par, e, b = workload.parallel, workload.activation_bytes, workload.batch_size
    if par.tp == 1:
        return []
    training = workload.mode == "training"
    lengths = _stack_lengths(config, workload)
    busiest = max(stage_layout(config, par.pp), key=lambda s: s.num_layers)
    d, d_tok = config.embed_dim, config.resolved_token_embed_dim
    out: list[Collective] = []
    forward_calls = forward_bytes = backward_calls = backward_bytes = 0
    gathers = gather_bytes = (
        0  # full-width q/k norms: q and k all-gathered around each (forward; backward alike)
    )
    for stack in stacks(config):
        tokens = b * lengths[stack.name]
        for block, count in busiest.blocks.get(stack.name, []):
            rows, columns = _projection_inputs(block, d, stack.cross_attention)
            forward_calls += count * rows
            forward_bytes += count * rows * tokens * d * e
            backward_calls += count * len(columns)
            backward_bytes += count * tokens * sum(columns) * e  # cross k/v read the memory: same length here
            attention = block.attention
            # a full-width q/k norm: the block's own q and k widths (no k of its own when KV-sharing)
            if attention is not None and attention.qk_norm == "full":
                widths = [attention.q_dim] + ([] if attention.kv_shared else [attention.kv_dim])
                gathers += len(widths) * count
                gather_bytes += count * tokens * sum(widths) * e
    if busiest.first:
        for stack in stacks(config):  # the vocab-parallel lookup of every stack's tokens
            forward_calls += 1
            forward_bytes += b * lengths[stack.name] * d_tok * e
    kind = "all-gather + reduce-scatter" if sequence_parallel else "all-reduce"
    if forward_calls:
        out.append(Collective("all-reduce", "tp", par.tp, "row-parallel outputs and vocab-parallel lookups "
                              "(forward)" + (f", as {kind}" if sequence_parallel else ""), forward_calls,
                              forward_bytes, "forward"))  # fmt: skip
    if gathers:
        out.append(Collective("all-gather", "tp", par.tp, "q and k around full-width q/k norms (forward)", gathers,
                              gather_bytes, "forward"))  # fmt: skip
        if training:
            out.append(Collective("all-gather", "tp", par.tp, "their gradients (backward)", gathers, gather_bytes,
                                  "backward"))  # fmt: skip
    last = stacks(config)[-1]
    if busiest.last and config.resolved_lm_head:
        tokens = b * lengths[last.name]
        out.append(Collective("all-reduce", "tp", par.tp, "parallel cross-entropy (max, sum of exponentials, "
                              "target logit)", 3, 3 * tokens * FP32_BYTES, "forward"))  # fmt: skip
        if training:
            backward_calls += 1
            backward_bytes += tokens * d_tok * e
    if training and backward_calls:
        out.append(Collective("all-reduce", "tp", par.tp, "column-parallel input gradients (backward)",
                              backward_calls, backward_bytes, "backward"))  # fmt: skip
    return out


def _dp(config: ResolvedShape, workload: Workload) -> list[Collective]:
    par = workload.parallel
    n = par.gradient_ranks  # dp × cp: the ranks holding the same weights
    if n == 1:
        return []
    from embedcalc.analysis.comm.gradient_buckets import (
        ddp_bucket_count,
        fsdp_unit_runs,
        gradient_tensor_runs,
    )

    params = max(stage_params(config, par))
    mixed = mixed_precision(workload.dtype)
    grads, weights = params * (2 if mixed else 4), params * (2 if mixed else 4)
    if workload.mode != "training":
        return [Collective("all-gather", "dp", n, "ZeRO-3 weights", 1, weights)] if par.zero == 3 else []
    if par.zero == 0:
        calls = ddp_bucket_count(gradient_tensor_runs(config, par, 2 if mixed else 4))
        return [Collective("all-reduce", "dp", n, "DDP gradient buckets", calls, grads, "backward")]
    if par.zero == 3:  # FSDP2: per unit, gathered in the forward and again in the backward (not the root)
        units = fsdp_unit_runs(config, par.tp, n, 2 if mixed else 4)
        forward, count = sum(size * n for _, size, n in units), sum(n for _, _, n in units)
        backward = forward - units[-1][1]
        return [
            Collective("all-gather", "dp", n, "FSDP2 units' weights", count, forward, "forward"),
            Collective("all-gather", "dp", n, "FSDP2 blocks' weights", count - 1, backward, "backward"),
            Collective("reduce-scatter", "dp", n, "FSDP2 units' gradients", count, forward, "backward"),
        ]
    return [
        Collective("reduce-scatter", "dp", n, "gradients", 1, grads),
        Collective("all-gather", "dp", n, "updated weights", 1, weights),
    ]


def _pp(config: ResolvedShape, workload: Workload) -> list[Collective]:
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


def _ep(config: ResolvedShape, workload: Workload) -> list[Collective]:
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
            if block.ffn is None or not block.ffn.moe:
                continue
            tokens = workload.batch_size * lengths[stack.name]
            payload = tokens * block.ffn.top_k * config.embed_dim * workload.activation_bytes
            calls = count * 2 * (2 if workload.mode == "training" else 1)
            out.append(Collective("all-to-all", "ep", ep, f"{stack.name} MoE dispatch and combine", calls,
                                  calls * payload))  # fmt: skip
    return out


def _cp(config: ResolvedShape, workload: Workload) -> list[Collective]:
    """The ring exchange of one rank's key/value chunk in every attention layer of the busiest stage (``workload``
    is the rank's own: seq_len / cp tokens)."""
    par = workload.parallel
    if par.cp == 1 or config.architecture != "decoder":
        return []
    busiest = max(stage_layout(config, par.pp), key=lambda s: s.num_layers)
    e, tokens = workload.activation_bytes, workload.batch_size * workload.seq_len
    forward = payload = 0
    for block, count in busiest.blocks.get("decoder", []):
        a = block.attention
        if a is None:
            continue
        heads = max(1, a.num_kv_heads // par.tp)  # the KV heads one TP rank holds (replicated below tp)
        forward += count * (par.cp - 1)
        payload += count * (par.cp - 1) * tokens * heads * (a.head_dim + (a.v_head_dim or a.head_dim)) * e
    if not forward:
        return []
    out = [Collective("send", "cp", par.cp, "key/value chunks round the ring (forward)", forward, payload,
                      "forward")]  # fmt: skip
    if workload.mode == "training":
        out.append(Collective("send", "cp", par.cp, "key/value chunks and their gradients (backward)", 2 * forward,
                              2 * payload, "backward"))  # fmt: skip
    return out


def communication(
    config: ResolvedShape, workload: Workload, sequence_parallel: bool = False
) -> CommunicationEstimate:
    """The collectives of one device for ``workload`` under its parallel settings (module docstring); with context
    parallelism, those of one rank's seq_len / cp tokens."""
    local = context_local(workload)
    return CommunicationEstimate(
        [*_dp(config, local), *_tp(config, local, sequence_parallel), *_pp(config, local), *_ep(config, local),
         *_cp(config, local)]
    )  # fmt: skip
