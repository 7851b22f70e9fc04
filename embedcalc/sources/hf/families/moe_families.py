"""Mixture-of-experts decoders read off their transformers modules (issue 23): ERNIE-4.5 MoE, HunYuan MoE V1,
dots.llm1 and MiniMax-M2.

- ERNIE-4.5 MoE (``Ernie4_5_MoeForCausalLM``): ERNIE 4.5's attention (biases as ``use_bias``, on the LM head too);
  layer i is MoE when (i + 1) % ``moe_layer_interval`` == 0 and ``moe_layer_start_index`` <= i <=
  ``moe_layer_end_index`` (-1: the last layer), else a dense MLP of ``intermediate_size``. An MoE layer: a router
  Linear(hidden, ``moe_num_experts``) and its ``moe_statics.e_score_correction_bias``, an ``nn.Parameter`` of
  ``moe_num_experts`` (no gradient, but a parameter transformers counts: embedcalc's router bias), experts of
  ``moe_intermediate_size`` (top ``moe_k``) and ``moe_num_shared_experts`` shared experts as one MLP.
- HunYuan MoE V1 (``HunYuanMoEV1ForCausalLM``): HunYuan's attention (q/k RMSNorm(head_dim) per head), every layer a
  bias-free router ``wg`` of ``num_experts``, experts of ``intermediate_size`` (top ``moe_topk``, an int or one
  per layer) and one shared MLP of ``intermediate_size``.
- dots.llm1 (``Dots1ForCausalLM``): Qwen3's attention (q/k norms per head, biases as ``attention_bias``, layers
  from ``max_window_layers`` on sliding when ``sliding_window`` is set, or as ``layer_types`` says) and
  DeepSeek-V3's MoE (dense MLPs on the first ``first_k_dense_replace`` layers, then ``n_routed_experts`` of
  ``moe_intermediate_size`` and ``n_shared_experts`` shared; the router's correction bias is a buffer).
- MiniMax-M2 (``MiniMaxM2ForCausalLM``): attention with q/k RMSNorms over all query / all key heads
  (``FlexOlmoAttention``), no biases, partial rotary (``rotary_dim``); every layer Mixtral's MoE (router
  Linear(hidden, ``num_local_experts``), experts of ``intermediate_size``) with a correction-bias buffer.
"""

from __future__ import annotations

from typing import Any

from embedcalc.sources.hf import keys as hf_keys
from embedcalc.sources.hf.core import read_core
from embedcalc.sources.hf.families.moe import every_layer_experts
from embedcalc.sources.hf.layered import (
    FULL,
    SLIDING,
    ignore_moe_keys,
    layer_types,
    origin,
    put_layout,
    read_moe,
)
from embedcalc.sources.hf.reader import MISSING, Family, IgnoredKey, KeyReader


def _put_moe_layers(r: KeyReader, moe: dict[str, Any] | None, is_moe: list[bool], key: str,
                    windows: list[int | None] | None = None, window_key: str = "") -> None:  # fmt: skip
    """MoE on the layers ``is_moe`` marks, dense MLPs elsewhere; a sliding window on the layers ``windows`` gives
    one (one window size: the families here have one)."""
    if moe is None:
        return
    slides = [w is not None for w in windows] if windows is not None else [False] * len(is_moe)
    names = [
        ("moe" if m else "default") + ("_local" if s else "") for m, s in zip(is_moe, slides, strict=True)
    ]
    window = next((w for w in windows or [] if w is not None), None)
    local = {"attention": {"sliding_window": window}} if window is not None else {}
    blocks = {"moe": {"ffn": moe}, "local": local, "moe_local": {"ffn": moe} | local}
    keys = f"{key}, {window_key}" if window is not None else key
    note = f"{sum(is_moe)} MoE layers, {len(is_moe) - sum(is_moe)} dense" + (
        f"; {sum(slides)} sliding-window layers of {window}" if window is not None else ""
    )
    put_layout(r, names, blocks, keys, note)


# --- ERNIE-4.5 MoE ------------------------------------------------------------------------------------------------


