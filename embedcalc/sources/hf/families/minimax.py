"""MiniMax-01 / MiniMax-M1 (MiniMaxForCausalLM; MiniMax 2025, arXiv:2501.08313 and arXiv:2506.13585; transformers'
``modeling_minimax.py``): a Mixtral-shaped MoE decoder whose layer i mixes tokens with lightning attention
(``MiniMaxLightningAttention``, the ``lightning`` mixer kind) when ``layer_types[i]`` is ``linear_attention``, else
with GQA softmax attention and RoPE (``MiniMaxAttention``, no biases).

Every layer: input_layernorm, the mixer, post_attention_layernorm and Mixtral's MoE (a bias-free router of
``num_local_experts``, gated experts of ``intermediate_size``, top ``num_experts_per_tok``; no shared expert). The
lightning layer: qkv_proj d -> 3 x heads x head_dim and output_gate d -> heads x head_dim (bias-free), an RMSNorm
over heads x head_dim, out_proj; its decay rates are buffers computed from the head and layer index (no
parameters), processed in blocks of ``block_size``. ``full_attn_*``, ``linear_attn_*`` and ``mlp_*``
``alpha/beta_factor`` scale the residual and the sublayer's output (``residual * alpha + out * beta``): scalars, no
parameters. MiniMaxConfig's default layout alternates, full attention on even layers; MiniMax-M1 has a softmax
layer after every seven lightning layers. ``attn_type_list`` (MiniMax's remote code, 1 = softmax) is not read by
transformers' class, which would build its default layout, so a file with it and no ``layer_types`` is refused with
the equivalent ``layer_types``.
"""

from __future__ import annotations

from typing import Any

from embedcalc.sources.hf.core import read_core
from embedcalc.sources.hf.families.hybrid import positive
from embedcalc.sources.hf.families.moe import every_layer_experts
from embedcalc.sources.hf.layered import put_layout
from embedcalc.sources.hf.mappings import default_head_dim
from embedcalc.sources.hf.reader import MISSING, Family, KeyReader, all_of

_TYPES = {"linear_attention", "full_attention"}
_FACTORS = tuple(
    f"{part}_{ab}_factor" for part in ("full_attn", "linear_attn", "mlp") for ab in ("alpha", "beta")
)


def _read_minimax(r: KeyReader) -> None:
    read_core(r, qkv=False, out=False, ffn=False)
    every_layer_experts(r)
    r.copy(
        "sliding_window", "sliding_window", note="the softmax layers; caps their KV cache at this many tokens"
    )
    for key in _FACTORS:
        r.ignore(key, "scales the residual or the sublayer's output (alpha x residual + beta x output); no "
                      "parameters, element-wise only")  # fmt: skip
    layers, heads = r.data.get("num_layers"), r.data.get("num_heads")
    types = _layer_types(r, layers)
    block = positive(r, "block_size")
    if types is None or block is None or not isinstance(layers, int) or not isinstance(heads, int):
        return
    head_dim = default_head_dim(r)
    if head_dim is None:
        return
    mixer = {"kind": "lightning", "num_heads": heads, "head_dim": head_dim, "chunk_size": block}
    names = ["lightning" if t == "linear_attention" else "default" for t in types]
    note = (
        f"{names.count('lightning')} lightning-attention layers, {names.count('default')} softmax attention"
    )
    key = ", ".join(k for k in ("layer_types", "block_size") if k in r.raw) or "layer_types"
    put_layout(r, names, {"lightning": {"mixer": mixer}}, key, note)


def _layer_types(r: KeyReader, layers: Any) -> list[str] | None:
    """``layer_types`` (MiniMaxConfig's default: full attention on even layers, lightning on odd), None and a
    problem when malformed or when only the remote code's ``attn_type_list`` says the layout."""
    if not isinstance(layers, int):
        return None
    types_key, types = r.lookup("layer_types")
    list_key, remote = r.lookup("attn_type_list")
    if types is MISSING or types is None:
        if remote is not MISSING:
            listed = remote if isinstance(remote, list) else []
            wanted = ["full_attention" if t == 1 else "linear_attention" for t in listed]
            r.problem(list_key, f"attn_type_list is MiniMax's remote-code key, which transformers' MiniMaxConfig "
                                f"does not read (it would build full attention on every other layer); write "
                                f"layer_types: {wanted!r}")  # fmt: skip
            return None
        types = ["full_attention" if (i + 1) % 2 else "linear_attention" for i in range(layers)]
    elif remote is not MISSING:
        r.ignore(list_key, "MiniMax's remote-code layout key; transformers reads layer_types")
    if not isinstance(types, list) or len(types) != layers or not all_of(types, _TYPES):
        r.problem(types_key, f"layer_types must list linear_attention or full_attention for each of the {layers} "
                             f"layers; got {types!r}")  # fmt: skip
        return None
    return types


_MINIMAX: dict[str, Any] = dict(
    vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
    num_key_value_heads=8, head_dim=None, hidden_act="silu", max_position_embeddings=4096 * 32,
    tie_word_embeddings=False, sliding_window=None, attention_dropout=0.0, num_experts_per_tok=2,
    num_local_experts=8, block_size=256,
)  # fmt: skip
FAMILIES = (
    Family("minimax", "MiniMaxConfig", "MiniMaxForCausalLM (AutoModelForCausalLM)", "minimax-m1-80k", _MINIMAX,
           _read_minimax, {"num_experts": "num_local_experts"}),
)  # fmt: skip
