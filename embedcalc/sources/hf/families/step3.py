"""Step-3.7-Flash's text model (``step3p5``: Step3p7TextConfig, the language model of
Step3p7ForConditionalGeneration, ``step3p7`` files' ``text_config``), read off transformers'
``modeling_step3p7.py``.

Pre-norm layers (Gemma-style RMSNorms, ``1 + weight``: the same parameters) of GQA attention: q/k/v/o with biases
when ``attention_bias``, q_norm / k_norm RMSNorm(head_dim), and Laguna's output gate ``g_proj`` (no bias) whose
sigmoid scales the context per head (``gating`` true or "per-head", the class's; a per-channel gate is refused:
transformers builds it, but its forward multiplies it per head and fails). ``layer_types``
slides the ``sliding_attention`` layers over ``sliding_window``; their query heads are
``num_sliding_attention_heads`` (old files: ``attention_other_setting``'s ``num_attention_heads``), which the class
writes as ``per_layer_config`` (read as written when present). A ``minimax_m3_sparse`` layer is refused:
transformers' ``Step3p7Attention`` builds it without an indexer and its forward has no mask for it, so what such a
checkpoint computes is not known from transformers (old files' ``sparse_attention_config`` never makes one: the
class fills ``layer_types`` before it would read ``sparse_attention_freq``). The MLP of
layer i is dense (``intermediate_size``, biases when ``mlp_bias``) or, as ``mlp_layer_types`` says (old files:
``moe_layers_enum``, else layers 3 on), a bias-free router of ``n_routed_experts`` (its ``e_score_correction_bias``
a buffer), experts of ``moe_intermediate_size`` and one shared MLP of ``share_expert_dim``. Lists padded with the
``num_nextn_predict_layers`` multi-token-prediction layers are cut to ``num_hidden_layers`` (the MTP layers are not
built); the clamp bounds (``swiglu_limits``), ``moe_router_scaling_factor`` and ``query_pre_attn_scalar`` are
element-wise, the per-layer RoPE keys have no parameters.
"""

from __future__ import annotations

from typing import Any

from embedcalc.sources.hf import keys as hf_keys
from embedcalc.sources.hf.core import read_core
from embedcalc.sources.hf.families.laguna import put_layer_layout, read_gate
from embedcalc.sources.hf.families.minimax_m3 import read_oai_activation
from embedcalc.sources.hf.layered import FULL, SLIDING, checked_layer_types, ignore_moe_keys, read_moe
from embedcalc.sources.hf.reader import MISSING, Family, KeyReader

_SPARSE = "minimax_m3_sparse"
_MTP = "the multi-token-prediction layers' own list (Step3p7Config.get_mtp_config); not built by the model"
_ELEMENT_WISE = {
    "swiglu_limits": "per-layer clamp bounds of the routed experts' SwiGLU: element-wise only",
    "swiglu_limits_shared": "per-layer clamp bounds of the shared expert's SwiGLU: element-wise only",
    "moe_router_scaling_factor": "a scalar on the routed experts' output: element-wise only",
    "query_pre_attn_scalar": "the attention's scale (query_pre_attn_scalar ** -0.5): element-wise only",
    "partial_rotary_factors": "partial rotary positions per layer: " + hf_keys.ROPE,
    "sparse_attention_config": "indexer settings the class copies, but Step3p7Attention builds no indexer",
    "index_n_heads": "Step3p7Attention builds no indexer",
    "index_head_dim": "Step3p7Attention builds no indexer",
    "index_block_size": "Step3p7Attention builds no indexer",
    "index_topk_blocks": "Step3p7Attention builds no indexer",
    "index_local_blocks": "Step3p7Attention builds no indexer",
    "moe_layer_freq": "popped by the class; mlp_layer_types decides which layers are MoE",
    "use_mrope": "the vision model's positions; the text model's rotary embedding has no parameters",
}


