"""The shapes of a shared block's checkpoint tensors that differ from a plain layer's (Zamba2's
``Zamba2HybridLayer``; config/shared_spec.py): ``shared_transformer.input_layernorm`` and ``self_attn.q_proj`` /
``k_proj`` / ``v_proj`` read the 2 d wide input (the layer's input and the token embeddings), and every use's
adapters (``linear_q/k/v_adapter_list.J``, ``feed_forward.gate_up_proj_adapter_list.J``: ``.0`` down to the rank,
``.1`` up to the projection's output) and its ``linear`` projection (d, d, the plain ``/projection`` rule of
:mod:`embedcalc.reconcile.checkpoint_shapes`). The rest of the block (``o_proj``, the FFN, ``pre_ff_layernorm``, the
Mamba-2 layer) has a plain layer's shapes.
"""

from __future__ import annotations

from embedcalc.analysis.structure import Dims, head_width, kv_width
from embedcalc.config.layer_plan import Block

Expected = tuple[tuple[int, ...] | None, str]


def shared_tensor_shape(
    block: Block, x: Dims, component: str, inside: list[str], param: str
) -> Expected | None:
    """A shared block's tensors whose shapes differ from a plain layer's (Zamba2: ``input_layernorm`` (w,),
    ``q_proj`` / ``k_proj`` / ``v_proj`` (H hd | G hd, w), with w = 2 d the input and the embeddings; each adapter
    ``<list>.J.0`` (r, input) and ``<list>.J.1`` (output, r)), None for the rest (the plain rules apply)."""
    use, a, ffn = block.shared, block.attention, block.ffn
    if use is None or a is None or ffn is None or not inside:
        return None
    wide, why = use.input_width(x.d), "the input and the embeddings" if use.embeddings else "hidden"
    q, kv = int(x.h) * int(head_width(a, x)), int(kv_width(a, x))
    last = inside[-1]
    if component == "attention/norm" and param == "weight":
        return (wide,), why
    if component == "attention/qkv" and last in ("q_proj", "k_proj", "v_proj"):
        rows = q if last == "q_proj" else kv
        what = "num_heads x head_dim" if last == "q_proj" else "num_kv_heads x head_dim"
        if param == "weight":
            return (rows, wide), f"{what}, {why}"
        return None
    if component not in ("shared/attention_adapters", "shared/ffn_adapters") or param != "weight":
        return None
    r = use.adapter_rank
    source, out = (
        (wide, q if "linear_q_adapter_list" in inside else kv)
        if component == "shared/attention_adapters"
        else (x.d, 2 * int(x.widths(block).f) if ffn.gated else int(x.widths(block).f))
    )
    return ((r, source), "adapter_rank, its input") if last == "0" else ((out, r), "its output, adapter_rank")
