"""Jamba (JambaForCausalLM; AI21 2024, "Jamba: A Hybrid Transformer-Mamba Language Model"; transformers'
``configuration_jamba.py`` / ``modeling_jamba.py``): Mamba-1 layers interleaved with attention, and MoE on every
other layer.

Layer i is GQA attention (``JambaAttentionDecoderLayer``: q/k/v/o without bias, no positional encoding at all)
when ``i % attn_layer_period == attn_layer_offset``, else a Mamba-1 layer (``JambaMambaMixer``): in_proj
d -> 2 x inner (bias ``mamba_proj_bias``), a depthwise conv of ``mamba_d_conv`` taps over inner channels (bias
``mamba_conv_bias``), x_proj inner -> dt_rank + 2 x d_state, dt_proj dt_rank -> inner (biased), A_log
(inner x d_state) and D, the RMSNorms of dt, B and C (dt_rank, d_state, d_state weights) and out_proj, with
inner = ``mamba_expand`` x hidden and dt_rank = ``mamba_dt_rank`` (``auto``: ceil(hidden / 16), as
``JambaConfig.__post_init__``). The FFN of layer i is ``JambaSparseMoeBlock`` (``num_experts`` gated experts of
``intermediate_size``, a bias-free router, top ``num_experts_per_tok``) when
``i % expert_layer_period == expert_layer_offset``, else the gated ``JambaMLP`` of ``intermediate_size``. The
scan's state is kept in float32 (``JambaMambaMixer.forward`` takes A = -exp(A_log.float()), so
``mamba_selective_scan`` returns a float32 state, which the cache keeps; :data:`~embedcalc.sources.hf.families.hybrid.
TORCH_STATE_DTYPE`).
"""

from __future__ import annotations

import math
from typing import Any

from embedcalc.sources.hf.core import read_core
from embedcalc.sources.hf.families.hybrid import TORCH_STATE_DTYPE, positive, replace_mapped
from embedcalc.sources.hf.layered import ignore_moe_keys, put_layout, read_moe
from embedcalc.sources.hf.reader import Family, KeyReader

_RUNTIME = {
    "use_mamba_kernels": "whether the fused CUDA kernels run the scan; the same computation",
    "use_mambapy": "the mamba.py fallback scan in training; the same computation",
    "use_associative_scan": "a parallel scan under torch.compile; the same computation",
    "num_logits_to_keep": "an older JambaConfig's generation-time option (logits of the last tokens only); "
    "JambaForCausalLM takes logits_to_keep per call",
    "calc_logits_for_entire_prompt": "an older JambaConfig's generation-time option; JambaForCausalLM takes "
    "logits_to_keep per call",
}
_MAMBA_KEYS = ("mamba_d_state", "mamba_d_conv", "mamba_expand", "mamba_dt_rank", "mamba_conv_bias",
               "mamba_proj_bias")  # fmt: skip
_PLACEMENT = ("attn_layer_period", "attn_layer_offset", "expert_layer_period", "expert_layer_offset")


def _mamba1_spec(r: KeyReader) -> dict[str, Any] | None:
    """The Mamba-1 mixer of the Mamba layers as an embedcalc mixer spec (None and a problem if unusable)."""
    hidden = r.data.get("embed_dim")
    state, conv, expand = (positive(r, key) for key in ("mamba_d_state", "mamba_d_conv", "mamba_expand"))
    rank_key, rank, _ = r.value("mamba_dt_rank")
    if rank == "auto" and isinstance(hidden, int):
        rank = math.ceil(hidden / 16)
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 1:
        r.problem(
            rank_key, f"{rank_key} = {rank!r} must be a positive integer or 'auto' (ceil(hidden_size / 16))"
        )
        return None
    if state is None or conv is None or expand is None or not isinstance(hidden, int):
        return None
    spec: dict[str, Any] = {"kind": "mamba", "state_size": state, "inner_dim": expand * hidden, "dt_rank": rank,
                            "conv_kernel": conv, "bc_norms": True, "ssm_state_dtype": TORCH_STATE_DTYPE}  # fmt: skip
    for name, key in (("conv_bias", "mamba_conv_bias"), ("bias", "mamba_proj_bias")):
        _, value, _ = r.value(key)
        spec[name] = bool(value)
    return spec


def _period(r: KeyReader, period_key: str, offset_key: str) -> tuple[int, int] | None:
    """(period, offset) of a layer placement, checked as ``JambaConfig.validate_architecture`` checks it."""
    period = positive(r, period_key)
    offset_written, offset, _ = r.value(offset_key)
    if period is None:
        return None
    if not isinstance(offset, int) or isinstance(offset, bool) or not 0 <= offset < period:
        r.problem(offset_written, f"{offset_written} = {offset!r} must be an integer in 0..{period - 1} (below "
                                  f"{period_key} = {period}; JambaConfig refuses the file otherwise)")  # fmt: skip
        return None
    return period, offset


def _read_jamba(r: KeyReader) -> None:
    read_core(r, qkv=False, out=False, ffn=False)
    replace_mapped(r, "position", "none", "model_type", "family", "JambaAttention has no positional encoding")
    ignore_moe_keys(r)
    for key, reason in _RUNTIME.items():
        r.ignore(key, reason)
    r.expect(
        "sliding_window", (None,), "transformers' JambaAttention never slides, whatever an older file says"
    )
    layers = r.data.get("num_layers")
    attn, experts = _period(r, *_PLACEMENT[:2]), _period(r, *_PLACEMENT[2:])
    mamba = _mamba1_spec(r)
    moe = read_moe(r, "num_experts", width_key=None)
    if attn is None or experts is None or mamba is None or moe is None or not isinstance(layers, int):
        return
    names, variants = [], {}
    for i in range(layers):
        is_attention, is_moe = i % attn[0] == attn[1], i % experts[0] == experts[1]
        name = ("attn" if is_attention else "mamba") + ("_moe" if is_moe else "")
        spec: dict[str, Any] = {"ffn": moe} if is_moe else {}
        if not is_attention:
            spec["mixer"] = mamba
        variants[name] = spec
        names.append("default" if name == "attn" else name)
    attention = sum(i % attn[0] == attn[1] for i in range(layers))
    moe_layers = sum(i % experts[0] == experts[1] for i in range(layers))
    note = f"{layers - attention} Mamba layers, {attention} attention layers; {moe_layers} MoE layers"
    wanted = (*_PLACEMENT, *_MAMBA_KEYS, "num_experts", "num_experts_per_tok", "intermediate_size")
    put_layout(r, names, variants, ", ".join(k for k in wanted if k in r.raw) or "attn_layer_period", note)


_DEFAULTS: dict[str, Any] = dict(
    vocab_size=65536, tie_word_embeddings=False, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
    num_attention_heads=32, num_key_value_heads=8, hidden_act="silu", max_position_embeddings=262144,
    attention_dropout=0.0, num_experts_per_tok=2, num_experts=16, expert_layer_period=2, expert_layer_offset=1,
    attn_layer_period=8, attn_layer_offset=4, mamba_d_state=16, mamba_d_conv=4, mamba_expand=2, mamba_dt_rank="auto",
    mamba_conv_bias=True, mamba_proj_bias=False,
)  # fmt: skip
FAMILIES = (
    Family("jamba", "JambaConfig", "JambaForCausalLM (AutoModelForCausalLM)", "jamba-mini-1.7", _DEFAULTS,
           _read_jamba, {"num_local_experts": "num_experts"}),
)  # fmt: skip
