"""Qwen3 (Qwen3ForCausalLM), Qwen3-MoE (Qwen3MoeForCausalLM) and Qwen2-MoE / Qwen1.5-MoE (Qwen2MoeForCausalLM).

Qwen3: LLaMA-shaped with q_norm / k_norm RMSNorm(head_dim) and an explicit head_dim; biases on q/k/v/o only when
``attention_bias``. Qwen3-MoE: the same attention, and an MoE MLP (bias-free router ``gate``, experts of
``moe_intermediate_size``) on layer i unless i is in ``mlp_only_layers`` or (i + 1) % ``decoder_sparse_step``
!= 0, where a dense MLP of ``intermediate_size`` stands instead. Qwen2-MoE: Qwen2's attention (q/k/v biases, none
on o), the same layer rule, plus one shared expert of ``shared_expert_intermediate_size`` behind a sigmoid gate
Linear(hidden, 1). Sliding windows: layer i slides when ``use_sliding_window`` and i >= ``max_window_layers`` (or
as ``layer_types`` says). Qwen team 2024/2025; transformers' ``modeling_qwen3.py``, ``modeling_qwen3_moe.py``,
``modeling_qwen2_moe.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from embedcalc.sources.hf.core import read_core
from embedcalc.sources.hf.layered import (
    FULL,
    SLIDING,
    ignore_moe_keys,
    int_list,
    layer_types,
    put_window_ffn_layout,
    read_moe,
)
from embedcalc.sources.hf.reader import Family, KeyReader

Rule = Callable[[int, bool, int], bool]  # (layer, use_sliding_window, max_window_layers) -> slides


def qwen3_rule(i: int, use: bool, first: int) -> bool:
    return use and i >= first  # Qwen3Config: layers from max_window_layers on


def _qwen2_moe_rule(i: int, use: bool, first: int) -> bool:
    return use and bool((i + 1) % 2) and i < first  # Qwen2MoeConfig: even layers below max_window_layers


def _all_rule(i: int, use: bool, first: int) -> bool:
    return use  # Qwen3MoeConfig: every layer when use_sliding_window (max_window_layers is not read)


def _windows(r: KeyReader, layers: int, rule: Rule) -> list[int | None] | None:
    """The sliding window of each layer (None: full attention), by the family's rule or ``layer_types``."""
    use_key, use, _ = r.value("use_sliding_window")
    window_key, window, _ = r.value("sliding_window")
    # every Qwen config: sliding_window = ... if use_sliding_window else None
    window = window if use is True else None
    first_key, first = "max_window_layers", 0
    if rule is _all_rule:
        r.ignore(first_key, "Qwen3MoeConfig does not read max_window_layers")
    else:
        first_key, first, _ = r.value(first_key)
    derive = [SLIDING if window and rule(i, use is True, first) else FULL for i in range(layers)]
    types_key, types = layer_types(r, layers, derive) if rule is not _all_rule else ("layer_types", derive)
    if types is None:
        return None
    if SLIDING not in types or not window:
        reason = "no layer slides (use_sliding_window is not true)" if use is not True else "no layer slides"
        for key in (use_key, window_key, first_key, types_key):
            r.ignore(key, reason)
        return [None] * layers
    for key in (use_key, first_key):
        r.ignore(key, "decides which layers slide (mapped as layers)")
    return [window if t == SLIDING else None for t in types]


def moe_flags(r: KeyReader, layers: int) -> list[bool] | None:
    """Which layers are MoE by Qwen's rule (every ``decoder_sparse_step``-th layer not in ``mlp_only_layers``);
    None when either key is malformed (a problem is recorded)."""
    step_key, step, _ = r.value("decoder_sparse_step")
    only_key, only, _ = r.value("mlp_only_layers")
    dense = [] if only is None else int_list(r, only_key, only, layers)
    if dense is None or not isinstance(step, int) or step < 1:
        if not isinstance(step, int) or step < 1:
            r.problem(step_key, f"{step_key} = {step!r} must be a positive integer")
        return None
    return [i not in dense and (i + 1) % step == 0 for i in range(layers)]


