"""The general reader's result (DESIGN §19): a model transformers builds, counted through its own class on the meta
device (:mod:`embedcalc.modeling.hf_meta`), its numbers placed on embedcalc's breakdown keys.

Conventions, the native readers' (DESIGN §4) wherever the module tree allows:

- **parameters**: every trainable parameter of the class (a tied weight once); each placed by its module name as
  ``verify --checkpoint`` places a checkpoint tensor (:func:`embedcalc.reconcile.checkpoint_names.tensor_role`):
  ``decoder/attention/qkv``, ``decoder/moe/experts``, ``head/lm``; a name no rule places goes under
  ``<stack>/other/<module>`` (inside a layer) or ``other/<module>``, so the total is always exact. A multimodal
  model counts its language model and LM head; the towers are listed apart (``outside_params``), not counted.
- **active parameters** (routed experts): per module named ``experts``, only ``top_k`` of its ``num_experts``
  count; shared experts, routers and everything else count whole.
- **FLOPs**: what ``FlopCounterMode`` counts on the meta forward (2 per multiply-accumulate, matmuls only, eager
  attention with the full n x n score matrix, exactly ``top_k`` experts per token): embedcalc's own convention.
  Per module, exclusive of its children, placed like the parameters; an attention module's own matmuls (Q·Kᵀ and
  weights·V together) are ``attention/core`` (the native breakdown's ``attention/scores`` + ``attention/context``),
  a recurrent mixer's own work (its scan or chunked form, as the family's reference code computes it) ``mixer/core``.
- **cache**: the family's own cache object after a forward of the workload's tokens (``seq_len`` + ``gen_tokens``):
  every floating tensor it holds, per layer, at the workload's activation bytes per element; keys and values as
  ``kv_cache_bytes``, the recurrent conv/SSM states as ``recurrent_state_bytes``.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from embedcalc.analysis.breakdown import Breakdown
from embedcalc.errors import Problem
from embedcalc.reconcile.checkpoint_names import Sublayer, tensor_role, tensor_stack, within_layer

__all__ = [
    "READER",
    "CacheLayer",
    "ExpertGroup",
    "GeneralCount",
    "GeneralReport",
    "cache_layers",
    "place_flops",
    "place_params",
]

READER = "transformers-meta"
# attention modules by their attribute name (BERT's is attention.self: BertSelfAttention)
_ATTENTION = ("self_attn", "attention", "attn", "self_attention", "SelfAttention", "mixer_attn", "self")
_CROSS = ("cross_attn", "encoder_attn", "EncDecAttention", "crossattention")
_MIXERS = ("mamba", "mixer", "linear_attn", "conv", "ssm")


def layer_kinds(children: dict[int, tuple[str, ...]]) -> dict[int, Sublayer]:
    """The sublayer each layer's pre-norm serves, read off its child modules (the checkpoint placement's
    ``layer_kinds``): ``mixer`` with a recurrent mixer, ``parallel`` beside attention, ``ffn`` with an FFN only."""
    out: dict[int, Sublayer] = {}
    for index, names in children.items():
        attention = any(n in _ATTENTION for n in names)
        if any(n in _MIXERS for n in names):
            out[index] = "parallel" if attention else "mixer"
        elif not attention and any(n in ("mlp", "feed_forward", "ffn", "moe") for n in names):
            out[index] = "ffn"
    return out


def _sandwich(children: dict[int, tuple[str, ...]]) -> bool:
    return any(
        "pre_feedforward_layernorm" in n and "post_attention_layernorm" in n for n in children.values()
    )


def _other(name: str, stack: str, layer: int | None) -> str:
    module = name.rpartition(".")[0]
    inside = within_layer(module, layer) if layer is not None else module.split(".")
    first = next((s for s in inside if not s.isdigit()), "") if layer is not None else (inside[-1] or name)
    return f"{stack}/other/{first}" if layer is not None else f"other/{first or name}"


def place_params(
    parameters: tuple[tuple[str, tuple[int, ...]], ...],
    architecture: str,
    children: dict[int, tuple[str, ...]],
) -> Breakdown:
    """Parameters by breakdown key (module docstring)."""
    kinds, sandwich = layer_kinds(children), _sandwich(children)
    out = Breakdown()
    for name, shape in parameters:
        numel = math.prod(shape)
        stack = tensor_stack(name, architecture)
        role = tensor_role(name, stack, sandwich, kinds, architecture == "encoder-decoder")
        out.add(role.key if role.key is not None else _other(name, stack, role.layer), numel)
    return out


def place_flops(flops: dict[str, int], architecture: str, children: dict[int, tuple[str, ...]]) -> Breakdown:
    """FLOPs by breakdown key: each module's own FLOPs placed as its weight would be (module docstring)."""
    kinds, sandwich = layer_kinds(children), _sandwich(children)
    out = Breakdown()
    for path, value in flops.items():
        if not path:
            out.add("other", value)
            continue
        name = f"{path}.weight"
        stack = tensor_stack(name, architecture)
        role = tensor_role(name, stack, sandwich, kinds, architecture == "encoder-decoder")
        last = path.rsplit(".", 1)[-1]
        if last in _CROSS:
            key = f"{stack}/cross_attention/core"
        elif last in _ATTENTION and (role.key is None or role.key.endswith("/out")):
            key = f"{stack}/attention/core"
        elif last in _MIXERS and role.key is None:
            key = f"{stack}/mixer/core"
        else:
            key = role.key if role.key is not None else _other(name, stack, role.layer)
        out.add(key, value)
    return out


