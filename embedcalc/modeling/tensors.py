"""The weight tensors of embedcalc's torch model for a config: every parameter's name, shape and component.

Names are ``named_parameters()`` of :func:`embedcalc.modeling.model.build_model` on the meta device (nothing is
allocated), so they are the names a checkpoint of this model would have; a tied LM head is the token table, listed
once. The component is the analytic breakdown key of the module holding the tensor
(:func:`embedcalc.modeling.counting.component_key`), or the name's first segment when no key covers it.
"""

from __future__ import annotations

from dataclasses import dataclass

from embedcalc.config.resolved import ResolvedShape
from embedcalc.modeling.counting import component_key
from embedcalc.modeling.model import build_model


@dataclass(frozen=True)
class NamedTensor:
    """One parameter of the model: ``decoder.layers.0.attention.qkv.k.weight``, ``(1024, 4096)``."""

    name: str
    shape: tuple[int, ...]
    component: str  # breakdown key, e.g. ``decoder/attention/qkv``


def named_tensors(config: ResolvedShape) -> list[NamedTensor]:
    """Every parameter tensor of the model built for ``config``, in module order."""
    model = build_model(config, device="meta")
    out = []
    for name, param in model.named_parameters():
        module_path = name.rsplit(".", 1)[0]
        component = component_key(module_path) or name.split(".")[0]
        out.append(NamedTensor(name, tuple(int(s) for s in param.shape), component))
    return out
