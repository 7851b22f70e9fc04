"""Mixtures of experts on decoders with sliding-window layers (issue 31): K-EXAONE (ExaoneMoeForCausalLM) and
Command A's MoE (Cohere2MoeForCausalLM). Read off transformers' ``modeling_exaone_moe.py`` and
``modeling_cohere2_moe.py``.

EXAONE-MoE: EXAONE 4.0's attention (no biases, q_norm / k_norm RMSNorm(head_dim), sliding layers by ``layer_types``
or ``sliding_window_pattern``, NoPE global layers) in OLMoE's pre-norm layer (``input_layernorm``,
``post_attention_layernorm``); the MLP of layer i is dense (``intermediate_size``) or, as ``mlp_layer_types`` says
(default: dense below ``first_k_dense_replace``), DeepSeek-V3's MoE: a bias-free router of ``num_experts`` (its
``e_score_correction_bias`` a buffer), experts of ``moe_intermediate_size`` and the shared experts as one MLP of
``num_shared_experts`` x ``moe_intermediate_size``.

Cohere2-MoE: Cohere's parallel block (one ``input_layernorm``, RMSNorm when ``rms_norm_eps`` is set, else a
weight-only LayerNorm: d parameters either way), biases on q/k/v/o when ``attention_bias``, ``head_dim`` (128 by
default) read as written; the dense layers (``mlp_layer_types``, else the first ``first_k_dense_replace``, a key
``Cohere2MoeConfig`` consumes and does not keep) are an MLP of ``prefix_dense_intermediate_size`` (null:
``intermediate_size``), the others a bias-free router of ``num_experts`` and experts of ``intermediate_size``, plus
``num_shared_experts`` x ``intermediate_size`` shared (summed or averaged with the routed output: element-wise).
Windows by ``layer_types``, else ``prefix_dense_sliding_window_pattern`` over the dense prefix and
``sliding_window_pattern`` over the rest (every p-th layer global).

MiMo-V2-Flash (``modeling_mimo_v2_flash.py``): pre-norm layers of standard attention whose value heads are
``v_head_dim`` wide beside keys of ``head_dim`` (v_proj kv_heads x v_head_dim, o_proj from heads x v_head_dim
without bias, q/k/v biases when ``attention_bias``); the sliding layers (``layer_types``, default: layer 0 and every
6th full, the rest sliding) have twice ``num_key_value_heads`` and a learned sink per head, and slide over
``sliding_window`` (a file's ``sliding_window_size`` s is a window of s + 1); the MLP of layer i is dense
(``intermediate_size``) or, as ``mlp_layer_types`` says (default: all but layer 0), DeepSeek-V3's MoE without shared
experts (``n_routed_experts`` of ``moe_intermediate_size``). ``attention_value_scale`` scales the values
(element-wise).
"""

from __future__ import annotations

from typing import Any

from embedcalc.config.spec_shapes import DEFAULT_BLOCK
from embedcalc.sources.hf.core import read_core
from embedcalc.sources.hf.families.exaone4 import derive_window_types
from embedcalc.sources.hf.layered import (
    FULL,
    SLIDING,
    checked_layer_types,
    ignore_moe_keys,
    layer_types,
    pattern_types,
    put_layout,
    put_window_ffn_layout,
    read_moe,
)
from embedcalc.sources.hf.reader import MISSING, Family, KeyReader


def _dense_flags(r: KeyReader, layers: int, first: Any, first_key: str) -> list[bool] | None:
    """Per layer whether its MLP is dense: ``mlp_layer_types`` ("dense" / "sparse"), else the first ``first``."""
    key, value = r.lookup("mlp_layer_types")
    if value is MISSING or value is None:
        if not isinstance(first, int) or isinstance(first, bool) or first < 0:
            r.problem(first_key, f"{first_key} = {first!r} must be a non-negative integer")
            return None
        return [i < first for i in range(layers)]
    types = checked_layer_types(r, key, value, layers, ("dense", "sparse"))
    if types is not None and first_key in r.raw:
        r.ignore(first_key, "mlp_layer_types decides which layers are MoE")
    return None if types is None else [t == "dense" for t in types]