@dataclass(frozen=True)
class CacheLayer:
    """One layer's cache: its index, stack (``self`` or ``cross``), and K/V and recurrent-state bytes."""

    layer: int
    stack: str
    kv_bytes: int
    state_bytes: int

    def to_json(self) -> dict[str, Any]:
        return {
            "layer": self.layer,
            "stack": self.stack,
            "kv_bytes": self.kv_bytes,
            "state_bytes": self.state_bytes,
        }


@dataclass(frozen=True)
class ExpertGroup:
    """The routed experts of one MoE layer: its module, parameters, ``num_experts`` and ``top_k``."""

    module: str
    params: int
    num_experts: int
    top_k: int | None

    @property
    def active(self) -> int | None:
        """The parameters a token uses: ``top_k`` of the ``num_experts`` equal experts."""
        if self.top_k is None:
            return None
        return self.params * min(self.top_k, self.num_experts) // self.num_experts


@dataclass(frozen=True)
class GeneralCount:
    """A model counted by transformers' own class on the meta device (module docstring)."""

    target: str
    model_type: str
    class_name: str
    auto_class: str
    architecture: str
    transformers_version: str
    workload: dict[str, Any]
    params: Breakdown
    experts: tuple[ExpertGroup, ...]
    outside_params: int
    flops: Breakdown | None
    flops_error: str | None
    cache: tuple[CacheLayer, ...] | None
    cache_class: str | None
    cache_error: str | None
    weight_bytes_per_param: float = 4.0
    notes: list[str] = field(default_factory=list)
    # the language model's path where it ran alone on token ids (the outer forward wants images too): the FLOPs and
    # cache are its alone, the vision tower not run
    ran_alone: str | None = None

    @property
    def counted_by(self) -> str:
        return f"counted by transformers' {self.class_name} on the meta device"

    @property
    def active_params(self) -> int | None:
        """Parameters a token uses (the total less the experts it does not route to); None when a top-k is unknown."""
        if any(e.active is None for e in self.experts):
            return None
        return self.params.total - sum(e.params - (e.active or 0) for e in self.experts)

    @property
    def kv_cache_bytes(self) -> int | None:
        return None if self.cache is None else sum(c.kv_bytes for c in self.cache)

    @property
    def recurrent_state_bytes(self) -> int | None:
        return None if self.cache is None else sum(c.state_bytes for c in self.cache)

    @property
    def weights_bytes(self) -> int:
        """Every parameter at the workload's weight dtype (rounded up to a whole byte)."""
        return -int(-self.params.total * self.weight_bytes_per_param // 1)

    @property
    def memory_bytes(self) -> int:
        """Weights + KV cache + recurrent state (what the count knows of inference memory)."""
        return self.weights_bytes + (self.kv_cache_bytes or 0) + (self.recurrent_state_bytes or 0)

    def to_json(self) -> dict[str, Any]:
        """The ``results[]`` entry of ``analyze --format json`` for the general reader."""
        flops = (
            None if self.flops is None else {"forward": self.flops.total, "breakdown": self.flops.as_dict()}
        )
        return {
            "target": self.target,
            "reader": READER,
            "counted_by": self.counted_by,
            "model_type": self.model_type,
            "model_class": self.class_name,
            "auto_class": self.auto_class,
            "architecture": self.architecture,
            "transformers_version": self.transformers_version,
            "dtype": self.workload.get("dtype"),
            "params": {
                "total": self.params.total,
                "active": self.active_params,
                "breakdown": self.params.as_dict(),
                "outside_params": self.outside_params,
                "experts": [
                    {"module": e.module, "params": e.params, "num_experts": e.num_experts, "top_k": e.top_k}
                    for e in self.experts
                ],
            },
            "flops": flops,
            "flops_error": self.flops_error,
            "memory": {
                "weights_bytes": self.weights_bytes,
                "kv_cache_bytes": self.kv_cache_bytes,
                "recurrent_state_bytes": self.recurrent_state_bytes,
                "cache_class": self.cache_class,
                "per_layer": None if self.cache is None else [c.to_json() for c in self.cache],
            },
            "cache_error": self.cache_error,
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class GeneralReport:
    """``embedcalc analyze`` on the general reader: the count and one problem per budget limit it exceeds."""

    count: GeneralCount
    over_budget: list[Problem] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return self.count.to_json()


def cache_layers(tensors: tuple[Any, ...], element_bytes: int) -> tuple[CacheLayer, ...]:
    """Per (layer, stack): the bytes of its K/V and of its recurrent state, ``element_bytes`` per element."""
    kv: Counter[tuple[int, str]] = Counter()
    state: Counter[tuple[int, str]] = Counter()
    order: list[tuple[int, str]] = []
    for t in tensors:
        key = (t.layer, t.stack)
        if key not in order:
            order.append(key)
        (state if t.kind == "state" else kv)[key] += t.elements * element_bytes
    return tuple(
        CacheLayer(layer, stack, kv[(layer, stack)], state[(layer, stack)]) for layer, stack in order
    )
