"""Laguna (LagunaForCausalLM); poolside 2026; transformers' ``configuration_laguna.py`` / ``modeling_laguna.py``.

Pre-norm layers (``input_layernorm``, ``post_attention_layernorm``) of GQA attention with q_norm / k_norm
RMSNorm(head_dim), biases on q/k/v/o when ``attention_bias``, and an output gate ``g_proj`` (no bias) whose softplus
scales the context: one gate per head (Linear(hidden, heads): ``gating`` true or "per-head", the default) or per
channel (Linear(hidden, heads x head_dim): any other value); sliding layers as ``layer_types`` says (default: none),
over ``sliding_window``. The MLP of layer i is dense (``intermediate_size``) or, as ``mlp_layer_types`` says
(default: all but layer 0), Qwen3-MoE's experts of ``moe_intermediate_size`` behind a router whose
``e_score_correction_bias`` is a Parameter (transformers counts its ``num_experts`` values, frozen), plus a shared
MLP of ``shared_expert_intermediate_size`` without a gate. Scalars on the routed output and the router's logits are
element-wise. ``num_attention_heads_per_layer`` gives each layer its own query heads (blocks with their own
``num_heads``).
"""

from __future__ import annotations

from typing import Any

from embedcalc.config.spec_shapes import DEFAULT_BLOCK
from embedcalc.sources.hf.core import read_core
from embedcalc.sources.hf.layered import (
    SLIDING,
    checked_layer_types,
    ignore_moe_keys,
    layer_types,
    put_layout,
    read_moe,
    refuse,
)
from embedcalc.sources.hf.reader import MISSING, Family, KeyReader

_DELETED = ("decoder_sparse_step", "mlp_only_layers", "qkv_bias", "use_sliding_window", "max_window_layers")


def read_gate(r: KeyReader, squash: str = "softplus") -> None:
    """q/k norms and the output gate ``g_proj`` whose ``squash`` (softplus, Step-3.7's sigmoid) scales the context,
    per head or per channel as ``gating`` says."""
    g_key, gating, _ = r.value("gating")
    per_head = gating is True or gating == "per-head"
    if not per_head and r.data.get("qkv_bias"):
        refuse(r, g_key, f"{g_key} = {gating!r} with attention_bias: a per-channel g_proj without bias beside "
                         "biased q/k/v")  # fmt: skip
        return
    gate = {"head_gate": True} if per_head else {"output_gate": True}
    note = f"g_proj: {squash} gate per head" if per_head else f"g_proj: {squash} gate per channel"
    r.put("attention", {"qk_norm": "head"} | gate, g_key, "file" if g_key in r.raw else "default",
          f"q_norm, k_norm RMSNorm(head_dim); {note}")  # fmt: skip


def _heads(r: KeyReader, layers: int) -> list[int | None] | None:
    """Per layer its own query heads (None: num_attention_heads), from ``num_attention_heads_per_layer``."""
    h_key, per_layer = r.lookup("num_attention_heads_per_layer")
    heads = r.data.get("num_heads")
    if per_layer is MISSING or per_layer is None:
        return [None] * layers
    if (
        not isinstance(per_layer, list)
        or len(per_layer) != layers
        or not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in per_layer)
    ):
        r.problem(h_key, f"{h_key} must give a positive head count for each of the {layers} layers; got "
                         f"{per_layer!r}")  # fmt: skip
        return None
    if all(n == heads for n in per_layer):
        r.ignore(h_key, "every layer has num_attention_heads query heads")
    return [None if n == heads else n for n in per_layer]


def _read_laguna(r: KeyReader) -> None:
    read_core(r, qkv="attention_bias", out="attention_bias", ffn=False)
    read_gate(r)
    for key in _DELETED:
        r.ignore(key, "LagunaConfig deletes it from Qwen2MoeConfig: its modeling code never reads it")
    ignore_moe_keys(r)
    for key in ("moe_routed_scaling_factor", "moe_router_logit_softcapping"):
        r.ignore(key, "a scalar on the routed output or the router's logits: element-wise only")
    r.expect("moe_apply_router_weight_on_input", (False,), "routing weights on the experts' input, which "
             "transformers' Laguna refuses too")  # fmt: skip
    _, shared, _ = r.value("shared_expert_intermediate_size")
    extra: dict[str, Any] = {"router_bias": True}
    if isinstance(shared, int) and shared > 0:
        extra |= {"num_shared_experts": 1, "shared_expert_dim": shared}
    moe = read_moe(r, "num_experts", extra=extra)
    layers = r.data.get("num_layers")
    if moe is None or not isinstance(layers, int):
        return
    types_key, types = layer_types(r, layers, None)
    m_key, mlp = r.lookup("mlp_layer_types")
    kinds = ["dense"] + ["sparse"] * (layers - 1) if mlp is MISSING or mlp is None else mlp
    kinds = checked_layer_types(r, m_key, kinds, layers, ("dense", "sparse"))
    w_key, window, _ = r.value("sliding_window")
    heads = _heads(r, layers)
    if types is None or kinds is None or heads is None:
        return
    windows = [window if t == SLIDING and isinstance(window, int) else None for t in types]
    if not any(windows):
        r.ignore(w_key, "no layer uses sliding attention")
    keys = ["num_experts", "num_experts_per_tok", "moe_intermediate_size", "shared_expert_intermediate_size",
            m_key, types_key, w_key] + (["num_attention_heads_per_layer"] if any(heads) else [])  # fmt: skip
    put_layer_layout(r, moe, kinds, windows, heads, ", ".join(k for k in keys if k in r.raw) or keys[0])


def put_layer_layout(
    r: KeyReader, moe: dict[str, Any], kinds: list[str], windows: list[int | None], heads: list[int | None],
    keys: str,
) -> None:  # fmt: skip
    """Blocks per layer from its MLP kind ("dense" / "sparse": ``moe``), its window and its own query heads."""
    names, blocks = [], {}
    for kind, slide, own in zip(kinds, windows, heads, strict=True):
        name = (
            ("moe" if kind == "sparse" else "dense")
            + (f"_w{slide}" if slide else "")
            + (f"_h{own}" if own else "")
        )
        attention = ({"sliding_window": slide} if slide else {}) | ({"num_heads": own} if own else {})
        blocks[name] = ({"attention": attention} if attention else {}) | (
            {"ffn": moe} if kind == "sparse" else {}
        )
        names.append(DEFAULT_BLOCK if name == "dense" else name)
    note = f"{kinds.count('sparse')} MoE layers, {sum(1 for w in windows if w)} sliding"
    note += f", {sum(1 for h in heads if h)} with their own head counts" if any(heads) else ""
    put_layout(r, names, blocks, keys, note)


_LAGUNA: dict[str, Any] = dict(
    vocab_size=100352, hidden_size=2048, intermediate_size=8192, num_hidden_layers=40, num_attention_heads=48,
    num_key_value_heads=8, hidden_act="silu", max_position_embeddings=131072, tie_word_embeddings=False,
    attention_dropout=0.0, sliding_window=512, moe_intermediate_size=512, shared_expert_intermediate_size=512,
    num_experts_per_tok=8, num_experts=256, head_dim=128, attention_bias=False, gating=True,
)  # fmt: skip
FAMILIES = (
    Family("laguna", "LagunaConfig", "LagunaForCausalLM (AutoModelForCausalLM)", "qwen3-30b-a3b", _LAGUNA,
           _read_laguna),
)  # fmt: skip
