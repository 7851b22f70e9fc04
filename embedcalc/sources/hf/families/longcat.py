"""LongCat-Flash (LongcatFlashForCausalLM; Meituan 2025, arXiv 2509.01322), read off transformers'
``modeling_longcat_flash.py``.

Each of ``num_layers`` decoder layers holds two pre-norm sublayers of DeepSeek-V3's MLA with a query rank
(``LongcatFlashMLA``; its LoRA scalings of q and the kv latent are element-wise), two dense MLPs of
``ffn_hidden_size`` and one shortcut-connected MoE (ScMoE) that reads the first MLP's normalised input and adds its
output after the second sublayer. embedcalc lays a layer out as two of its own: the first with the MoE, whose
shared expert is that first MLP (the same input, no norm of its own), the second with the dense MLP; where the
MoE's output joins the residual stream changes no count. The MoE: a router ``classifier`` scoring
``n_routed_experts`` + ``zero_expert_num`` (bias when ``router_bias``; ``e_score_correction_bias`` is a buffer),
experts of ``expert_ffn_hidden_size`` and the zero experts, identities with no parameters (FFN ``zero_experts``);
``moe_topk`` experts per token, of which active parameters and FLOPs count all as real ones, the most a token uses.

transformers (5.24, 5.25) allocates ``gate_up_proj`` for the zero experts too (``LongcatFlashExperts``: one row
block per expert of ``total_experts``), zero_expert_num x 2 x expert_ffn_hidden_size x hidden per layer that its
forward never reads (a zero expert is ``identity_expert``) and no checkpoint holds: not counted here. LongCat-Flash's
published 560B total is without them.
"""

from __future__ import annotations

from typing import Any

from embedcalc.sources.hf.core import read_core
from embedcalc.sources.hf.families.deepseek import map_mla
from embedcalc.sources.hf.layered import ignore_moe_keys, put_layout, read_moe
from embedcalc.sources.hf.reader import Family, KeyReader


def _read_longcat_flash(r: KeyReader) -> None:
    read_core(r, qkv="attention_bias", out="attention_bias", ffn=False)
    map_mla(r)
    ignore_moe_keys(r)
    n_key, layers, _ = r.value("num_layers")
    if (
        "num_layers" not in r.raw and "num_hidden_layers" in r.raw
    ):  # the class's setter: num_layers = value // 2
        n_key, layers = "num_hidden_layers", r.raw["num_hidden_layers"] // 2 if isinstance(
            r.raw["num_hidden_layers"], int) else None  # fmt: skip
    elif "num_hidden_layers" in r.raw:
        r.ignore("num_hidden_layers", "LongcatFlashConfig derives it as 2 x num_layers")
    if not isinstance(layers, int) or isinstance(layers, bool) or layers < 1:
        r.problem(n_key, f"{n_key} = {layers!r} must be a positive number of layers")
        return
    r.put("num_layers", 2 * layers, n_key, "file" if n_key in r.raw else "default",
          "two attention sublayers per decoder layer (LongcatFlashDecoderLayer)")  # fmt: skip
    f_key, ffn, _ = r.value("ffn_hidden_size")
    r.put("ffn_dim", ffn, f_key, "file" if f_key in r.raw else "default", "the two dense MLPs of each layer")
    z_key, zero, _ = r.value("zero_expert_num")
    b_key, router_bias = r.lookup("router_bias")
    extra: dict[str, Any] = {"num_shared_experts": 1, "shared_expert_dim": ffn, "zero_experts": zero or 0,
                             "router_bias": router_bias is True}  # fmt: skip
    moe = read_moe(
        r, "n_routed_experts", top_k_key="moe_topk", width_key="expert_ffn_hidden_size", extra=extra
    )
    if moe is None:
        return
    keys = [r.lookup(k)[0] for k in ("n_routed_experts", "moe_topk", "expert_ffn_hidden_size")] + [
        z_key,
        f_key,
    ]
    keys += [b_key] if b_key in r.raw else []
    note = "the first sublayer's MLP with the shortcut MoE (its shared expert), the second's dense MLP"
    put_layout(r, ["moe", "default"] * layers, {"moe": {"ffn": moe}}, ", ".join(keys), note)


_LONGCAT: dict[str, Any] = dict(
    vocab_size=131072, hidden_size=6144, num_layers=28, num_hidden_layers=56, num_attention_heads=64,
    num_key_value_heads=None, hidden_act="silu", max_position_embeddings=131072, tie_word_embeddings=False,
    attention_bias=False, attention_dropout=0.0, ffn_hidden_size=12288, intermediate_size=12288, q_lora_rank=1536,
    kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, head_dim=64, v_head_dim=128, moe_topk=12,
    n_routed_experts=512, zero_expert_num=256, expert_ffn_hidden_size=2048,
)  # fmt: skip
FAMILIES = (
    Family("longcat_flash", "LongcatFlashConfig", "LongcatFlashForCausalLM (AutoModelForCausalLM)", "deepseek-v3",
           _LONGCAT, _read_longcat_flash,
           {"num_local_experts": "n_routed_experts", "num_experts_per_tok": "moe_topk",
            "intermediate_size": "ffn_hidden_size", "moe_intermediate_size": "expert_ffn_hidden_size"}),
)  # fmt: skip
