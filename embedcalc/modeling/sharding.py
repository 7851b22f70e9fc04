"""How embedcalc's torch model is sharded on torch.distributed: the tensor-parallel plan, FSDP2 units, pipeline
stages, and :func:`shard_on_fake_group`, which applies them in one process on torch's fake process group.

The tensor-parallel plan is Megatron-LM's (Shoeybi et al. 2019, §3) written with DTensor's styles: the Q/K/V
projections (and latent attention's q_b / kv_b, the FFN's input projections) are ``ColwiseParallel`` (each rank
computes its heads or its slice of the inner width), the attention and FFN output projections ``RowwiseParallel``
(a partial sum all-reduced into the residual stream), the token table vocab-parallel (``RowwiseParallel`` on an
embedding shards its rows; the partial lookups are all-reduced), the LM head vocab-parallel with its logits left
sharded for ``loss_parallel`` (and its bias, phi-2's, split with the vocabulary as a ``ColwiseParallel`` bias is).
Gated attention's output gate is column-parallel with the heads it scales. Norms, positions, routers, MLA's
down-projections (q_a, kv_a) and the sequence mixers (Mamba, DeltaNet: their fused in-projections are not split
here) stay replicated.
As Megatron does, the vocabulary is padded to a multiple of the TP degree, and when there are fewer KV heads than
ranks each KV head is replicated so that every rank holds one. The plan is found from module paths (the breakdown
keys of docs/layers.md), so every layer variant is covered without a per-class table.

ZeRO-3 is FSDP2 ``fully_shard`` on every block and on the root (and on each stack's relative-position table, which
its stack uses before the first block runs), over the data-parallel dimension of a (dp, tp) device mesh.
Pipeline stages are a module split, the layout Megatron uses: blocks in contiguous runs as even as possible (the
first L mod pp stages one more), embeddings on the first stage, final norms, pooler and LM head on the last, which
keeps its own copy of a tied token table; a block shared by every layer (ALBERT) is held by every stage that runs
it.

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
from embedcalc.config.schema import ModelConfig

# module paths by their last components: attention (self and cross, MLA's q / q_b / kv_b, the output gate of
# gated attention) and the FFN's and shared experts' projections; a mixer's ``in_`` / ``out`` (Mamba, DeltaNet)
# is not among them and stays replicated, as analysis.parallel counts it
_COLUMN = ("qkv.q", "qkv.k", "qkv.v", "attention.q_b", "attention.kv_b", "attention.q", "attention.gate",
           "ffn.in_", "ffn.in_.gate", "ffn.in_.up", "shared.in_", "shared.in_.gate", "shared.in_.up")  # fmt: skip
_ROW = ("attention.out", "ffn.out", "shared.out")
FSDP_MATERIALISE_LIMIT = 2**31  # bytes of local shards an FSDP2 forward may allocate on the CPU


def blocks_of(model: nn.Module) -> list[nn.Module]:
    """The Transformer blocks of every stack (the children of each ``layers`` ModuleList), in order."""
    out: list[nn.Module] = []
    for name, module in model.named_modules():
        if isinstance(module, nn.ModuleList) and name.rsplit(".", 1)[-1] == "layers":
            out.extend(module)
    return out


def apply_fsdp(model: nn.Module, mesh: Any) -> None:
    """ZeRO-3 as FSDP2 ``fully_shard`` units: each stack's relative-position table (T5, DeBERTa) on its own, every
    block, then the root. The table is its own unit because its stack computes the bias once, before the first block
    runs (its parameters must be gathered then, not with that block)."""
    from torch.distributed.fsdp import fully_shard

    for name, module in model.named_modules():
        if name.endswith(("attention.relative_bias", "attention.rel_embeddings")):
            fully_shard(module, mesh=mesh)
    for block in blocks_of(model):
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)


def tp_plan(model: nn.Module) -> dict[str, Any]:
    """``parallelize_module`` plan for the blocks of ``model``: module path -> ColwiseParallel / RowwiseParallel."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    plan: dict[str, Any] = {}
    for name, module in model.named_modules():
        if not isinstance(module, nn.Linear):
            continue
        if name.endswith(_ROW):
            plan[name] = RowwiseParallel()
        elif name.endswith(_COLUMN):
            plan[name] = ColwiseParallel()
    return plan


