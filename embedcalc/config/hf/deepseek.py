"""DeepSeek-V2 / V3 (DeepseekV2ForCausalLM, DeepseekV3ForCausalLM: multi-head latent attention) and GLM-4.5
(Glm4MoeForCausalLM: standard attention), all with dense MLPs on the first ``first_k_dense_replace`` layers and
routed plus shared experts after.

MLA (DeepSeek-V2 report §2.1): q_a_proj Linear(hidden, q_lora_rank) (bias when ``attention_bias``), q_a_layernorm,
q_b_proj, or one bias-free q_proj when ``q_lora_rank`` is null (V2-Lite); kv_a_proj_with_mqa Linear(hidden,
kv_lora_rank + qk_rope_head_dim), kv_a_layernorm, kv_b_proj; o_proj from heads x v_head_dim (bias when
``attention_bias``). MoE layers: a bias-free router of ``n_routed_experts`` (V3 / GLM: its
``e_score_correction_bias`` is a buffer, not a parameter), experts of ``moe_intermediate_size``, and the shared
experts as one MLP of ``n_shared_experts`` x ``moe_intermediate_size``. transformers places MoE layers by
``first_k_dense_replace`` alone (``moe_layer_freq`` is not read). GLM-4.5: q/k/v biases when ``attention_bias``,
none on o_proj, q/k RMSNorm(head_dim) when ``use_qk_norm``, partial rotary (no parameters).
"""

from __future__ import annotations

from typing import Any

from embedcalc.config.hf import keys as hf_keys
from embedcalc.config.hf.core import read_core
from embedcalc.config.hf.layered import ignore_moe_keys, origin, put_layout, read_moe
from embedcalc.config.hf.reader import Family, KeyReader


def _moe_layout(r: KeyReader) -> None:
    ignore_moe_keys(r)
    r.ignore(
        "moe_layer_freq", "transformers places MoE layers by first_k_dense_replace alone and never reads it"
    )
    s_key, shared, _ = r.value("n_shared_experts")
    extra: dict[str, Any] = {}
    if isinstance(shared, int) and shared > 0:
        extra = {"num_shared_experts": shared}
    moe = read_moe(r, "n_routed_experts", extra=extra)
    layers = r.data.get("num_layers")
    k_key, first, _ = r.value("first_k_dense_replace")
    if moe is None or not isinstance(layers, int) or not isinstance(first, int):
        return
    names = ["default" if i < first else "moe" for i in range(layers)]
    put_layout(r, names, {"moe": {"ffn": moe}},
               f"n_routed_experts, num_experts_per_tok, moe_intermediate_size, {s_key}, {k_key}",
               f"layers {first}.. MoE, the first {first} dense")  # fmt: skip


def _mla(r: KeyReader) -> None:
    spec: dict[str, Any] = {"kind": "mla"}
    keys = []
    for key, name in (("q_lora_rank", "q_lora_rank"), ("kv_lora_rank", "kv_lora_rank"),
                      ("qk_nope_head_dim", "qk_nope_head_dim"), ("qk_rope_head_dim", "qk_rope_head_dim"),
                      ("v_head_dim", "v_head_dim")):  # fmt: skip
        written, value, _ = r.value(key)
        keys.append(written)
        if value is not None:
            spec[name] = value
    r.put("attention", spec, ", ".join(keys), origin(r, ", ".join(keys)), "multi-head latent attention")
    nope, rope = spec.get("qk_nope_head_dim"), spec.get("qk_rope_head_dim")
    if isinstance(nope, int) and isinstance(rope, int):
        r.derived("qk_head_dim", nope + rope, "qk_nope_head_dim + qk_rope_head_dim")
    r.ignore("num_key_value_heads", "MLA caches one latent per token; kv_b_proj expands it to every head")
    r.ignore("head_dim", "MLA's head widths are qk_nope_head_dim + qk_rope_head_dim and v_head_dim")
    r.ignore("rope_interleave", hf_keys.ROPE)
    r.expect("mlp_bias", (False,), "biases on the MLPs and shared experts")