def _read_ernie4_5_moe(r: KeyReader) -> None:
    read_core(r, qkv="use_bias", out="use_bias", ffn="use_bias")
    bias_key, bias, _ = r.value("use_bias")
    r.put(
        "lm_head_bias", bias is True, bias_key, origin(r, bias_key), "Ernie4_5_MoeForCausalLM: lm_head bias"
    )
    ignore_moe_keys(r)
    r.ignore("moe_norm_min", "a floor of the routing weights' normaliser; element-wise only")
    s_key, shared, _ = r.value("moe_num_shared_experts")
    # moe_statics.e_score_correction_bias: a Parameter of E; the stacked experts have no biases whatever use_bias says
    extra: dict[str, Any] = {"router_bias": True, "expert_bias": False}
    if isinstance(shared, int) and shared > 0:
        extra["num_shared_experts"] = shared
    moe = read_moe(r, "moe_num_experts", top_k_key="moe_k", extra=extra)
    layers = r.data.get("num_layers")
    keys = [r.value(k) for k in ("moe_layer_start_index", "moe_layer_end_index", "moe_layer_interval")]
    (start_key, start, _), (end_key, end, _), (step_key, step, _) = keys
    if not isinstance(layers, int) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in (start, end, step)
    ):
        for key, value, _ in keys:
            if not isinstance(value, int) or isinstance(value, bool):
                r.problem(
                    key, f"{key} = {value!r}: ERNIE-4.5 MoE reads one integer here (not a per-modality list)"
                )
        return
    if step < 1:
        r.problem(step_key, f"{step_key} = {step!r} must be a positive integer")
        return
    last = layers - 1 if end == -1 else end
    is_moe = [(i + 1) % step == 0 and start <= i <= last for i in range(layers)]
    _put_moe_layers(r, moe, is_moe, f"moe_num_experts, moe_k, moe_intermediate_size, {s_key}, {start_key}, "
                                    f"{end_key}, {step_key}")  # fmt: skip


# --- HunYuan MoE V1 -----------------------------------------------------------------------------------------------


def _read_hunyuan_moe(r: KeyReader) -> None:
    read_core(r, qkv="attention_bias", out="attention_bias", ffn=False)
    r.fixed("attention", {"qk_norm": "head"}, "query_layernorm, key_layernorm: RMSNorm(head_dim)")
    for key, reason in (("eod_token_id", hf_keys.TOKEN_ID), ("sep_token_id", hf_keys.TOKEN_ID),
                        ("pretraining_tp", "tensor-parallel split; the same FLOPs")):  # fmt: skip
        r.ignore(key, reason)
    ignore_moe_keys(r)
    width = r.data.get("ffn_dim")
    for key, value, change in (("moe_intermediate_size", width, "experts of another width than intermediate_size"),
                               ("num_shared_expert", 1, "other than one shared MLP"),
                               ("use_mixed_mlp_moe", True, "a model without the shared MLP"),
                               ("use_qk_norm", True, "attention without q/k norms"),
                               ("use_cla", False, "cross-layer attention (KV shared across layers)")):  # fmt: skip
        _uniform(r, key, value, change)
    layers = r.data.get("num_layers")
    k_key, top_k, _ = r.value("moe_topk")
    e_key, experts, _ = r.value("num_experts")
    per_layer = top_k if isinstance(top_k, list) else [top_k] * layers if isinstance(layers, int) else []
    if (
        not isinstance(layers, int)
        or len(per_layer) != layers
        or not all(isinstance(k, int) and not isinstance(k, bool) and k >= 1 for k in per_layer)
    ):
        r.problem(k_key, f"{k_key} = {top_k!r}: one positive integer, or one for each of the {layers} layers")
        return
    if not isinstance(experts, int) or isinstance(experts, bool) or experts < 1:
        r.problem(e_key, f"{e_key} = {experts!r}: a mixture of experts needs a positive num_experts")
        return
    moe = {"kind": "moe", "num_experts": experts, "expert_dim": width, "num_shared_experts": 1,
           "shared_expert_dim": width}  # fmt: skip
    kinds = sorted(set(per_layer), key=per_layer.index)
    key = f"{e_key}, {k_key}, intermediate_size"
    if len(kinds) == 1:
        r.put(
            "ffn", moe | {"top_k": kinds[0]}, key, origin(r, key), "every layer: router, experts, shared MLP"
        )
        return
    put_layout(r, [f"top{k}" for k in per_layer], {f"top{k}": {"ffn": moe | {"top_k": k}} for k in kinds}, key,
               "every layer MoE; moe_topk per layer")  # fmt: skip


def _uniform(r: KeyReader, key: str, value: Any, change: str) -> None:
    """A key of HunYuan's original code that transformers' class does not read: harmless when it says what the
    class builds (``value``, or a list of it per layer), else refused."""
    written, found = r.lookup(key)
    if found is MISSING:
        return
    if found == value or (isinstance(found, list) and found and all(v == value for v in found)):
        r.ignored.append(IgnoredKey(written, found, f"{written}: what HunYuanMoEV1ForCausalLM builds anyway"))
    else:
        r.problem(written, f"{written} = {found!r} is not modelled: it asks for {change}, which transformers' "
                           "HunYuanMoEV1ForCausalLM does not build")  # fmt: skip


# --- dots.llm1 --------------------------------------------------------------------------------------------------