def _vocab_parallel_style(replicate_input: bool = True) -> Any:
    """A ParallelStyle that shards every parameter of a module on its first dimension (the vocabulary): the LM
    head's matmul (weight rows; its input made a replicated DTensor, its logits left sharded over the vocabulary
    for ``loss_parallel``), and, with ``replicate_input=False``, the LM-head bias added to those sharded logits
    (split like the bias of a ``ColwiseParallel`` layer, Megatron's ColumnParallelLinear)."""
    from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_module, distribute_tensor
    from torch.distributed.tensor.parallel.style import ParallelStyle

    class VocabParallel(ParallelStyle):
        def _apply(self, module: nn.Module, device_mesh: Any) -> nn.Module:
            def partition(name: str, mod: nn.Module, mesh: Any) -> None:
                for pname, param in list(mod.named_parameters(recurse=False)):
                    if not isinstance(param, DTensor):
                        mod.register_parameter(
                            pname, nn.Parameter(distribute_tensor(param, mesh, [Shard(0)]))
                        )

            def to_replicated(mod: nn.Module, inputs: Any, mesh: Any) -> Any:
                return (DTensor.from_local(inputs[0], mesh, [Replicate()], run_check=False), *inputs[1:])

            input_fn = to_replicated if replicate_input else None
            distributed: nn.Module = distribute_module(module, device_mesh, partition, input_fn, None)
            return distributed

    return VocabParallel()


