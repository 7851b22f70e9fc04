"""DBRX (DbrxForCausalLM; Databricks 2024, "Introducing DBRX"); transformers' ``configuration_dbrx.py`` /
``modeling_dbrx.py``.

Top-level keys of MosaicML's naming (``d_model``, ``n_heads``, ``n_layers``, ``max_seq_len``) and two nested
dicts. ``attn_config``: ``kv_n_heads`` (default 1) sizes the fused ``Wqkv`` Linear(d, d + 2 kv_heads head_dim)
(head_dim = d_model // n_heads): the same parameters and FLOPs as separate q, k, v; ``clip_qkv`` clamps it
element-wise. ``ffn_config``: every layer a mixture of ``moe_num_experts`` GLU experts (``w1``, ``v1``, ``w2``:
gate, up, down) of ``ffn_hidden_size``, top ``moe_top_k``, behind a bias-free router; ``ffn_act_fn`` names the
activation. Norms are bias-free LayerNorms (``norm_1``, ``norm_2``, ``norm_f``), no linear layer has a bias,
RoPE, and the head is never tied (DbrxConfig refuses ``tie_word_embeddings``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from embedcalc.sources.hf import accept
from embedcalc.sources.hf import keys as hf_keys
from embedcalc.sources.hf.layered import MOE_KEYS_IGNORED, ignore_moe_keys
from embedcalc.sources.hf.mappings import GATED_ACTIVATIONS
from embedcalc.sources.hf.reader import MISSING, Family, IgnoredKey, KeyReader, Origin, yaml_hint

# transformers' DbrxAttentionConfig / DbrxFFNConfig defaults
_ATTN: dict[str, Any] = dict(attn_pdrop=0.0, kv_n_heads=1)  # clip_qkv (default None) is a clamp
_FFN: dict[str, Any] = dict(ffn_act_fn=None, ffn_hidden_size=3584, moe_num_experts=4, moe_top_k=1)
_SUB_IGNORED = {
    "clip_qkv": "clamps q, k and v element-wise; no parameters or matmul FLOPs",
    "rope_theta": hf_keys.ROPE,
    "model_type": "the sub-config's own (empty) model_type; " + hf_keys.METADATA,
    "hidden_size": "DbrxConfig overwrites ffn_config.hidden_size with d_model",
    "moe_jitter_eps": MOE_KEYS_IGNORED["router_jitter_noise"],
    "moe_loss_weight": MOE_KEYS_IGNORED["router_aux_loss_coef"],
    "moe_normalize_expert_weights": "the p-norm that renormalises the top-k routing weights; element-wise only",
    "uniform_expert_assignment": (
        "MosaicML's load-testing switch (tokens spread uniformly over the experts), never read by transformers; "
        "each token still reaches moe_top_k experts"
    ),
}


def _sub(r: KeyReader, key: str, defaults: dict[str, Any]) -> tuple[dict[str, Any], set[str]] | None:
    """The nested dict ``key`` with DbrxConfig's defaults filled in, and the keys the file set; None if it is not
    a dict (a problem is recorded). Keys neither read here nor harmless are problems."""
    written, value = r.lookup(key)
    if value is MISSING or value is None:
        return dict(defaults), set()
    if not isinstance(value, dict):
        r.problem(written, f"{written} must be a dict of {', '.join(defaults)}; got {value!r}")
        return None
    for sub, sub_value in value.items():
        if sub in defaults:
            continue
        reason = _SUB_IGNORED.get(sub) or hf_keys.common_reason(str(sub), sub_value)
        reason = reason or accept.sub_config_reason(r.family.model_type, key, str(sub), sub_value)
        if reason is None:
            message = (
                f"unknown key {sub!r} in {written}: embedcalc cannot tell whether it changes the model's size or "
                f"cost; {yaml_hint(r.family, lower=True)}"
            )
            r.problem(f"{written}.{sub}", message, "hf_unknown_key")
        else:
            r.ignored.append(IgnoredKey(f"{written}.{sub}", sub_value, reason))
    return defaults | value, {str(k) for k in value}


def _put(r: KeyReader, parent: str, sub: tuple[dict[str, Any], set[str]], key: str, name: str,
         convert: Callable[[Any], Any] | None = None) -> Any:  # fmt: skip
    values, written = sub
    value = convert(values[key]) if convert is not None else values[key]
    origin: Origin = "file" if key in written else "default"
    r.put(name, value, f"{parent}.{key}", origin)
    return value


def _float(value: Any) -> Any:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else value


def _activation(value: Any) -> Any:
    name = (value or {"name": "silu"}).get("name", "silu") if isinstance(value, dict | None) else value
    return GATED_ACTIVATIONS.get(name, name)


def _read_dbrx(r: KeyReader) -> None:
    for name, value, note in (
        ("architecture", "decoder", ""), ("norm", "layernorm", ""), ("norm_bias", False, "nn.LayerNorm(bias=False)"),
        ("norm_placement", "pre", ""), ("embedding_norm", False, ""), ("position", "rope", ""),
        ("bias", False, "Wqkv, out_proj, router and experts without biases"), ("lm_head", True, ""),
    ):  # fmt: skip
        r.fixed(name, value, note)
    r.copy("vocab_size", "vocab_size")
    r.copy("d_model", "embed_dim")
    r.copy("n_layers", "num_layers")
    r.copy("n_heads", "num_heads")
    r.copy("max_seq_len", "max_seq_len", note="RoPE has no table; used for the extrapolation warning")
    t_key, tied, from_file = r.value("tie_word_embeddings")
    if tied is not False:
        r.problem(
            t_key, f"{t_key} = {tied!r}: DbrxConfig refuses tied embeddings (the head is a separate matrix)"
        )
    r.put("tie_embeddings", False, t_key, "file" if from_file else "default", "DbrxConfig: never tied")
    ignore_moe_keys(r)
    for key in ("emb_pdrop", "resid_pdrop"):
        r.ignore(key, "a dropout probability: no parameters or matmul FLOPs")
    for key in ("rope_theta", "rope_scaling", "rope_parameters"):
        r.ignore(key, hf_keys.ROPE)
    attn = _sub(r, "attn_config", _ATTN)
    if attn is not None:
        kv_heads = _put(r, "attn_config", attn, "kv_n_heads", "num_kv_heads")
        r.derived("num_key_value_heads", kv_heads, "attn_config.kv_n_heads")
        _put(r, "attn_config", attn, "attn_pdrop", "dropout", _float)
    ffn = _sub(r, "ffn_config", _FFN)
    if ffn is None:
        return
    activation = _put(r, "ffn_config", ffn, "ffn_act_fn", "activation", _activation)
    if activation not in GATED_ACTIVATIONS.values():
        r.problem("ffn_config.ffn_act_fn", f"ffn_config.ffn_act_fn = {ffn[0]['ffn_act_fn']!r} is not an activation "
                  f"embedcalc models for a GLU expert; known: {', '.join(sorted(GATED_ACTIVATIONS))}")  # fmt: skip
    width = _put(r, "ffn_config", ffn, "ffn_hidden_size", "ffn_dim")
    values, written = ffn
    spec = {"kind": "moe", "num_experts": values["moe_num_experts"], "top_k": values["moe_top_k"],
            "expert_dim": width}  # fmt: skip
    keys = ", ".join(f"ffn_config.{k}" for k in ("moe_num_experts", "moe_top_k", "ffn_hidden_size"))
    origin: Origin = "file" if {"moe_num_experts", "moe_top_k"} & written else "default"
    r.put("ffn", spec, keys, origin, "every layer: a bias-free router and GLU experts")


FAMILIES = (
    Family("dbrx", "DbrxConfig", "DbrxForCausalLM (AutoModelForCausalLM)", "mixtral-8x7b",
           dict(d_model=2048, n_heads=16, n_layers=24, max_seq_len=2048, vocab_size=32000, tie_word_embeddings=False),
           _read_dbrx, {"hidden_size": "d_model", "num_attention_heads": "n_heads", "num_hidden_layers": "n_layers",
                        "max_position_embeddings": "max_seq_len"}),
)  # fmt: skip