def _trimmed(r: KeyReader, name: str, layers: int, mtp: int) -> tuple[str, Any]:
    """The file's per-layer list ``name``, cut to ``layers`` when it is padded with the ``mtp`` MTP layers' entries
    (as Step3p7TextConfig cuts it)."""
    key, value = r.lookup(name)
    if isinstance(value, list) and mtp and len(value) == layers + mtp:
        value = value[:layers]
    return key, value


def _mlp_kinds(r: KeyReader, layers: int, mtp: int) -> tuple[str, list[str] | None]:
    key, value = _trimmed(r, "mlp_layer_types", layers, mtp)
    if value is MISSING or value is None:
        e_key, enum = r.lookup("moe_layers_enum")
        if enum is MISSING or enum is None:
            return key, ["dense" if i < 3 else "sparse" for i in range(layers)]
        items = enum.split(",") if isinstance(enum, str) else enum
        try:
            moe = {int(i) for i in items if str(i).strip()}
        except (TypeError, ValueError):
            r.problem(e_key, f"{e_key} = {enum!r} must list the MoE layers' indices")
            return e_key, None
        return e_key, ["sparse" if i in moe else "dense" for i in range(layers)]
    return key, checked_layer_types(r, key, value, layers, ("dense", "sparse"))


def _sliding_heads(r: KeyReader) -> tuple[str, Any]:
    """The sliding layers' query heads: ``num_sliding_attention_heads``, else ``attention_other_setting``'s."""
    key, heads = r.lookup("num_sliding_attention_heads")
    o_key, other = r.lookup("attention_other_setting")
    if other is not MISSING and other is not None:
        r.ignore(o_key, "the class reads only its num_attention_heads (the sliding layers' query heads)")
        if (heads is MISSING or heads is None) and isinstance(other, dict) and "num_attention_heads" in other:
            return f"{o_key}.num_attention_heads", other["num_attention_heads"]
    return key, heads


def _heads(r: KeyReader, types: list[str]) -> tuple[str, list[int | None] | None]:
    """Per layer its own query heads (None: num_attention_heads): ``per_layer_config`` as written, else the sliding
    layers' count."""
    flat = r.data.get("num_heads")
    p_key, per_layer = r.lookup("per_layer_config")
    if per_layer is MISSING or per_layer is None:
        key, sliding = _sliding_heads(r)
        if sliding is MISSING or sliding is None or sliding == flat:
            r.ignore(key, "the sliding layers have num_attention_heads query heads")
            return key, [None] * len(types)
        if not isinstance(sliding, int) or isinstance(sliding, bool) or sliding < 1:
            r.problem(key, f"{key} = {sliding!r} must be a positive head count")
            return key, None
        return key, [sliding if t == SLIDING else None for t in types]
    r.ignore("num_sliding_attention_heads", "per_layer_config sets each layer's heads")
    r.ignore("attention_other_setting", "per_layer_config sets each layer's heads")
    heads: list[int | None] = [None] * len(types)
    for index, override in per_layer.items() if isinstance(per_layer, dict) else [(None, None)]:
        at = int(index) if isinstance(index, (int, str)) and str(index).isdigit() else -1
        count = override.get("num_attention_heads") if isinstance(override, dict) else None
        if (
            not 0 <= at < len(types)
            or set(override or {}) != {"num_attention_heads"}
            or not isinstance(count, int)
        ):
            r.problem(p_key, f"{p_key} must map layer indices below {len(types)} to {{'num_attention_heads': N}} "
                             f"(what Step3p7TextConfig writes); got {per_layer!r}")  # fmt: skip
            return p_key, None
        heads[at] = None if count == flat else count
    return p_key, heads


