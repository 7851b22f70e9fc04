"""Real LoRA / DoRA adapters on embedcalc's torch model (Hu et al. 2021, §4.1; Liu et al. 2024, §4.1), placed from
an analytic :class:`AdapterSite` list, so ``bench --peft`` trains them and ``verify``-style checks count them.

embedcalc's model keeps Q, K, V and a gated FFN's gate and up projections as separate ``nn.Linear`` modules
(``attention.qkv.q``, ``ffn.in_.gate``); a family whose transformers module is fused (GPT-2's ``c_attn``, Phi-3's
``gate_up_proj``) gets one adapter whose ``lora_B`` rows are split over the parts, as peft's adapter on the fused
module would be: one ``lora_A`` (r x in) and one ``lora_B`` (sum of the parts' outputs x r), shared. The base
model is frozen; adapters are fp32 (peft's ``autocast_adapter_dtype``); dropout 0 is the identity, as in peft.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

if TYPE_CHECKING:
    from embedcalc.config.resolved import ResolvedShape


@dataclass(frozen=True)
class AdapterSite:
    """One adapter: the torch modules it adapts (paths in embedcalc's model; several for a fused module, their
    outputs stacked in order), its rank and scaling, DoRA or not."""

    paths: tuple[str, ...]
    rank: int
    alpha: float
    dropout: float = 0.0
    dora: bool = False


class LoRAWeights(nn.Module):
    """lora_A (r x in) and lora_B (out x r) of one adapter; B starts at zero (Hu et al. 2021, §4.1)."""

    def __init__(self, site: AdapterSite, in_features: int, out: int, device: torch.device) -> None:
        super().__init__()
        self.lora_A = nn.Linear(in_features, site.rank, bias=False, device=device, dtype=torch.float32)
        self.lora_B = nn.Linear(site.rank, out, bias=False, device=device, dtype=torch.float32)
        nn.init.zeros_(self.lora_B.weight)
        self.dropout = nn.Dropout(site.dropout) if site.dropout > 0 else nn.Identity()
        self.scaling = site.alpha / site.rank


class AdaptedLinear(nn.Module):
    """A frozen linear plus rows ``rows`` of a (possibly shared) adapter's output; DoRA rescales each output row
    by its magnitude over the norm of W + s B A (the norm detached, Liu et al. 2024 §4.3)."""

    def __init__(self, base: nn.Linear, weights: LoRAWeights, rows: slice, dora: bool) -> None:
        super().__init__()
        self.base = base
        self.adapter = weights
        self.rows = rows
        self.magnitude: nn.Parameter | None = None
        if dora:
            norm = base.weight.detach().float().norm(dim=1)  # (out,): B is zero, so ||W||
            self.magnitude = nn.Parameter(norm)

    def forward(self, x: Tensor) -> Tensor:
        a = self.adapter
        delta_b = a.lora_B.weight[self.rows]  # (out_part, r)
        low = a.lora_A(a.dropout(x.to(a.lora_A.weight.dtype)))  # (B, T, r)
        lora = (low @ delta_b.t()) * a.scaling  # (B, T, out_part)
        if self.magnitude is None:
            out: Tensor = self.base(x) + lora.to(x.dtype)
            return out
        merged = self.base.weight.float() + a.scaling * (delta_b @ a.lora_A.weight)  # (out_part, in)
        scale = (self.magnitude / merged.norm(dim=1).detach()).to(x.dtype)
        bias = self.base.bias
        plain = self.base(x) if bias is None else self.base(x) - bias
        result: Tensor = scale * plain + scale * lora.to(
            x.dtype
        )  # peft's DoraLinearLayer: both products saved
        return result if bias is None else result + bias


def attach_adapters(model: nn.Module, sites: list[AdapterSite], saved: tuple[str, ...] = ()) -> None:
    """Freeze ``model`` and put an adapter on every site (and make the modules ``saved`` trainable: their copies,
    as peft's modules_to_save, are the modules themselves here since the originals would stay frozen and unused)."""
    for p in model.parameters():
        p.requires_grad_(False)
    device = next(model.parameters()).device
    for site in sites:
        bases: list[nn.Linear] = []
        for path in site.paths:
            module = model.get_submodule(path)
            if not isinstance(module, nn.Linear):
                raise TypeError(f"{path} is a {type(module).__name__}, not a linear module")
            bases.append(module)
        weights = LoRAWeights(site, bases[0].in_features, sum(b.out_features for b in bases), device)
        start = 0
        for path, base in zip(site.paths, bases, strict=True):
            parent_path, _, name = path.rpartition(".")
            parent = model.get_submodule(parent_path) if parent_path else model
            rows = slice(start, start + base.out_features)
            setattr(parent, name, AdaptedLinear(base, weights, rows, site.dora))
            start += base.out_features
    for path in saved:
        for p in model.get_submodule(path).parameters():
            p.requires_grad_(True)


def count_parameters(model: nn.Module) -> tuple[int, int]:
    """(trainable, all) parameters, a shared tensor once, as peft's get_nb_trainable_parameters."""
    seen: set[int] = set()
    trainable = total = 0
    for p in model.parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        total += p.numel()
        trainable += p.numel() if p.requires_grad else 0
    return trainable, total


def adapted_counts(
    config: ResolvedShape, sites: list[AdapterSite], saved: tuple[str, ...] = ()
) -> tuple[int, int]:
    """(trainable, all) parameters of embedcalc's model of ``config`` built on the meta device with ``sites``."""
    from embedcalc.modeling.model import build_model

    model = build_model(config, device=torch.device("meta"))
    attach_adapters(model, sites, saved)
    return count_parameters(model)


def saved_tensor_bytes(model: nn.Module, forward: Callable[[], Tensor]) -> int:
    """Bytes autograd holds for the backward of ``forward()`` (its loss) when the forward returns, each storage
    once, the model's own parameters excluded: the saved activations, measured exactly
    (``torch.autograd.graph.saved_tensors_hooks``). A tensor saved by a node that no longer exists when the forward
    returns (a branch cut off by ``detach``, such as DoRA's weight norm) is not counted: it is gone by then."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    packed: list[tuple[weakref.ref[Tensor], int, int]] = []

    def pack(t: Tensor) -> Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            packed.append((weakref.ref(t), storage.data_ptr(), storage.nbytes()))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = forward()
    held = {ptr: size for ref, ptr, size in packed if ref() is not None}
    del loss
    return sum(held.values())
