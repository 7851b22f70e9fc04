"""DeepSeek-V4 (DeepseekV4ForCausalLM, ``deepseek_v4``), read off transformers 5.24 / 5.25's
``configuration_deepseek_v4.py`` and ``modeling_deepseek_v4.py`` (DeepSeek-V4 report §2).

Every layer is attention kind ``compressed`` (analysis/compressed.py): queries from a query latent
(``q_lora_rank``), one key per token that is also the value (``head_dim``), a sliding window of ``sliding_window``
keys, learned sinks, the grouped low-rank output projection (``o_groups`` x ``o_lora_rank``: attention
``out_groups`` / ``out_rank``), and by ``layer_types``: ``sliding_attention`` the window alone,
``heavily_compressed_attention`` an entry pooled every ``compress_rates``' rate (default 128), and
``compressed_sparse_attention`` overlapping windows (default 4) whose lightning indexer (``index_n_heads`` x
``index_head_dim``) keeps ``index_topk`` entries per query. Missing ``layer_types`` are DeepseekV4Config's: the
legacy ``compress_ratios`` (0 / 4 / 128 per layer), else two heavily compressed layers and then compressed sparse
and heavily compressed in turn; ``compress_rate_csa`` / ``compress_rate_hca`` override the rates. The residual is
``hc_mult`` hyper-connected streams (``hyper_connections``). Every layer's FFN is a mixture of experts:
``n_routed_experts`` of ``moe_intermediate_size`` (bias-free), ``num_experts_per_tok`` per token, and one shared
expert of ``moe_intermediate_size`` (``DeepseekV4MLP``: ``n_shared_experts`` is not read), biased as ``mlp_bias``;
the router has no bias (its ``e_score_correction_bias`` and the hash layers' ``tid2eid`` are buffers). A
``hash_moe`` layer picks its experts from the token id, at the same size and cost as a routed one.
"""

from __future__ import annotations

from typing import Any

from embedcalc.sources.hf import keys as hf_keys
from embedcalc.sources.hf.core import read_core
from embedcalc.sources.hf.layered import ignore_moe_keys, origin, put_layout, read_moe
from embedcalc.sources.hf.reader import MISSING, Family, KeyReader, all_of

SLIDING, CSA, HCA = "sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"
_RATIO_TYPES = {0: SLIDING, 4: CSA, 128: HCA}  # DeepseekV4Config's legacy compress_ratios
_NAMES = {SLIDING: "default", CSA: "csa", HCA: "hca"}


def _rates(r: KeyReader) -> dict[str, int] | None:
    """The compress rate of each compressed layer type: ``compress_rates``, the legacy scalars over them."""
    key, rates = r.lookup("compress_rates")
    merged: dict[str, Any] = {CSA: 4, HCA: 128}
    if rates is not MISSING and rates is not None:
        if not isinstance(rates, dict):
            r.problem(key, f"compress_rates must map {CSA!r} and {HCA!r} to a rate; got {rates!r}")
            return None
        merged |= rates
    for legacy, kind in (("compress_rate_csa", CSA), ("compress_rate_hca", HCA)):
        _, value = r.lookup(legacy)
        if value is not MISSING and value is not None:
            merged[kind] = value
    for kind in (CSA, HCA):
        if not isinstance(merged[kind], int) or isinstance(merged[kind], bool) or merged[kind] < 1:
            r.problem(
                key, f"compress_rates[{kind!r}] = {merged[kind]!r}: a compress rate is a positive integer"
            )
            return None
    return {CSA: merged[CSA], HCA: merged[HCA]}


def _layer_types(r: KeyReader, layers: int) -> tuple[str, list[str] | None]:
    """(the key that decided it, one layer type per layer), as DeepseekV4Config.__post_init__ fills it in."""
    key, types = r.lookup("layer_types")
    r_key, ratios = r.lookup("compress_ratios")
    if (types is MISSING or types is None) and ratios is not MISSING and ratios is not None:
        if not isinstance(ratios, list) or not all_of(ratios, set(_RATIO_TYPES)):
            r.problem(r_key, f"compress_ratios must give 0, 4 or 128 per layer; got {ratios!r}")
            return r_key, None
        key, types = r_key, [_RATIO_TYPES[x] for x in ratios]
    elif ratios is not MISSING:
        r.ignore(r_key, "layer_types decides each layer's attention")
    if types is MISSING or types is None:
        return key, [HCA] * min(layers, 2) + [CSA if i % 2 else HCA for i in range(max(layers - 2, 0))]
    if not isinstance(types, list) or len(types) < layers or not all_of(types, {SLIDING, CSA, HCA}):
        r.problem(key, f"{key} must give {SLIDING!r}, {CSA!r} or {HCA!r} for each of the {layers} layers; got "
                       f"{types!r}")  # fmt: skip
        return key, None
    return key, list(types[:layers])


