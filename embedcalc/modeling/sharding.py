"""How embedcalc's torch model is sharded on torch.distributed: the tensor-parallel plan, FSDP2 units, pipeline
stages; :func:`embedcalc.modeling.fake_group.shard_on_fake_group` applies them in one process on torch's fake
process group.

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
"""

from __future__ import annotations

from typing import Any

from torch import nn

from embedcalc.config.resolved import ResolvedShape
from embedcalc.config.schema import ModelConfig

# module paths by their last components: attention (self and cross, MLA's q / q_b / kv_b, the output gate of
# gated attention) and the FFN's and shared experts' projections; a mixer's ``in_`` / ``out`` (Mamba, DeltaNet)
# is not among them and stays replicated, as analysis.parallel counts it
_COLUMN = ("qkv.q", "qkv.k", "qkv.v", "attention.q_b", "attention.kv_b", "attention.q", "attention.gate",
           "ffn.in_", "ffn.in_.gate", "ffn.in_.up", "shared.in_", "shared.in_.gate", "shared.in_.up",
           # a shared block's per-use adapters (Zamba2): their outputs add to the column-parallel q, k, v, gate, up
           "attention_adapters.q.up", "attention_adapters.k.up", "attention_adapters.v.up", "ffn_adapters.gate",
           "ffn_adapters.up")  # fmt: skip
_ROW = ("attention.out", "ffn.out", "shared.out")


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
    if (
        getattr(model.embedding, "decoder_token", None) is not None
    ):  # T5Gemma's decoder table, vocab-parallel too
        plan["embedding.decoder_token"] = RowwiseParallel(input_layouts=Replicate())
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

    # a parameter several layers hold (a shared block's weight set, Zamba2): every layer that names it
    users: dict[int, list[int]] = {}
    for pname, param in model.named_parameters(remove_duplicate=False):
        parts = pname.split(".")
        if parts[0] in spans and len(parts) > 2 and parts[1] == "layers":
            users.setdefault(id(param), []).append(spans[parts[0]][0] + int(parts[2]))
    stages: list[dict[str, int]] = [{} for _ in range(pp)]
    for pname, param in model.named_parameters():
        parts = pname.split(".")
        if parts[0] in spans and len(parts) > 2 and parts[1] == "layers":
            lo, hi, built = spans[parts[0]]
            # a stack's one bias table: first stage
            shared = built < hi - lo and ".relative_bias." not in pname
            holders = (
                stages_running(lo, hi)
                if shared
                else sorted({s for i in users[id(param)] for s in stages_running(i, i + 1)})
            )
        elif parts[0] in spans:  # final norm
            holders = stages_running(spans[parts[0]][1] - 1, spans[parts[0]][1])
        elif pname == "embedding.decoder_token.weight":  # T5Gemma: with the decoder's first layer
            holders = stages_running(spans["decoder"][0], spans["decoder"][0] + 1)
            if getattr(model, "head", None) is not None and config.tie_embeddings and pp - 1 not in holders:
                stages[-1]["head.lm.weight (tied copy)"] = int(param.numel())
        elif parts[0] == "embedding":
            holders = [0]
            tied = getattr(model, "head", None) is not None and config.tie_embeddings
            if pname == "embedding.token.weight" and tied and not config.decoder_token_table and pp > 1:
                stages[-1]["head.lm.weight (tied copy)"] = int(param.numel())
        else:  # pooler, head
            holders = [pp - 1]
        for stage in holders:
            stages[stage][pname] = int(param.numel())
    return stages