def _window(r: KeyReader, window: Any, keys: tuple[str, ...]) -> Any:
    """The window the sliding layers keep, None when there is none or it is at least the context (it then limits
    nothing: the keys are reported as ignored, as EXAONE 4.0's reader does)."""
    context = r.data.get("max_seq_len")
    if isinstance(window, int) and isinstance(context, int) and window >= context:
        for key in keys:
            r.ignore(
                key,
                f"a window of {window} >= max_position_embeddings ({context}) limits nothing in the context",
            )
        return None
    return window


def _put(r: KeyReader, windows: list[int | None], dense: list[bool], moe: dict[str, Any],
         dense_ffn: dict[str, Any] | None, keys: tuple[str, ...]) -> None:  # fmt: skip
    names = ["prefix" if d and dense_ffn else "dense" if d else "moe" for d in dense]
    specs = {"moe": moe} | ({"prefix": dense_ffn} if dense_ffn else {})
    key = ", ".join(k for k in keys if k in r.raw) or keys[0]
    note = f"{dense.count(False)} MoE layers, {sum(1 for w in windows if w)} sliding"
    put_window_ffn_layout(r, windows, names, specs, key, note)


def _read_exaone_moe(r: KeyReader) -> None:
    read_core(r, qkv=False, out=False, ffn=False)
    r.put("attention", {"qk_norm": "head"}, "model_type", "family", "q_norm, k_norm: RMSNorm(head_dim)")
    for key in ("attention_bias", "mlp_bias"):
        r.ignore(key, "ExaoneMoeAttention and ExaoneMoeMLP build no biases whatever this says")
    ignore_moe_keys(r)
    layers = r.data.get("num_layers")
    window_key, window, _ = r.value("sliding_window")
    pattern_key, pattern, _ = r.value("sliding_window_pattern")
    s_key, shared, _ = r.value("num_shared_experts")
    extra = {"num_shared_experts": shared} if isinstance(shared, int) and shared > 0 else {}
    moe = read_moe(r, "num_experts", extra=extra)
    if not isinstance(layers, int) or moe is None:
        return
    if isinstance(pattern, str) and "layer_types" not in r.raw:
        # ExaoneMoeConfig derives layer_types with (i + 1) % sliding_window_pattern: only an integer works there
        message = "ExaoneMoeConfig derives layer_types from an integer pattern only (every p-th layer global)"
        r.problem(pattern_key, f"{pattern_key} = {pattern!r}: {message}; give an integer or list layer_types")
        return
    derived = derive_window_types(r, layers, pattern_key, pattern if window is not None else None)
    types_key, types = layer_types(r, layers, derived)
    first_key, first, _ = r.value("first_k_dense_replace")
    dense = _dense_flags(r, layers, first, first_key)
    if types is None or dense is None:
        return
    if types_key in r.raw:
        r.ignore(pattern_key, "layer_types decides which layers slide")
    capped = _window(r, window, (window_key, types_key if types_key in r.raw else pattern_key))
    windows = [capped if t == SLIDING and capped else None for t in types]
    if not any(windows) and (capped is not None or window is None):
        for key in (window_key, pattern_key):
            r.ignore(key, "no layer uses sliding attention")
    _put(
        r,
        windows,
        dense,
        moe,
        None,
        (
            "num_experts",
            "num_experts_per_tok",
            "moe_intermediate_size",
            s_key,
            "mlp_layer_types",
            first_key,
            "layer_types",
            pattern_key,
            window_key,
        ),
    )


