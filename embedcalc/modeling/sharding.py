"""How embedcalc's torch model is sharded on torch.distributed: the FSDP2 units and the tensor-parallel plan.

The plan is Megatron-LM's (Shoeybi et al. 2019, §3), written with DTensor's ``ColwiseParallel`` and
``RowwiseParallel`` styles: the Q/K/V (and MLA's q_b / kv_b) projections and the FFN's input projections are
column-parallel (each rank computes its heads / its slice of the inner width), the attention output and FFN output
projections are row-parallel (a partial sum all-reduced into the residual stream); experts' inner projections
follow the same split. Norms, routers and the MLA down-projections (q_a, kv_a) stay replicated. The plan is found
from module paths (the breakdown keys of docs/layers.md), so every layer variant is covered without a per-class
table.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from embedcalc.config.schema import ModelConfig

# the last path segments of column- and row-parallel Linear modules
_COLUMN = ("qkv.q", "qkv.k", "qkv.v", "q_b", "kv_b", "attention.q", "in_", "in_.gate", "in_.up")
_ROW = ("attention.out", "cross_attention.out", "ffn.out")


def blocks_of(model: nn.Module) -> list[nn.Module]:
    """The Transformer blocks of every stack (the children of each ``layers`` ModuleList), in order."""
    out: list[nn.Module] = []
    for name, module in model.named_modules():
        if isinstance(module, nn.ModuleList) and name.rsplit(".", 1)[-1] == "layers":
            out.extend(module)
    return out


def tp_plan(model: nn.Module, config: ModelConfig, tp: int) -> dict[str, Any]:
    """``parallelize_module`` plan for ``model``: module path -> ColwiseParallel / RowwiseParallel."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    plan: dict[str, Any] = {}
    for name, module in model.named_modules():
        if not isinstance(module, nn.Linear):
            continue
        if name.endswith(_ROW) or (".experts." in name and name.endswith(".out")):
            plan[name] = RowwiseParallel()
        elif name.endswith(_COLUMN):
            plan[name] = ColwiseParallel()
    return plan
