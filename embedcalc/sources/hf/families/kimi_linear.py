"""Kimi Linear (KimiLinearForCausalLM; Kimi Team 2025, "Kimi Linear: An Expressive, Efficient Attention
Architecture", arXiv:2510.26692; transformers' ``configuration_kimi_linear.py`` / ``modeling_kimi_linear.py``).

Layer i mixes tokens with Kimi Delta Attention (``KimiLinearDeltaAttention``, the layer model's mixer kind ``kda``)
when ``layer_types[i]`` is ``linear_attention`` and with DeepSeek-V2's multi-head latent attention without any
positional encoding (``KimiLinearAttention``: q_proj or q_a/q_b, kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj,
o_proj, biased as ``attention_bias``; no RoPE is applied, NoPE) when it is ``full_attention``. ``layer_types``
comes from the file, else from ``linear_attn_config``'s 1-indexed ``kda_layers`` / ``full_attn_layers``, else every
fourth layer after the first is full (``KimiLinearConfig.__post_init__``). The FFN of layer i is DeepSeek-V3's MoE
(``KimiLinearMoE``: a bias-free router of ``num_experts`` whose score-correction bias is a buffer, gated experts of
``moe_intermediate_size``, top ``num_experts_per_token``, one shared MLP of ``num_shared_experts`` x
``moe_intermediate_size``) when ``mlp_layer_types[i]`` is ``sparse`` (default: all but the first
``first_k_dense_replace`` layers, 1), else the gated MLP of ``intermediate_size``. The KDA layer's widths are
``linear_num_heads`` heads of ``linear_head_dim`` with a conv of ``linear_conv_kernel_dim`` taps, or
``linear_attn_config``'s ``num_heads`` / ``head_dim`` / ``short_conv_kernel_size``, which override them. Its
recurrent state is kept in float32 (``cache.update_recurrent_state(state.to(torch.float32))``).
"""

from __future__ import annotations

from typing import Any

from embedcalc.sources.hf.core import read_core
from embedcalc.sources.hf.families.deepseek import map_mla
from embedcalc.sources.hf.families.hybrid import TORCH_STATE_DTYPE, positive, replace_mapped
from embedcalc.sources.hf.layered import checked_layer_types, ignore_moe_keys, put_layout, read_moe
from embedcalc.sources.hf.reader import MISSING, Family, KeyReader, all_of

_LINEAR = {"head_dim": "linear_head_dim", "num_heads": "linear_num_heads",
           "short_conv_kernel_size": "linear_conv_kernel_dim"}  # fmt: skip
_LAYERS = ("kda_layers", "full_attn_layers")


def _linear_config(r: KeyReader) -> dict[str, Any]:
    """``linear_attn_config`` (a key the class reads from its kwargs): its known entries; any other is a problem."""
    key, value = r.lookup("linear_attn_config")
    if value is MISSING or value is None:
        return {}
    if not isinstance(value, dict):
        r.problem(key, f"{key} must be an object (kda_layers, full_attn_layers, head_dim, num_heads, ...); got "
                  f"{value!r}")  # fmt: skip
        return {}
    unknown = sorted(set(value) - set(_LINEAR) - set(_LAYERS))
    if unknown:
        r.problem(f"{key}.{unknown[0]}", f"{key}.{unknown[0]} is not a key KimiLinearConfig reads from "
                  f"{key} ({', '.join((*_LINEAR, *_LAYERS))}); embedcalc cannot tell what it changes")  # fmt: skip
    return dict(value)


def _kda(r: KeyReader, linear: dict[str, Any]) -> dict[str, Any] | None:
    spec: dict[str, Any] = {"kind": "kda", "ssm_state_dtype": TORCH_STATE_DTYPE}
    for sub, key in _LINEAR.items():
        if sub in linear:
            r.ignore(key, f"linear_attn_config.{sub} overrides it")
            value = linear[sub]
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                r.problem(f"linear_attn_config.{sub}", f"linear_attn_config.{sub} = {value!r} must be a positive "
                          "integer")  # fmt: skip
                return None
        else:
            value = positive(r, key)
            if value is None:
                return None
        spec[
            {"head_dim": "head_dim", "num_heads": "num_heads", "short_conv_kernel_size": "conv_kernel"}[sub]
        ] = value
    return spec


def _layer_types(r: KeyReader, layers: int, linear: dict[str, Any]) -> tuple[str, list[str]] | None:
    key, types = r.lookup("layer_types")
    if types is not MISSING and types is not None:
        checked = checked_layer_types(r, key, types, layers, ("linear_attention", "full_attention"))
        return None if checked is None else (key, checked)
    if all(k in linear for k in _LAYERS):
        out: list[Any] = [None] * layers
        for sub, kind in zip(_LAYERS, ("linear_attention", "full_attention"), strict=True):
            for index in linear[sub]:
                if not isinstance(index, int) or not 1 <= index <= layers:
                    r.problem(f"linear_attn_config.{sub}", f"linear_attn_config.{sub} lists {index!r}: layers are "
                              f"numbered 1..{layers} there")  # fmt: skip
                    return None
                out[index - 1] = kind
        if None in out:
            r.problem("linear_attn_config", f"linear_attn_config leaves layer {out.index(None) + 1} in neither "
                      "kda_layers nor full_attn_layers")  # fmt: skip
            return None
        return "linear_attn_config", out
    return key, ["full_attention" if i and i % 4 == 0 else "linear_attention" for i in range(layers)]