def _read_deepseek(r: KeyReader) -> None:
    read_core(r, qkv="attention_bias", out="attention_bias", ffn=False)
    _mla(r)
    _moe_layout(r)


def _read_glm4_moe(r: KeyReader) -> None:
    read_core(r, qkv="attention_bias", out="attention_bias", ffn=False)
    r.fixed("out_bias", False, "Glm4MoeAttention: o_proj without bias")
    hidden, heads = r.data.get("embed_dim"), r.data.get("num_heads")
    if "head_dim" not in r.data and isinstance(hidden, int) and isinstance(heads, int) and heads > 0:
        # Glm4MoeAttention: getattr(config, "head_dim", None) or hidden_size // num_attention_heads (floor)
        r.put("head_dim", hidden // heads, "head_dim", "default", "hidden_size // num_attention_heads")
    qk_key, qk, _ = r.value("use_qk_norm")
    if qk is True:
        r.put("attention", {"qk_norm": "head"}, qk_key, "file", "q_norm, k_norm: RMSNorm(head_dim)")
    else:
        r.ignore(qk_key, "false: no q/k norms")
    r.ignore("partial_rotary_factor", "partial rotary positions: " + hf_keys.ROPE)
    _moe_layout(r)


_V2: dict[str, Any] = dict(
    vocab_size=102400, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
    hidden_act="silu", max_position_embeddings=2048, tie_word_embeddings=False, attention_bias=False,
    attention_dropout=0.0, first_k_dense_replace=0, kv_lora_rank=512, q_lora_rank=1536, n_routed_experts=64,
    n_shared_experts=2, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, num_experts_per_tok=None,
    moe_intermediate_size=1407, num_key_value_heads=None,
)  # fmt: skip
_V3: dict[str, Any] = dict(
    vocab_size=129280, hidden_size=7168, intermediate_size=18432, moe_intermediate_size=2048, num_hidden_layers=61,
    num_attention_heads=128, num_key_value_heads=128, n_shared_experts=1, n_routed_experts=256, kv_lora_rank=512,
    q_lora_rank=1536, qk_rope_head_dim=64, v_head_dim=128, qk_nope_head_dim=128, num_experts_per_tok=8,
    first_k_dense_replace=3, hidden_act="silu", max_position_embeddings=4096, tie_word_embeddings=False,
    attention_bias=False, attention_dropout=0.0,
)  # fmt: skip
_GLM: dict[str, Any] = dict(
    vocab_size=151552, hidden_size=4096, intermediate_size=10944, num_hidden_layers=46, num_attention_heads=96,
    num_key_value_heads=8, hidden_act="silu", max_position_embeddings=131072, tie_word_embeddings=False,
    attention_bias=False, attention_dropout=0.0, moe_intermediate_size=1408, num_experts_per_tok=8,
    n_shared_experts=1, n_routed_experts=128, first_k_dense_replace=1, use_qk_norm=False,
)  # fmt: skip
FAMILIES = (
    Family("deepseek_v2", "DeepseekV2Config", "DeepseekV2ForCausalLM (AutoModelForCausalLM)", "deepseek-v3", _V2,
           _read_deepseek, {"num_experts": "n_routed_experts"}),
    Family("deepseek_v3", "DeepseekV3Config", "DeepseekV3ForCausalLM (AutoModelForCausalLM)", "deepseek-v3", _V3,
           _read_deepseek, {"num_local_experts": "n_routed_experts"}),
    Family("glm4_moe", "Glm4MoeConfig", "Glm4MoeForCausalLM (AutoModelForCausalLM)", "deepseek-v3", _GLM,
           _read_glm4_moe, {"num_local_experts": "n_routed_experts"}),
)  # fmt: skip
