"""The torch side of embedcalc: the model built from a config, and its parameters and FLOPs as torch measures them.

The only package that imports torch (DESIGN.md §7). It shares no code with :mod:`embedcalc.analysis`, so that
``verify`` compares two independent implementations of the same counting conventions (DESIGN.md §4).
"""

from embedcalc.modeling.counting import (
    component_buffers,
    component_flops,
    component_key,
    component_params,
    component_paths,
    flop_counter_mode,
)
from embedcalc.modeling.layers import AttentionImpl
from embedcalc.modeling.model import TransformerModel, TransformerOutput, build_model, initialise_
from embedcalc.modeling.moe import Routing

__all__ = [
    "AttentionImpl",
    "Routing",
    "TransformerModel",
    "TransformerOutput",
    "build_model",
    "component_buffers",
    "component_flops",
    "component_key",
    "component_params",
    "component_paths",
    "flop_counter_mode",
    "initialise_",
]