def _sparse(r: KeyReader, layers: int) -> tuple[str, list[bool]] | None:
    key, types = r.lookup("mlp_layer_types")
    first_key, first = r.lookup("first_k_dense_replace")
    if types is not MISSING and types is not None:
        if first is not MISSING:
            r.ignore(first_key, "mlp_layer_types decides which layers are MoE")
        if not isinstance(types, list) or len(types) != layers or not all_of(types, {"dense", "sparse"}):
            r.problem(key, f"mlp_layer_types must list 'dense' or 'sparse' for each of the {layers} layers; got "
                      f"{types!r}")  # fmt: skip
            return None
        return key, [t == "sparse" for t in types]
    first = 1 if first is MISSING else first  # KimiLinearConfig.__post_init__'s default
    if not isinstance(first, int) or isinstance(first, bool) or first < 0:
        r.problem(first_key, f"first_k_dense_replace = {first!r} must be a non-negative integer")
        return None
    return first_key, [i >= first for i in range(layers)]


def _read_kimi_linear(r: KeyReader) -> None:
    read_core(r, qkv="attention_bias", out="attention_bias", ffn=False)
    replace_mapped(
        r, "position", "none", "model_type", "family", "KimiLinearAttention: MLA without RoPE (NoPE)"
    )
    map_mla(r)
    # MLA's kv_b_proj expands the latent to every head: the module's shapes never read num_key_value_heads, which
    # KimiLinearConfig keeps at 32 whatever num_attention_heads is
    replace_mapped(r, "num_kv_heads", r.data.get("num_heads"), "num_attention_heads", "family",
                   "MLA: every head gets its keys and values from the latent")  # fmt: skip
    ignore_moe_keys(r)
    r.ignore(
        "moe_layer_freq", "KimiLinearConfig places MoE layers by mlp_layer_types / first_k_dense_replace"
    )
    r.ignore("pretraining_tp", "a tensor-parallel split of the original training; the same matmuls")
    linear = _linear_config(r)
    kda = _kda(r, linear)
    _, shared, _ = r.value("n_shared_experts")
    extra = {"num_shared_experts": shared} if isinstance(shared, int) and shared > 0 else {}
    moe = read_moe(r, "num_local_experts", extra=extra)
    layers = r.data.get("num_layers")
    if kda is None or moe is None or not isinstance(layers, int):
        return
    decided, sparse = _layer_types(r, layers, linear), _sparse(r, layers)
    if decided is None or sparse is None:
        return
    (types_key, types), (moe_key, is_moe) = decided, sparse
    names, variants = [], {}
    for kind, moe_layer in zip(types, is_moe, strict=True):
        name = ("kda" if kind == "linear_attention" else "mla") + ("_moe" if moe_layer else "")
        spec: dict[str, Any] = {"ffn": moe} if moe_layer else {}
        if kind == "linear_attention":
            spec["mixer"] = kda
        variants[name] = spec
        names.append("default" if name == "mla" else name)
    note = (f"{types.count('linear_attention')} Kimi Delta Attention layers, {types.count('full_attention')} MLA "
            f"(NoPE) layers; {sum(is_moe)} MoE layers")  # fmt: skip
    wanted = (types_key, moe_key, "linear_attn_config", "linear_num_heads", "linear_head_dim",
              "linear_conv_kernel_dim", "num_experts", "num_experts_per_token", "moe_intermediate_size",
              "num_shared_experts")  # fmt: skip
    put_layout(
        r, names, variants, ", ".join(dict.fromkeys(k for k in wanted if k in r.raw)) or types_key, note
    )


_DEFAULTS: dict[str, Any] = dict(
    vocab_size=163840, hidden_size=2304, intermediate_size=9216, moe_intermediate_size=1024, num_hidden_layers=27,
    num_attention_heads=32, num_key_value_heads=32, n_shared_experts=1, kv_lora_rank=512, q_lora_rank=None,
    qk_rope_head_dim=64, v_head_dim=128, qk_nope_head_dim=128, num_experts_per_tok=8, hidden_act="silu",
    max_position_embeddings=1048576, tie_word_embeddings=False, attention_bias=False, attention_dropout=0.0,
    num_local_experts=256, linear_head_dim=128, linear_num_heads=32, linear_conv_kernel_dim=4,
)  # fmt: skip
FAMILIES = (
    Family("kimi_linear", "KimiLinearConfig", "KimiLinearForCausalLM (AutoModelForCausalLM)", "deepseek-v3",
           _DEFAULTS, _read_kimi_linear,
           {"model_max_length": "max_position_embeddings", "moe_renormalize": "norm_topk_prob",
            "num_expert_group": "n_group", "num_experts": "num_local_experts",
            "num_experts_per_token": "num_experts_per_tok", "num_shared_experts": "n_shared_experts"}),
)  # fmt: skip