def _full_width_norms(model: nn.Module) -> dict[str, Any]:
    """Plan entries for q/k norms over all heads (OLMo 2's ``qk_norm: full``): each rank's column-parallel q (or k)
    is all-gathered, normalised whole with the replicated norm, and its own heads' columns kept, as vLLM's
    ``Olmo2Attention._apply_qk_norm`` does (all-gather, norm, split); the backward all-gathers the gradient."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import PrepareModuleInputOutput

    plan: dict[str, Any] = {}
    for name, module in model.named_modules():
        if name.endswith("qk_norm") and getattr(module, "full", False):
            for part in ("q", "k"):
                plan[f"{name}.{part}"] = PrepareModuleInputOutput(
                    input_layouts=Shard(-1), desired_input_layouts=Replicate(), use_local_input=True,
                    output_layouts=Replicate(), desired_output_layouts=Shard(-1),
                )  # fmt: skip
    return plan


def apply_tensor_parallel(model: nn.Module, mesh: Any, plan_override: dict[str, Any] | None = None) -> None:
    """Shard ``model`` (built from :func:`sharding_config`) over the 1-D ``mesh`` with the plan of the module
    docstring, and give its attention modules their local head counts."""
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import RowwiseParallel, parallelize_module

    tp = mesh.size()
    plan = tp_plan(model)
    plan["embedding.token"] = RowwiseParallel(input_layouts=Replicate())
    if getattr(model, "head", None) is not None:
        plan["head.lm"] = _vocab_parallel_style()
        if getattr(model.head, "lm_bias", None) is not None:
            plan["head.lm_bias"] = _vocab_parallel_style(replicate_input=False)
    plan.update(_full_width_norms(model))
    plan.update(plan_override or {})
    parallelize_module(model, mesh, plan)
    _shard_stacked(model, mesh)
    for module in model.modules():  # local head counts for the reshapes
        heads, kv_heads = getattr(module, "num_heads", None), getattr(module, "num_kv_heads", None)
        if hasattr(module, "attend") and isinstance(heads, int):
            setattr(module, "num_heads", heads // tp)  # noqa: B010 (an attribute torch types as Module)
            if isinstance(kv_heads, int):
                setattr(module, "num_kv_heads", max(1, kv_heads // tp))  # noqa: B010


def sharding_config(config: ResolvedShape, tp: int) -> ResolvedShape:
    """The config as Megatron builds it for ``tp`` ranks: vocabulary (and the token table) padded to a multiple of
    tp, and at least tp KV heads (each of fewer heads replicated) so that every rank holds whole KV heads."""
    data = config.model_dump()
    data["vocab_size"] = -(-config.vocab_size // tp) * tp
    if (
        config.extra_token_rows
    ):  # the token table (vocab_size + extra rows) is padded on its own (Mllama: + 8)
        data["extra_token_rows"] = -(-config.token_rows // tp) * tp - data["vocab_size"]
    if config.resolved_kv_heads < tp:
        data["num_kv_heads"] = tp
    specs = [data.get("attention")] + [
        block.get("attention") for block in (data.get("blocks") or {}).values()
    ]
    for spec in specs:  # a block's own KV heads (the NAS models'), likewise
        if spec and spec.get("num_kv_heads") is not None and spec["num_kv_heads"] < tp:
            spec["num_kv_heads"] = tp
    return ModelConfig.model_validate(data)


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


# stacked expert tensors (E, ·, ·) and per-head vectors: the dimension each is split on under tensor parallelism
_STACKED = {"experts.gate_up": 1, "experts.up": 1, "experts.gate_up_bias": 1, "experts.up_bias": 1,
            "experts.down": 2, "sinks.logits": 0}  # fmt: skip


def _shard_stacked(model: nn.Module, mesh: Any) -> None:
    """Split the tensors ``parallelize_module`` cannot reach (not inside a Linear): each expert's inner width
    (column-parallel in, row-parallel out, as for a dense FFN) and the per-head sink logits."""
    from torch.distributed.tensor import DTensor, Shard, distribute_tensor

    for module_name, module in model.named_modules():
        for pname, param in list(module.named_parameters(recurse=False)):
            suffix = f"{module_name.rsplit('.', 1)[-1]}.{pname}"
            if suffix in _STACKED and not isinstance(param, DTensor):
                placed = distribute_tensor(param, mesh, [Shard(_STACKED[suffix])])
                module.register_parameter(pname, nn.Parameter(placed))


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


def stage_module_params(model: nn.Module, config: ResolvedShape, pp: int) -> list[dict[str, int]]:
    """Parameter numel per name on each of ``pp`` pipeline stages of the module split (module docstring).

    A stack's layers are its ``num_layers`` calls, not its built modules: with ``shared_layers`` (ALBERT) the one
    block runs at every position, so every stage that runs any of the stack's layers holds that block's weights
    (a stage cannot call a module that lives on another device)."""
    stacks = [(name, int(getattr(module, "num_layers", len(layers))), len(layers))
              for name, module in model.named_children()
              if isinstance(layers := getattr(module, "layers", None), nn.ModuleList)]  # fmt: skip
    total = sum(n for _, n, _ in stacks)
    base, extra = divmod(total, pp)
    bounds, start = [], 0
    for i in range(pp):
        stop = start + base + (1 if i < extra else 0)
        bounds.append((start, stop))
        start = stop
    spans, offset = {}, 0
    for name, calls, built in stacks:
        spans[name] = (offset, offset + calls, built)
        offset += calls

    def stages_running(lo: int, hi: int) -> list[int]:  # the stages that run global layers lo .. hi - 1
        return [i for i, (a, b) in enumerate(bounds) if a < hi and lo < b]

    stages: list[dict[str, int]] = [{} for _ in range(pp)]
    for pname, param in model.named_parameters():
        parts = pname.split(".")
        if parts[0] in spans and len(parts) > 2 and parts[1] == "layers":
            lo, hi, built = spans[parts[0]]
            index = lo + int(parts[2])
            # a stack's one bias table: first stage
            shared = built < hi - lo and ".relative_bias." not in pname
            holders = stages_running(lo, hi) if shared else stages_running(index, index + 1)
        elif parts[0] in spans:  # final norm
            holders = stages_running(spans[parts[0]][1] - 1, spans[parts[0]][1])
        elif parts[0] == "embedding":
            holders = [0]
            tied = getattr(model, "head", None) is not None and config.tie_embeddings
            if pname == "embedding.token.weight" and tied and pp > 1:
                stages[-1]["head.lm.weight (tied copy)"] = int(param.numel())
        else:  # pooler, head
            holders = [pp - 1]
        for stage in holders:
            stages[stage][pname] = int(param.numel())
    return stages