def _read_step3p5(r: KeyReader) -> None:
    read_core(r, qkv="attention_bias", out="attention_bias", ffn="mlp_bias")
    read_oai_activation(r)
    g_key, gating, _ = r.value("gating")
    if not (gating is True or gating == "per-head"):
        r.problem(g_key, f"{g_key} = {gating!r}: transformers' Step3p7Attention builds a per-channel g_proj but "
                         "multiplies its output per head, which fails; only the per-head gate (true or "
                         "'per-head') runs")  # fmt: skip
    else:
        read_gate(r, "sigmoid")
    r.expect("use_bidirectional_attention", (False,), "a bidirectional window on the sliding layers")
    ignore_moe_keys(r)
    for key, reason in _ELEMENT_WISE.items():
        r.ignore(key, reason)
    for key in ("mtp_layer_types", "mtp_mlp_layer_types"):
        r.ignore(key, _MTP)
    layers = r.data.get("num_layers")
    m_key, mtp, _ = r.value("num_nextn_predict_layers")
    r.ignore(m_key, "multi-token-prediction layers the checkpoint appends; the model does not build them")
    if not isinstance(layers, int):
        return
    mtp = mtp if isinstance(mtp, int) and not isinstance(mtp, bool) and mtp > 0 else 0
    for key in ("rope_theta",):
        r.ignore(key, "per-layer rotary bases: " + hf_keys.ROPE)
    _, shared, _ = r.value("share_expert_dim")
    moe = read_moe(r, "n_routed_experts", extra={"num_shared_experts": 1, "shared_expert_dim": shared,
                                                 "expert_bias": False})  # fmt: skip
    w_key, window, _ = r.value("sliding_window")
    t_key, types = _trimmed(r, "layer_types", layers, mtp)
    if isinstance(types, list) and _SPARSE in types:
        r.problem(t_key, f"{t_key} lists {_SPARSE!r} layers: transformers' Step3p7Attention builds them without the "
                         "sparse indexer and its forward has no mask for them, so what they compute is not known; "
                         "embedcalc does not guess it (set them to 'full_attention' in a copy to count them as "
                         "transformers builds them)")  # fmt: skip
        types = None
    elif types is MISSING or types is None:
        types = [FULL] * layers
    else:
        types = checked_layer_types(r, t_key, types, layers, (SLIDING, FULL))
    k_key, kinds = _mlp_kinds(r, layers, mtp)
    if moe is None or types is None or kinds is None:
        return
    h_key, heads = _heads(r, types)
    if heads is None:
        return
    windows = [window if t == SLIDING and isinstance(window, int) else None for t in types]
    if not any(windows):
        r.ignore(w_key, "no layer uses sliding attention")
    keys = ["n_routed_experts", "num_experts_per_tok", "moe_intermediate_size", "share_expert_dim", k_key, t_key,
            w_key, h_key]  # fmt: skip
    put_layer_layout(r, moe, kinds, windows, heads, ", ".join(r.lookup(k)[0] for k in keys))


_STEP: dict[str, Any] = dict(
    vocab_size=128815, hidden_size=4096, intermediate_size=11264, num_hidden_layers=45, num_attention_heads=64,
    num_key_value_heads=8, head_dim=128, hidden_act="silu", max_position_embeddings=128000,
    tie_word_embeddings=False, attention_dropout=0.0, num_experts_per_tok=8, moe_intermediate_size=1280,
    n_routed_experts=288, share_expert_dim=1280, sliding_window=None, attention_bias=False, mlp_bias=False,
    gating=True, use_bidirectional_attention=False, num_nextn_predict_layers=0,
)  # fmt: skip
FAMILIES = (
    Family("step3p5", "Step3p7TextConfig",
           "Step3p7ForConditionalGeneration's language model and LM head (Step3p7TextModel)", "qwen3-30b-a3b",
           _STEP, _read_step3p5,
           {"num_local_experts": "n_routed_experts", "num_attention_groups": "num_key_value_heads",
            "moe_num_experts": "n_routed_experts", "moe_top_k": "num_experts_per_tok",
            "share_expert_dims": "share_expert_dim", "num_mtp_layers": "num_nextn_predict_layers"}),
)  # fmt: skip
