"""MiniMax-M3's text model (``minimax_m3_vl_text``: MiniMaxM3VLForCausalLM, the language model of
``MiniMaxM3SparseForConditionalGeneration``), read off transformers' ``modeling_minimax_m3_vl.py``.

Pre-norm layers of bias-free GQA attention (q/k/v/o, ``head_dim`` wide heads, q_norm / k_norm over head_dim:
Gemma-style RMSNorms, ``1 + weight``, the same parameter count), partial rotary positions (``rotary_dim``).
``layer_types`` says which layers are ``minimax_m3_sparse``: those carry MiniMax's block indexer
(``MiniMaxM3VLIndexer``: ``index_n_heads`` heads of ``index_head_dim``, q_proj and k_proj from hidden_size with
their RMSNorms, no head weights; blocks of ``index_block_size`` keys, ``index_topk_blocks`` kept per query), read
as standard attention with ``index_block_size`` (block-sparse; the indexer's key of every token is cached beside K
and V). ``mlp_layer_types`` says which layers are MoE (default all): a bias-free router of ``num_local_experts``
(its ``e_score_correction_bias`` a buffer), experts of ``intermediate_size`` and one shared expert of
``shared_intermediate_size``; the dense layers are an MLP of ``dense_intermediate_size``. Every MLP is the clamped
SwiGLU of gpt-oss (``swiglu_alpha``, ``swiglu_limit``: element-wise), gated, fused gate_up (the same parameters).
Old hub files keep the indexer's keys in ``sparse_attention_config`` and the MoE layers in ``moe_layer_freq``,
which the class reads once and drops.
"""

from __future__ import annotations

from typing import Any

from embedcalc.sources.hf import keys as hf_keys
from embedcalc.sources.hf.core import read_core
from embedcalc.sources.hf.layered import checked_layer_types, ignore_moe_keys, put_layout, read_moe
from embedcalc.sources.hf.reader import MISSING, Family, KeyReader

SPARSE = "minimax_m3_sparse"  # transformers' layer type of a layer with a block indexer
# the indexer's keys and their names in an old file's sparse_attention_config (MiniMaxM3VLTextConfig)
_LEGACY = {
    "index_n_heads": "sparse_num_index_heads",
    "index_head_dim": "sparse_index_dim",
    "index_block_size": "sparse_block_size",
    "index_topk_blocks": "sparse_topk_blocks",
    "index_local_blocks": "sparse_local_block",
}


def _indexer(r: KeyReader, keys: list[str]) -> dict[str, Any] | None:
    """The block indexer's attention fields, from the flat keys or an old file's ``sparse_attention_config``; the
    keys read are added to ``keys``."""
    _, legacy = r.lookup("sparse_attention_config")
    legacy = legacy if isinstance(legacy, dict) else {}
    spec: dict[str, Any] = {}
    for flat, name in (("index_n_heads", "index_heads"), ("index_head_dim", "index_head_dim"),
                       ("index_topk_blocks", "index_topk"), ("index_block_size", "index_block_size")):  # fmt: skip
        key, value, _ = r.value(flat)
        if _LEGACY[flat] in legacy:
            key, value = f"sparse_attention_config.{_LEGACY[flat]}", legacy[_LEGACY[flat]]
            r.ignore(flat, "sparse_attention_config sets it")
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            r.problem(key, f"{key} = {value!r}: the block indexer needs a positive integer")
            return None
        spec[name] = value
        keys.append(key)
    key, local, _ = r.value("index_local_blocks")
    if _LEGACY["index_local_blocks"] in legacy:
        key, local = "sparse_attention_config.sparse_local_block", legacy[_LEGACY["index_local_blocks"]]
        r.ignore("index_local_blocks", "sparse_attention_config sets it")
    if not isinstance(local, int) or isinstance(local, bool) or local < 1:
        r.problem(key, f"{key} = {local!r}: embedcalc counts the keys of the blocks a query keeps with its own block "
                       "always among them (1 or more local blocks); with none, which blocks a query sees depends "
                       "on the data")  # fmt: skip
        return None
    r.ignore(key, "local blocks are among the index_topk_blocks kept: the same keys per query")
    return spec


def _per_layer(
    r: KeyReader, name: str, layers: int, kinds: tuple[str, str], legacy: str, keys: list[str]
) -> list[bool] | None:
    """Per layer whether it is the second of ``kinds`` (``layer_types``: sparse attention, ``mlp_layer_types``:
    MoE), from the list, else an old file's 0/1 list ``legacy`` (the key read is added to ``keys``); None without
    either, or when malformed (a problem is recorded)."""
    key, value = r.lookup(name)
    if value is MISSING or value is None:
        l_key, flags = r.lookup(legacy) if "." not in legacy else _nested(r, legacy)
        if flags is MISSING or flags is None:
            return None
        if not isinstance(flags, list) or len(flags) != layers:
            r.problem(l_key, f"{l_key} must give one 0 or 1 per layer ({layers}); got {flags!r}")
            return None
        keys.append(l_key)
        return [bool(f) for f in flags]
    types = checked_layer_types(r, key, value, layers, kinds)
    keys.append(key)
    return None if types is None else [t == kinds[1] for t in types]