def _read_deepseek_v4(r: KeyReader) -> None:
    read_core(r, qkv=False, out=False, ffn="mlp_bias")
    r.ignore("num_key_value_heads", "DeepseekV4Attention has one key/value head shared by every query head "
                                    "whatever this says")  # fmt: skip
    r.ignore("attention_bias", "DeepseekV4Attention's projections have no biases whatever this says")
    keys = []
    attention: dict[str, Any] = {"kind": "compressed", "sinks": True}
    for key, name in (
        ("q_lora_rank", "q_lora_rank"),
        ("o_groups", "out_groups"),
        ("o_lora_rank", "out_rank"),
    ):
        written, value, _ = r.value(key)
        keys.append(written)
        attention[name] = value
    r.put("attention", attention, ", ".join(keys), origin(r, ", ".join(keys)),
          "DeepSeek-V4's attention: query latent, one shared key/value head, sinks, grouped low-rank "
          "output")  # fmt: skip
    r.copy("sliding_window", "sliding_window", note="every layer's local window")
    r.copy(
        "hc_mult", "hyper_connections", note="manifold-constrained hyper-connections around every sublayer"
    )
    for key in ("hc_sinkhorn_iters", "hc_eps"):
        r.ignore(key, "the hyper-connections' Sinkhorn normalisation: element-wise only")
    r.ignore("swiglu_limit", "a clamp on the experts' gate and up projections: element-wise only")
    r.ignore("scoring_func", "the router's score function: element-wise only")
    r.ignore("partial_rotary_factor", "partial rotary positions: " + hf_keys.ROPE)
    r.ignore("qk_rope_head_dim", "the legacy form of partial_rotary_factor: " + hf_keys.ROPE)
    r.ignore("compress_rope_theta", hf_keys.ROPE)
    r.ignore("num_nextn_predict_layers", "DeepseekV4ForCausalLM does not build the multi-token-prediction layers "
                                         "(its checkpoint's mtp.* tensors are not loaded)")  # fmt: skip
    r.ignore("n_shared_experts", "DeepseekV4SparseMoeBlock builds one shared expert of moe_intermediate_size "
                                 "whatever this says")  # fmt: skip
    r.ignore("expert_dtype", "the routed experts' checkpoint dtype (quantization), not their size")
    ignore_moe_keys(r)
    layers, rates = r.data.get("num_layers"), _rates(r)
    moe = read_moe(r, "n_routed_experts", extra={"expert_bias": False})
    if not isinstance(layers, int) or rates is None or moe is None:
        return
    w_key, width, _ = r.value("moe_intermediate_size")
    r.put("ffn_dim", width, w_key, origin(r, w_key), "no dense FFN: the shared expert's width")
    moe |= {"num_shared_experts": 1, "shared_expert_dim": width}
    r.put("ffn", moe, "n_routed_experts, num_experts_per_tok, moe_intermediate_size",
          origin(r, "n_routed_experts, num_experts_per_tok, moe_intermediate_size"),
          "every layer: routed experts and one shared expert")  # fmt: skip
    _mlp_layer_types(r, layers)
    t_key, types = _layer_types(r, layers)
    if types is None:
        return
    indexer: dict[str, Any] = {}
    i_keys = []
    for key, name in (("index_n_heads", "index_heads"), ("index_head_dim", "index_head_dim"),
                      ("index_topk", "index_topk")):  # fmt: skip
        written, value, _ = r.value(key)
        i_keys.append(written)
        indexer[name] = value
    variants = {
        "csa": {
            "attention": {
                "kind": "compressed",
                "compress_rate": rates[CSA],
                "compress_overlap": True,
                **indexer,
            }
        },
        "hca": {"attention": {"kind": "compressed", "compress_rate": rates[HCA]}},
    }
    used = [k for k in ("compress_rates", "compress_rate_csa", "compress_rate_hca") if r.has(k)]
    key = ", ".join([t_key, *used, *(i_keys if CSA in types else [])])
    put_layout(r, [_NAMES[t] for t in types], variants, key,
               f"{types.count(CSA)} compressed sparse, {types.count(HCA)} heavily compressed, "
               f"{types.count(SLIDING)} sliding-window layers")  # fmt: skip
    if CSA not in types:
        for k in ("index_n_heads", "index_head_dim", "index_topk"):
            r.ignore(k, "no compressed sparse attention layer: no indexer")


def _mlp_layer_types(r: KeyReader, layers: int) -> None:
    """``mlp_layer_types`` (or the legacy ``num_hash_layers``): hash-routed or top-k routed, the same experts."""
    key, types = r.lookup("mlp_layer_types")
    malformed = not isinstance(types, list) or len(types) < layers or not all_of(types, {"hash_moe", "moe"})
    if types is not MISSING and types is not None and malformed:
        r.problem(key, f"mlp_layer_types must give 'hash_moe' or 'moe' for each of the {layers} layers; got "
                       f"{types!r}")  # fmt: skip
        return
    reason = ("hash-routed layers (experts picked by a tid2eid buffer) have the routed layers' parameters and "
              "FLOPs")  # fmt: skip
    for k in ("mlp_layer_types", "num_hash_layers"):
        r.ignore(k, reason)


_V4: dict[str, Any] = dict(
    vocab_size=129280, hidden_size=4096, moe_intermediate_size=2048, intermediate_size=2048, num_hidden_layers=43,
    num_attention_heads=64, num_key_value_heads=1, head_dim=512, q_lora_rank=1024, num_experts_per_tok=6,
    n_routed_experts=256, n_shared_experts=1, max_position_embeddings=1048576, hc_mult=4, sliding_window=128,
    o_groups=8, o_lora_rank=1024, index_n_heads=64, index_head_dim=128, index_topk=512, hidden_act="silu",
    tie_word_embeddings=False, attention_dropout=0.0, mlp_bias=False, attention_bias=False,
)  # fmt: skip
FAMILIES = (
    Family("deepseek_v4", "DeepseekV4Config", "DeepseekV4ForCausalLM (AutoModelForCausalLM)", "deepseek-v3", _V4,
           _read_deepseek_v4, {"num_local_experts": "n_routed_experts", "intermediate_size": "moe_intermediate_size"}),
)  # fmt: skip