def _cohere_windows(r: KeyReader, layers: int, first: int) -> tuple[str, list[str] | None]:
    """Cohere2MoeConfig's layer_types: the file's, else the prefix pattern over the first ``first`` layers and
    ``sliding_window_pattern`` over the rest."""
    prefix_key, prefix, _ = r.value("prefix_dense_sliding_window_pattern")
    pattern_key, pattern, _ = r.value("sliding_window_pattern")
    for key, value in ((prefix_key, prefix), (pattern_key, pattern)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            r.problem(key, f"{key} = {value!r} must be a positive integer")
            return key, None
    derived = pattern_types(first, prefix) + pattern_types(layers - first, pattern)
    types_key, types = layer_types(r, layers, derived)
    if types_key in r.raw:
        for key in (prefix_key, pattern_key):
            r.ignore(key, "layer_types decides which layers slide")
    return types_key, types


def _read_cohere2_moe(r: KeyReader) -> None:
    eps = r.raw.get("rms_norm_eps", r.family.defaults["rms_norm_eps"])  # classified with the common keys
    norm = "rmsnorm" if eps is not None else "layernorm"
    read_core(r, qkv="attention_bias", out="attention_bias", ffn=False, norm=norm, placement="parallel")
    if norm == "layernorm":
        r.fixed("norm_bias", False, "Cohere2MoeLayerNorm has a weight and no bias")
    r.fixed("parallel_norms", 1, "one input_layernorm feeds attention and the MLP")
    r.ignore("mlp_bias", "Cohere2MoeMLP builds no biases whatever this says")
    r.ignore("logit_scale", "scales the logits: no parameters or matmul FLOPs")
    for key, reason in (("shared_expert_combination_strategy", "sums or averages the shared and routed outputs"),
                        ("expert_selection_fn", "softmax or sigmoid over the router logits")):  # fmt: skip
        r.ignore(key, reason + ": element-wise only")
    ignore_moe_keys(r)
    layers, width = r.data.get("num_layers"), r.data.get("ffn_dim")
    s_key, shared, _ = r.value("num_shared_experts")
    extra = {"num_shared_experts": shared} if isinstance(shared, int) and shared > 0 else {}
    moe = read_moe(r, "num_experts", width_key=None, extra=extra)
    first_key, first = r.lookup("first_k_dense_replace")
    first = 0 if first is MISSING else first
    if not isinstance(layers, int) or moe is None:
        return
    dense = _dense_flags(r, layers, first, first_key)
    if dense is None:
        return
    # Cohere2MoeConfig derives layer_types from first_k_dense_replace (default 0) even beside mlp_layer_types
    types_key, types = _cohere_windows(r, layers, first if isinstance(first, int) else 0)
    if types is None:
        return
    window_key, window, _ = r.value("sliding_window")
    capped = _window(r, window, (window_key,))
    windows = [capped if t == SLIDING and capped else None for t in types]
    if not any(windows) and (capped is not None or window is None):
        r.ignore(window_key, "no layer uses sliding attention")
    p_key, prefix, _ = r.value("prefix_dense_intermediate_size")
    dense_ffn = {"ffn_dim": prefix} if isinstance(prefix, int) and prefix != width else None
    if prefix is None or not dense_ffn:
        r.ignore(p_key, "null or intermediate_size: the dense layers are intermediate_size wide")
    patterns = (
        ("prefix_dense_sliding_window_pattern", "sliding_window_pattern") if types_key not in r.raw else ()
    )
    _put(
        r,
        windows,
        dense,
        moe,
        dense_ffn,
        (
            "num_experts",
            "num_experts_per_tok",
            "intermediate_size",
            s_key,
            "mlp_layer_types",
            first_key,
            p_key,
            types_key,
            *patterns,
            window_key,
        ),
    )


_MIMO_UNREAD = ("first_k_dense_replace", "n_shared_experts", "use_qk_norm", "num_mtp_layers")


def _read_mimo_v2_flash(r: KeyReader) -> None:
    read_core(r, qkv="attention_bias", out=False, ffn=False)
    v_key, v_dim, _ = r.value("v_head_dim")
    r.put("attention", {"v_head_dim": v_dim}, v_key, "file" if v_key in r.raw else "default",
          "v_proj and o_proj: value heads of v_head_dim")  # fmt: skip
    r.ignore("attention_value_scale", "scales the values: element-wise only")
    for key in _MIMO_UNREAD:
        r.ignore(key, "MiMoV2FlashConfig deletes it from Glm4MoeConfig: its modeling code never reads it")
    ignore_moe_keys(r)
    moe = read_moe(r, "n_routed_experts")
    layers, kv = r.data.get("num_layers"), r.data.get("num_kv_heads")
    if moe is None or not isinstance(layers, int) or not isinstance(kv, int):
        return
    derived = [FULL if i == 0 or not (i + 1) % 6 else SLIDING for i in range(layers)]
    types_key, types = layer_types(r, layers, derived)
    dense_flags = _dense_flags(r, layers, 1, "first_k_dense_replace")  # MiMoV2FlashConfig: layer 0 dense
    w_key, window, _ = r.value("sliding_window")
    size_key, size = r.lookup("sliding_window_size")
    if isinstance(size, int) and not isinstance(size, bool):  # MiMoV2FlashConfig: sliding_window_size + 1
        w_key, window = size_key, size + 1
        r.ignore(
            "sliding_window", "sliding_window_size decides the window (MiMoV2FlashConfig: its value + 1)"
        )
    if types is None or dense_flags is None or not isinstance(window, int):
        return
    swa = {"attention": {"sliding_window": window, "sinks": True, "num_kv_heads": 2 * kv}}
    names, blocks = [], {}
    for kind, dense in zip(types, dense_flags, strict=True):
        name = ("dense" if dense else "moe") + ("_swa" if kind == SLIDING else "")
        blocks[name] = (swa if kind == SLIDING else {}) | ({} if dense else {"ffn": moe})
        names.append(DEFAULT_BLOCK if name == "dense" else name)
    keys = (
        "n_routed_experts",
        "num_experts_per_tok",
        "moe_intermediate_size",
        "mlp_layer_types",
        types_key,
        w_key,
    )
    note = (
        f"{types.count(SLIDING)} sliding layers (2 x KV heads, sinks), {dense_flags.count(False)} MoE layers"
    )
    put_layout(r, names, blocks, ", ".join(k for k in keys if k in r.raw) or keys[0], note)


_EXAONE_MOE: dict[str, Any] = dict(
    vocab_size=102400, hidden_size=4096, intermediate_size=16384, num_hidden_layers=32, num_attention_heads=32,
    num_key_value_heads=32, hidden_act="silu", max_position_embeddings=2048, tie_word_embeddings=False,
    attention_dropout=0.0, sliding_window=4096, sliding_window_pattern=4, first_k_dense_replace=1,
    moe_intermediate_size=1024, num_experts=64, num_experts_per_tok=8, num_shared_experts=1,
)  # fmt: skip
_COHERE2_MOE: dict[str, Any] = dict(
    vocab_size=256000, hidden_size=8192, intermediate_size=22528, num_hidden_layers=40, num_attention_heads=64,
    num_key_value_heads=None, head_dim=128, hidden_act="silu", max_position_embeddings=8192,
    tie_word_embeddings=True, attention_bias=False, attention_dropout=0.0, sliding_window=4096,
    num_experts_per_tok=2, num_experts=8, num_shared_experts=0, prefix_dense_sliding_window_pattern=1,
    prefix_dense_intermediate_size=None, rms_norm_eps=None, sliding_window_pattern=4,
)  # fmt: skip
_MIMO: dict[str, Any] = dict(
    vocab_size=152576, hidden_size=4096, intermediate_size=16384, moe_intermediate_size=2048, num_hidden_layers=48,
    num_attention_heads=64, num_key_value_heads=4, n_routed_experts=256, num_experts_per_tok=8, hidden_act="silu",
    max_position_embeddings=131072, tie_word_embeddings=False, attention_bias=False, attention_dropout=0.0,
    head_dim=192, v_head_dim=128, sliding_window=129,
)  # fmt: skip
FAMILIES = (
    Family("mimo_v2_flash", "MiMoV2FlashConfig", "MiMoV2FlashForCausalLM (AutoModelForCausalLM)", "qwen3-30b-a3b",
           _MIMO, _read_mimo_v2_flash, {"num_local_experts": "n_routed_experts"}),
    Family("exaone_moe", "ExaoneMoeConfig", "ExaoneMoeForCausalLM (AutoModelForCausalLM)", "qwen3-30b-a3b",
           _EXAONE_MOE, _read_exaone_moe),
    Family("cohere2_moe", "Cohere2MoeConfig", "Cohere2MoeForCausalLM (AutoModelForCausalLM)", "qwen3-30b-a3b",
           _COHERE2_MOE, _read_cohere2_moe),
)  # fmt: skip
