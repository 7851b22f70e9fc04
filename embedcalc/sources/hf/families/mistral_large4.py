"""Mistral Large 4's text model (``mistral_large4_text``: MistralLarge4TextModel, the language model of
MistralLarge4ForConditionalGeneration, and ``mistral_large4`` files' ``text_config``), read off transformers'
``modular_mistral_large4.py``.

GLM-5's stack (DeepSeek sparse attention, ``indexer_types`` sharing the previous selection, dense MLPs on the
first ``first_k_dense_replace`` layers or as ``mlp_layer_types`` says, then routed and shared experts) with four
changes: the attention has no query rank (one ``q_proj``) and its lightning indexer reads the input through a
LayerNorm (``q_input_norm``, weight and bias) into ``wq_b``; both scale their queries per head by a learned
scale x log(position + 1) + bias (``MistralLarge4TextSoftmaxScaling``: attention ``query_scale``, 2 x heads and
2 x index heads per layer); the layers ``no_rope_layers`` marks 0 (default every 4th) have no rotary dims, their
query/key heads all ``qk_nope_head_dim + qk_rope_head_dim`` nope channels (``kv_a_proj_with_mqa`` outputs
``kv_lora_rank`` alone); and the rotary embedding learns a log-scale per frequency (``alpha``,
qk_rope_head_dim / 2 values: ``rope_scale``). ``kv_source_layers`` that point a layer at an earlier one's latent KV
are refused (that layer has no ``kv_a_proj_with_mqa`` and caches nothing of its own, which embedcalc's MLA layer
cannot say yet). ``final_logit_softcapping`` is element-wise.
"""

from __future__ import annotations

from typing import Any

from embedcalc.sources.hf import keys as hf_keys
from embedcalc.sources.hf.core import read_core
from embedcalc.sources.hf.families.deepseek import (
    _INDEXER,
    V32_ALIASES,
    _indexer_types,
    _mlp_layer_types,
    map_mla,
)
from embedcalc.sources.hf.layered import ignore_moe_keys, put_layout, read_moe
from embedcalc.sources.hf.reader import MISSING, Family, KeyReader


def _flags(r: KeyReader, name: str, layers: int, default: list[int]) -> tuple[str, list[int] | None]:
    key, value = r.lookup(name)
    if value is MISSING or value is None:
        return key, default
    if not isinstance(value, list) or len(value) < layers or not all(isinstance(v, int) for v in value):
        r.problem(key, f"{key} must give an integer for each of the {layers} layers; got {value!r}")
        return key, None
    return key, value[:layers]


def _read_mistral_large4(r: KeyReader) -> None:
    read_core(r, qkv="attention_bias", out="attention_bias", ffn=False)
    map_mla(r, "sparse", _INDEXER)
    r.put("attention", dict(r.data["attention"]) | {"query_scale": True}, "model_type", "family",
          "MistralLarge4TextSoftmaxScaling on the attention's and the indexer's queries")  # fmt: skip
    r.fixed("rope_scale", True, "MistralLarge4TextRotaryEmbedding.alpha: a log-scale per rotary frequency")
    r.ignore("final_logit_softcapping", "a tanh cap on the logits: element-wise only")
    ignore_moe_keys(r)
    r.ignore("layer_types", "every layer indexed (DSA) attention, as the class writes it")
    layers = r.data.get("num_layers")
    if not isinstance(layers, int):
        return
    r.ignore("no_rope_layer_interval", "no_rope_layers, which the class derives from it, is read")
    interval = r.raw.get("no_rope_layer_interval", 4)
    interval = interval if isinstance(interval, int) and interval > 0 else 4
    n_key, rope = _flags(r, "no_rope_layers", layers, [int((i + 1) % interval != 0) for i in range(layers)])
    s_key, sources = _flags(r, "kv_source_layers", layers, list(range(layers)))
    if sources == list(range(layers)):
        r.ignore(s_key, "every layer computes and caches its own latent KV")
    elif sources is not None:
        r.problem(s_key, f"{s_key} = {sources!r} points layers at an earlier layer's latent KV; a layer that reuses "
                         "another's latent (no kv_a_proj_with_mqa, no cache of its own) is not in embedcalc's MLA "
                         "layer yet")  # fmt: skip
    shared = _indexer_types(r, layers)
    s_key, n_shared, _ = r.value("n_shared_experts")
    extra = {"num_shared_experts": n_shared} if isinstance(n_shared, int) and n_shared > 0 else {}
    moe = read_moe(r, "n_routed_experts", extra=extra)
    k_key, first, _ = r.value("first_k_dense_replace")
    sparse = _mlp_layer_types(r, layers, k_key)
    if sparse is not None:
        k_key = "mlp_layer_types"
    elif isinstance(first, int):
        sparse = [i >= first for i in range(layers)]
    if moe is None or rope is None or sources is None or sparse is None:
        return
    spec = r.data["attention"]
    nope = {"kind": "sparse", "qk_nope_head_dim": spec.get("qk_nope_head_dim", 0) + spec.get("qk_rope_head_dim", 0),
            "qk_rope_head_dim": 0}  # fmt: skip
    selection = shared[1] if shared is not None else [False] * layers
    names, blocks = [], {}
    for is_moe, uses_rope, reuses in zip(sparse, rope, selection, strict=True):
        name = ("moe" if is_moe else "dense") + ("" if uses_rope else "_nope") + ("_shared" if reuses else "")
        attention = ({} if uses_rope else nope) | ({"kind": "sparse", "index_shared": True} if reuses else {})
        blocks[name] = ({"attention": attention} if attention else {}) | ({"ffn": moe} if is_moe else {})
        names.append("default" if name == "dense" else name)
    keys = ["n_routed_experts", "num_experts_per_tok", "moe_intermediate_size", s_key, k_key, n_key]
    keys += [shared[0]] if shared is not None else []
    put_layout(r, names, {k: v for k, v in blocks.items() if k != "dense"},
               ", ".join(r.lookup(k)[0] for k in keys),
               f"{sum(sparse)} MoE layers, {rope.count(0)} without rotary dims")  # fmt: skip
    for key in ("rope_theta", "rope_scaling"):
        r.ignore(key, hf_keys.ROPE)


_ML4: dict[str, Any] = dict(
    vocab_size=204800, hidden_size=6144, intermediate_size=24576, moe_intermediate_size=6144, num_hidden_layers=72,
    num_attention_heads=64, num_key_value_heads=64, n_shared_experts=1, n_routed_experts=128, kv_lora_rank=512,
    qk_rope_head_dim=64, v_head_dim=128, qk_nope_head_dim=64, num_experts_per_tok=4, hidden_act="silu",
    max_position_embeddings=1048576, tie_word_embeddings=False, attention_bias=False, attention_dropout=0.0,
    index_topk=2048, index_head_dim=128, index_n_heads=32, first_k_dense_replace=1, q_lora_rank=None,
)  # fmt: skip
FAMILIES = (
    Family("mistral_large4_text", "MistralLarge4TextConfig",
           "MistralLarge4ForConditionalGeneration's language model and LM head (MistralLarge4TextModel)",
           "deepseek-v3.2", _ML4, _read_mistral_large4, V32_ALIASES),
)  # fmt: skip