def _read_dots1(r: KeyReader) -> None:
    read_core(r, qkv="attention_bias", out="attention_bias", ffn=False)
    r.fixed("attention", {"qk_norm": "head"}, "Qwen3Attention: q_norm, k_norm RMSNorm(head_dim)")
    layers = r.data.get("num_layers")
    if not isinstance(layers, int):
        return
    w_key, window, _ = r.value("sliding_window")
    f_key, first, _ = r.value("max_window_layers")
    derive = [SLIDING if window is not None and isinstance(first, int) and i >= first else FULL
              for i in range(layers)]  # fmt: skip
    t_key, types = layer_types(r, layers, derive)
    if types is None:
        return
    windows = [window if t == SLIDING else None for t in types]
    if not any(windows):
        for key in (w_key, f_key, t_key):
            r.ignore(key, "no layer slides")
    else:
        r.ignore(f_key if t_key in r.raw else t_key, "decides which layers slide (mapped as layers)")
    ignore_moe_keys(r)
    r.ignore(
        "moe_layer_freq", "transformers places MoE layers by first_k_dense_replace alone and never reads it"
    )
    s_key, shared, _ = r.value("n_shared_experts")
    extra = {"num_shared_experts": shared} if isinstance(shared, int) and shared > 0 else {}
    moe = read_moe(r, "n_routed_experts", extra=extra)
    k_key, dense, _ = r.value("first_k_dense_replace")
    if not isinstance(dense, int):
        r.problem(k_key, f"{k_key} = {dense!r} must be an integer")
        return
    is_moe = [i >= dense for i in range(layers)]
    _put_moe_layers(r, moe, is_moe, f"n_routed_experts, num_experts_per_tok, moe_intermediate_size, {s_key}, {k_key}",
                    windows, f"{w_key}, {f_key}")  # fmt: skip


# --- MiniMax-M2 -------------------------------------------------------------------------------------------------


def _read_minimax_m2(r: KeyReader) -> None:
    read_core(r, qkv=False, out=False, ffn=False)
    r.fixed(
        "attention",
        {"qk_norm": "full"},
        "q_norm RMSNorm(heads x head_dim), k_norm RMSNorm(kv_heads x head_dim)",
    )
    for key in ("rotary_dim", "partial_rotary_factor"):
        r.ignore(key, "partial rotary positions: " + hf_keys.ROPE)
    every_layer_experts(r)  # Mixtral's; its e_score_correction_bias is a buffer


_ERNIE_MOE: dict[str, Any] = dict(
    vocab_size=103424, hidden_size=2560, intermediate_size=12288, num_hidden_layers=28, num_attention_heads=20,
    num_key_value_heads=4, hidden_act="silu", max_position_embeddings=131072, tie_word_embeddings=True,
    use_bias=False, moe_intermediate_size=1536, moe_k=6, moe_num_experts=64, moe_num_shared_experts=2,
    moe_layer_start_index=1, moe_layer_end_index=-1, moe_layer_interval=1, attention_dropout=0.0,
)  # fmt: skip
_HUNYUAN_MOE: dict[str, Any] = dict(
    vocab_size=290943, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
    num_key_value_heads=None, hidden_act="silu", max_position_embeddings=2048, tie_word_embeddings=False,
    attention_bias=False, attention_dropout=0.0, num_experts=1, moe_topk=1, head_dim=None,
)  # fmt: skip
_DOTS1: dict[str, Any] = dict(
    vocab_size=152064, hidden_size=4608, intermediate_size=10944, moe_intermediate_size=1408, num_hidden_layers=62,
    num_attention_heads=32, num_key_value_heads=32, n_shared_experts=None, n_routed_experts=None,
    num_experts_per_tok=None, first_k_dense_replace=0, hidden_act="silu", max_position_embeddings=2048,
    tie_word_embeddings=False, attention_bias=False, attention_dropout=0.0, sliding_window=4096,
    max_window_layers=62,
)  # fmt: skip
_MINIMAX_M2: dict[str, Any] = dict(
    vocab_size=200064, hidden_size=3072, intermediate_size=1536, num_hidden_layers=62, num_attention_heads=48,
    num_key_value_heads=8, head_dim=128, hidden_act="silu", max_position_embeddings=196608,
    tie_word_embeddings=False, attention_dropout=0.0, num_experts_per_tok=8, num_local_experts=256,
)  # fmt: skip
FAMILIES = (
    Family("ernie4_5_moe", "Ernie4_5_MoeConfig", "Ernie4_5_MoeForCausalLM (AutoModelForCausalLM)", "mixtral-8x7b",
           _ERNIE_MOE, _read_ernie4_5_moe, {"num_experts": "moe_num_experts", "num_experts_per_tok": "moe_k"}),
    Family("hunyuan_v1_moe", "HunYuanMoEV1Config", "HunYuanMoEV1ForCausalLM (AutoModelForCausalLM)", "mixtral-8x7b",
           _HUNYUAN_MOE, _read_hunyuan_moe, {"num_experts_per_tok": "moe_topk", "num_local_experts": "num_experts"}),
    Family("dots1", "Dots1Config", "Dots1ForCausalLM (AutoModelForCausalLM)", "deepseek-v3", _DOTS1, _read_dots1,
           {"num_local_experts": "n_routed_experts"}),
    Family("minimax_m2", "MiniMaxM2Config", "MiniMaxM2ForCausalLM (AutoModelForCausalLM)", "mixtral-8x7b",
           _MINIMAX_M2, _read_minimax_m2, {"num_experts": "num_local_experts"}),
)  # fmt: skip