def put_qwen_layout(r: KeyReader, moe: dict[str, Any] | None, moe_key: str, rule: Rule) -> None:
    layers = r.data.get("num_layers")
    if not isinstance(layers, int):
        return
    windows = _windows(r, layers, rule)
    flags = moe_flags(r, layers) if moe is not None else [False] * layers
    if windows is None or flags is None:
        return
    wanted = [*moe_key.split(", "), "decoder_sparse_step", "mlp_only_layers", "layer_types", "sliding_window"]
    key = ", ".join(k for k in wanted if k in r.raw) or moe_key
    ffns = ["moe" if is_moe and moe is not None else "dense" for is_moe in flags]
    put_window_ffn_layout(r, windows, ffns, {"moe": moe or {}}, key)


def _qk_norm(r: KeyReader) -> None:
    r.put("attention", {"qk_norm": "head"}, "model_type", "family", "q_norm, k_norm: RMSNorm(head_dim)")


def _read_qwen3(r: KeyReader) -> None:
    read_core(r, qkv="attention_bias", out="attention_bias", ffn=False)
    _qk_norm(r)
    put_qwen_layout(r, None, "layer_types", qwen3_rule)


def read_qwen3_moe(r: KeyReader) -> None:
    read_core(r, qkv="attention_bias", out="attention_bias", ffn=False)
    _qk_norm(r)
    ignore_moe_keys(r)
    moe = read_moe(r, "num_experts")
    experts_key = r.lookup("num_experts")[0]  # num_local_experts, as transformers 5 writes it
    put_qwen_layout(r, moe, f"{experts_key}, num_experts_per_tok, moe_intermediate_size", _all_rule)


def _read_qwen2_moe(r: KeyReader) -> None:
    read_core(r, qkv=False, out=False, ffn=False)
    q_key, qkv_bias, _ = r.value("qkv_bias")
    r.put(
        "qkv_bias", qkv_bias, q_key, "file" if q_key in r.raw else "default", "Qwen2MoeAttention: q/k/v bias"
    )
    r.ignore("attention_bias", "Qwen2MoeAttention reads qkv_bias; o_proj never has a bias")
    ignore_moe_keys(r)
    _, shared, _ = r.value("shared_expert_intermediate_size")
    extra = (
        {"num_shared_experts": 1, "shared_expert_dim": shared, "shared_expert_gate": True} if shared else {}
    )
    moe = read_moe(r, "num_experts", extra=extra)
    put_qwen_layout(
        r,
        moe,
        "num_experts, num_experts_per_tok, moe_intermediate_size, shared_expert_intermediate_size",
        _qwen2_moe_rule,
    )


_QWEN3_WINDOW: dict[str, Any] = dict(use_sliding_window=False, sliding_window=4096, max_window_layers=28)
_BASE: dict[str, Any] = dict(
    vocab_size=151936, hidden_act="silu", max_position_embeddings=32768, tie_word_embeddings=False,
    attention_dropout=0.0,
)  # fmt: skip
FAMILIES = (
    Family("qwen3", "Qwen3Config", "Qwen3ForCausalLM (AutoModelForCausalLM)", "qwen3-8b",
           _BASE | _QWEN3_WINDOW | dict(hidden_size=4096, intermediate_size=22016, num_hidden_layers=32,
                                        num_attention_heads=32, num_key_value_heads=32, head_dim=128,
                                        attention_bias=False), _read_qwen3),
    Family("qwen3_moe", "Qwen3MoeConfig", "Qwen3MoeForCausalLM (AutoModelForCausalLM)", "qwen3-30b-a3b",
           _BASE | dict(use_sliding_window=False, sliding_window=4096, hidden_size=2048, intermediate_size=6144,
                        num_hidden_layers=24, num_attention_heads=32,
                        num_key_value_heads=4, attention_bias=False, decoder_sparse_step=1,
                        moe_intermediate_size=768, num_experts_per_tok=8, num_experts=128, mlp_only_layers=None),
           read_qwen3_moe, {"num_local_experts": "num_experts"}),
    Family("qwen2_moe", "Qwen2MoeConfig", "Qwen2MoeForCausalLM (AutoModelForCausalLM)", "qwen3-30b-a3b",
           _BASE | _QWEN3_WINDOW | dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=24,
                                        num_attention_heads=16, num_key_value_heads=16,
                                        decoder_sparse_step=1, moe_intermediate_size=1408,
                                        shared_expert_intermediate_size=5632, num_experts_per_tok=4,
                                        num_experts=60, mlp_only_layers=None, qkv_bias=True),
           _read_qwen2_moe),
)  # fmt: skip