def _nested(r: KeyReader, path: str) -> tuple[str, Any]:
    outer, inner = path.split(".", 1)
    _, value = r.lookup(outer)
    return path, value.get(inner, MISSING) if isinstance(value, dict) else MISSING


def read_oai_activation(r: KeyReader) -> None:
    """The checkpoint's ``hidden_act: swigluoai``, which the config class replaces by silu (its MLPs compute the
    clamped SwiGLU inline): a gated MLP, mapped as swiglu like the class's own silu."""
    key, value = r.lookup("hidden_act")
    if value == "swigluoai":
        r.problems = [p for p in r.problems if p.path != key]
        r.put(
            "activation",
            "swiglu",
            key,
            "file",
            f"{r.family.config_class} sets silu: the clamped SwiGLU, gated",
        )


def _read_minimax_m3(r: KeyReader) -> None:
    read_core(r, qkv=False, out=False, ffn=False)
    read_oai_activation(r)
    for key in ("swiglu_alpha", "swiglu_limit"):
        r.ignore(key, "the clamped SwiGLU's gain and bound: element-wise only")
    for key in ("rotary_dim", "partial_rotary_factor"):
        r.ignore(key, "partial rotary positions: " + hf_keys.ROPE)
    ignore_moe_keys(r)
    r.fixed("attention", {"qk_norm": "head"}, "q_norm, k_norm: RMSNorm(head_dim)")
    layers = r.data.get("num_layers")
    if not isinstance(layers, int):
        return
    d_key, dense, _ = r.value("dense_intermediate_size")
    r.put("ffn_dim", dense, d_key, "file" if d_key in r.raw else "default", "the dense layers' MLP")
    r.ignore("intermediate_size", "the experts' width (read with the MoE layers)")
    keys = [r.value(k)[0] for k in ("num_local_experts", "num_experts_per_tok", "intermediate_size",
                                    "shared_intermediate_size")]  # fmt: skip
    moe = read_moe(
        r,
        "num_local_experts",
        width_key="intermediate_size",
        extra={"num_shared_experts": 1, "shared_expert_dim": r.value("shared_intermediate_size")[1]},
    )
    sparse = _per_layer(r, "layer_types", layers, ("full_attention", SPARSE),
                        "sparse_attention_config.sparse_attention_freq", keys)  # fmt: skip
    is_moe = _per_layer(r, "mlp_layer_types", layers, ("dense", "sparse"), "moe_layer_freq", keys)
    if is_moe is None:
        is_moe = [True] * layers
    if sparse is None:
        sparse = [False] * layers
    indexer = _indexer(r, keys) if any(sparse) else None
    if not any(sparse):
        for key in (*_LEGACY, "sparse_attention_config"):
            r.ignore(key, "no layer is minimax_m3_sparse: no indexer")
    else:
        r.ignore("sparse_attention_config", "its indexer keys and layer list are read")
    if moe is None or (any(sparse) and indexer is None):
        return
    names = [
        ("moe" if m else "dense") + ("_sparse" if s else "") for m, s in zip(is_moe, sparse, strict=True)
    ]
    attention = {"attention": indexer} if indexer else {}
    variants = {
        "moe": {"ffn": moe},
        "dense": {},
        "moe_sparse": {"ffn": moe} | attention,
        "dense_sparse": attention,
    }
    names = ["default" if n == "dense" else n for n in names]
    put_layout(r, names, {k: v for k, v in variants.items() if k != "dense"}, ", ".join(keys),
               f"{sum(is_moe)} MoE layers, {sum(sparse)} block-sparse")  # fmt: skip


_M3: dict[str, Any] = dict(
    vocab_size=200064, hidden_size=6144, intermediate_size=3072, num_hidden_layers=60, num_attention_heads=64,
    num_key_value_heads=4, head_dim=128, hidden_act="silu", max_position_embeddings=524288,
    tie_word_embeddings=False, attention_dropout=0.0, num_experts_per_tok=4, num_local_experts=128,
    dense_intermediate_size=12288, shared_intermediate_size=3072, rotary_dim=64, index_n_heads=4,
    index_head_dim=128, index_block_size=128, index_topk_blocks=16, index_local_blocks=1,
)  # fmt: skip
FAMILIES = (
    Family("minimax_m3_vl_text", "MiniMaxM3VLTextConfig", "MiniMaxM3VLForCausalLM (AutoModelForCausalLM)",
           "mixtral-8x7b", _M3, _read_minimax_m3, {"num_experts": "num_local_experts"}),
)  # fmt: skip
