"""The sharded torch model in one process: :func:`shard_on_fake_group` applies the plans of
:mod:`embedcalc.modeling.sharding` (tensor parallelism, FSDP2 units) for tp x dp ranks on torch's fake process group
and records what torch did: every parameter's local numel on every rank, from its DTensor placements, and the
collectives of one training step with their payloads (a recording ``CommDebugMode``).

Everything runs on the meta device (nothing allocated, a 70B model in seconds), except an FSDP2 forward, which
torch only runs on materialised parameters: with ZeRO-3 the sharded model is given real CPU storage (uninitialised,
the fake group's collectives move nothing) when its local shards are small enough.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from embedcalc.config.resolved import ResolvedShape
from embedcalc.modeling.sharding import apply_fsdp, apply_tensor_parallel, sharding_config

FSDP_MATERIALISE_LIMIT = 2**31  # bytes of local shards an FSDP2 forward may allocate on the CPU


@dataclass(frozen=True)
class RecordedCollective:
    """One collective torch issued: its op, pass, and the bytes of its input tensor."""

    op: str
    backward: bool
    payload_bytes: int


@dataclass(frozen=True)
class ShardedRun:
    """What sharding the model did on every rank: local numel per parameter name and the collectives of one
    forward and backward (None with the reason when torch cannot run that forward)."""

    tp: int
    dp: int
    zero3: bool
    # parameter name -> numel on each rank (rank = dp_index * tp + tp_index)
    local_numel: dict[str, list[int]]
    collectives: list[RecordedCollective] | None
    skipped: str | None = None
    notes: list[str] = field(default_factory=list)


def _rank_local_numel(param: Any, mesh_shape: tuple[int, ...]) -> list[int]:
    """Numel of ``param`` on every rank of the mesh, from its DTensor placements (torch's own shard-size rule)."""
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.placement_types import Shard

    ranks = 1
    for size in mesh_shape:
        ranks *= size
    if not isinstance(param, DTensor):
        return [int(param.numel())] * ranks
    out = []
    for rank in range(ranks):
        coordinate, rest = [], rank
        for size in reversed(mesh_shape):
            coordinate.append(rest % size)
            rest //= size
        coordinate.reverse()
        shape = list(param.shape)
        # the parameter's mesh is (dp, tp), or one of its 1-D slices: map each of its dimensions to the full mesh
        # by name (a 1-D dp mesh is the first dimension of (dp, tp), a 1-D tp mesh the last)
        names = (
            param.device_mesh.mesh_dim_names or ("dp", "tp")[len(mesh_shape) - param.device_mesh.mesh.dim() :]
        )
        where = [("dp", "tp").index(name) for name in names]
        # plain shards first, then strided ones: FSDP2 over a TP-sharded tensor (_StridedShard on dp) chunks the
        # TP-local piece, so the tp split applies before the dp split
        order = sorted(
            enumerate(param.placements), key=lambda item: type(item[1]).__name__ == "_StridedShard"
        )
        for mesh_dim, placement in order:
            dim = getattr(placement, "dim", None)
            if isinstance(dim, int) and (
                isinstance(placement, Shard) or type(placement).__name__ == "_StridedShard"
            ):
                shape[dim] = Shard(dim)._local_shard_size_and_offset(
                    shape[dim], param.device_mesh.size(mesh_dim), coordinate[where[mesh_dim]]
                )[0]
        numel = 1
        for s in shape:
            numel *= s
        out.append(numel)
    return out


class _BytesCommMode:
    """CommDebugMode that also keeps every collective's input size, and whether it ran in the backward pass."""

    def __init__(self) -> None:
        from torch.distributed.tensor.debug import CommDebugMode

        outer = self

        class Recording(CommDebugMode):
            def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
                before = sum(self.comm_counts.values())
                out = super().__torch_dispatch__(func, types, args, kwargs)  # type: ignore[no-untyped-call]
                if out is not NotImplemented and sum(self.comm_counts.values()) > before:
                    tensors = [a[0] if isinstance(a, list | tuple) and a else a for a in args[:2]]
                    name = str(getattr(func, "_overloadpacket", func)).split(".")[-1]
                    # the full tensor: an all-gather's output, a reduce-scatter's input
                    size = max(
                        (int(t.numel()) * t.element_size() for t in tensors if isinstance(t, torch.Tensor)),
                        default=0,
                    )
                    # functional: (shard, ranks)
                    if name == "all_gather_into_tensor" and isinstance(args[1], int):
                        size *= args[1]
                    outer.records.append(
                        RecordedCollective(name, bool(self.advanced_module_tracker.is_bw), size)
                    )
                return out

        self.records: list[RecordedCollective] = []
        self.mode = Recording()  # type: ignore[no-untyped-call]


def _unsupported_forward(model: nn.Module, config: ResolvedShape) -> str | None:
    """Why a DTensor forward of ``model`` is not run (layer kinds whose tensors the plan does not shard), or None."""
    if config.disentangled is not None:
        return "disentangled attention projects one position table in every layer, and the plan does not split it"
    if config.position == "alibi" or config.resolved_relative_bias:
        kind = "alibi" if config.position == "alibi" else "relative"
        return (f"{kind} position biases are made for all heads at once, and the plan does not split them by "
                "head")  # fmt: skip
    names = [name for name, _ in model.named_parameters()]
    if any(".moe.experts." in n or n.endswith("moe.experts.gate_up") or ".moe." in n for n in names):
        return (
            "mixture-of-experts layers (their routed forward indexes the stacked expert tensors, which the plan "
            "shards as plain DTensors without a parallel style that could run them)"
        )
    if any(n.endswith("sinks.logits") for n in names):
        return (
            "attention sinks (the per-head sink logits are sharded as a plain DTensor the core cannot mix in)"
        )
    return None


def shard_on_fake_group(
    config: ResolvedShape, tp: int, dp: int = 1, zero3: bool = False, attention: str = "eager",
    batch_size: int = 1, seq_len: int = 16, plan_override: dict[str, Any] | None = None,
) -> ShardedRun:  # fmt: skip
    """Shard ``config``'s model for tp x dp ranks on torch's fake process group and record what torch did."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from embedcalc.modeling.model import build_model

    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", rank=0, world_size=tp * dp, store=FakeStore())
    try:
        mesh = init_device_mesh("cpu", (dp, tp), mesh_dim_names=("dp", "tp"))
        sharded = sharding_config(config, tp)
        model = build_model(sharded, attention="eager" if attention == "eager" else "sdpa")
        if tp > 1:
            apply_tensor_parallel(model, mesh["tp"], plan_override)
        notes = []
        skipped = _unsupported_forward(model, sharded) if tp > 1 else None
        if zero3:
            apply_fsdp(model, mesh["dp"])
        local = {name: _rank_local_numel(p, (dp, tp)) for name, p in model.named_parameters()}
        device = "meta"
        if zero3 and skipped is None:
            local_bytes = 4 * sum(v[0] for v in local.values())
            if local_bytes > FSDP_MATERIALISE_LIMIT:
                skipped = f"an FSDP2 forward needs real storage for {local_bytes:,} bytes of local shards"
            else:
                model.to_empty(device="cpu")
                device = "cpu"
        collectives = None
        if skipped is None:
            try:
                collectives = _one_step(model, sharded, batch_size, seq_len, device)
            except (
                RuntimeError
            ) as exc:  # a plan whose shards do not compose fails in torch's own shape checks
                first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                notes.append(f"the sharded training step failed in torch: {first_line}")
            # CommDebugMode's module tracker (torch 2.13) loses its place in a module run twice
            except IndexError:
                notes.append("collectives not recorded: torch's CommDebugMode cannot follow a module that runs twice "
                             "in one step (shared layers, or one token table for two stacks)")  # fmt: skip
        else:
            notes.append(f"collectives not recorded: {skipped}")
        return ShardedRun(tp, dp, zero3, local, collectives, skipped, notes)
    finally:
        dist.destroy_process_group()


def _one_step(
    model: nn.Module, config: ResolvedShape, batch_size: int, seq_len: int, device: str
) -> list[RecordedCollective]:
    """One forward and backward under the recording comm mode; the loss is cross-entropy on vocab-sharded logits
    (torch's parallel loss) when the model has an LM head, else the mean of its output."""
    import warnings

    from torch.distributed.tensor import DTensor

    from embedcalc.modeling.steps import backward_parallel_loss

    recorder = _BytesCommMode()
    ids = torch.zeros(batch_size, seq_len, dtype=torch.long, device=device)  # (B, T)
    args = (ids,) if config.architecture != "encoder-decoder" else (ids, ids)
    model.train()
    with warnings.catch_warnings(), recorder.mode:
        # torch warns that FSDP2 units return views and that full backward hooks see no input gradients: true of
        # this meta-device step, which only counts collectives
        warnings.simplefilter("ignore", UserWarning)
        out = model(*args)
        logits = getattr(out, "logits", None)
        if isinstance(logits, DTensor):
            backward_parallel_loss(logits, ids)
        else:
            main = out.main if hasattr(out, "main") else out
            main.float().mean().backward()
    return recorder.records
