"""embedcalc's layer model derived from the module tree transformers built (DESIGN §19: "where it can, it derives
the layer model from that module tree"), so every analytic command works on a family without a native mapping.

What is derived (a decoder of identical dense layers; anything else derives nothing):

- widths from the parameters' shapes: the token table ``(vocab, d)``; attention's ``q/k/v/o`` (or a fused
  ``qkv``: ``(H + 2G) hd x d``) with the head count from the config (``num_attention_heads``; transformers'
  attribute map resolves ``n_head``), so ``head_dim`` and the KV heads follow; the FFN's ``up`` width, gated when
  a ``gate`` / fused ``gate_up`` projection is there;
- biases (q/k/v, out, FFN in and out, LM head) from the bias parameters present; norms: RMSNorm without a bias,
  LayerNorm with one; a learned position table, else RoPE where the config names one, else none;
- the head: ``lm_head`` present is untied, absent (a causal LM) tied;
- the activation from the config (``hidden_act``: ``silu`` gated is SwiGLU, ``gelu`` gated GeGLU).

The result is only a proposal: :func:`embedcalc.api.general` loads it through the schema and keeps it only when its
analytic parameters (component by component), forward FLOPs and KV cache equal transformers' count of the same
file exactly; otherwise the general reader's count stands alone.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

__all__ = ["derive_layer_model"]

_LAYER = re.compile(r"^(?P<stack>.*?)\.?(?:layers|h|layer|blocks|block)\.(?P<index>\d+)\.(?P<rest>.+)$")
_GATED = {
    "silu": "swiglu",
    "swish": "swiglu",
    "gelu": "geglu",
    "gelu_new": "geglu",
    "gelu_pytorch_tanh": "geglu",
}
_PLAIN = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu_fast": "gelu_tanh",
          "relu": "relu", "silu": "silu", "swish": "silu"}  # fmt: skip


def _layers(parameters: tuple[tuple[str, tuple[int, ...]], ...]) -> tuple[dict[int, dict[str, tuple[int, ...]]],
                                                                           dict[str, tuple[int, ...]]]:  # fmt: skip
    """Parameters by layer (name inside the layer -> shape) and those outside the layers."""
    layers: dict[int, dict[str, tuple[int, ...]]] = defaultdict(dict)
    outside: dict[str, tuple[int, ...]] = {}
    for name, shape in parameters:
        match = _LAYER.match(name)
        if match is None:
            outside[name] = shape
        else:
            layers[int(match["index"])][match["rest"]] = shape
    return dict(layers), outside


def _find(layer: dict[str, tuple[int, ...]], *ends: str) -> tuple[str, tuple[int, ...]] | None:
    for end in ends:
        for name, shape in layer.items():
            if name.endswith(f"{end}.weight"):
                return name, shape
    return None


def _bias(layer: dict[str, tuple[int, ...]], weight: str) -> bool:
    return weight.removesuffix("weight") + "bias" in layer


def _attention(layer: dict[str, tuple[int, ...]], heads: int) -> dict[str, Any] | None:
    q, k, o = (
        _find(layer, "q_proj", "query"),
        _find(layer, "k_proj", "key"),
        _find(layer, "o_proj", "out_proj"),
    )
    fused = _find(layer, "qkv_proj", "query_key_value", "c_attn", "Wqkv")
    if o is None or len(o[1]) != 2:
        return None
    if q is not None and k is not None:
        head_dim = q[1][0] // heads
        kv_heads = k[1][0] // head_dim if head_dim else 0
        bias = _bias(layer, q[0])
    elif fused is not None and fused[1] == (3 * o[1][0], o[1][0]):  # Linear(d, 3d): multi-head, no GQA
        head_dim, kv_heads, bias = o[1][1] // heads, heads, _bias(layer, fused[0])
    else:
        return None
    if head_dim * heads != o[1][1] or kv_heads < 1:
        return None
    return {"num_heads": heads, "num_kv_heads": kv_heads, "head_dim": head_dim, "qkv_bias": bias,
            "out_bias": _bias(layer, o[0])}  # fmt: skip


def _ffn(layer: dict[str, tuple[int, ...]], act: Any) -> dict[str, Any] | None:
    up = _find(layer, "up_proj", "fc1", "fc_in", "c_fc", "dense_h_to_4h", "w1")
    down = _find(layer, "down_proj", "fc2", "fc_out", "dense_4h_to_h", "w2")
    gate = _find(layer, "gate_proj")
    if up is None or down is None or not isinstance(act, str):
        return None
    table = _GATED if gate is not None else _PLAIN
    if act not in table:
        return None
    return {"ffn_dim": up[1][0], "activation": table[act], "ffn_bias": _bias(layer, up[0]),
            "ffn_out_bias": _bias(layer, down[0])}  # fmt: skip


def derive_layer_model(
    parameters: tuple[tuple[str, tuple[int, ...]], ...], attrs: dict[str, Any], name: str
) -> dict[str, Any] | None:
    """A config in embedcalc's own schema for a decoder of identical dense layers (module docstring); None where
    the module tree is anything else."""
    layers, outside = _layers(parameters)
    heads = attrs.get("heads")
    if not layers or not isinstance(heads, int) or heads < 1:
        return None
    first = layers[min(layers)]
    if sorted(layers) != list(range(len(layers))) or any(layer != first for layer in layers.values()):
        return (
            None  # layers that differ (hybrid, MoE after dense ones, per-layer widths): not this simple model
        )
    table = next(((n, s) for n, s in outside.items() if n.endswith(("embed_tokens.weight", "wte.weight",
                                                                     "word_embeddings.weight"))), None)  # fmt: skip
    attention, ffn = _attention(first, heads), _ffn(first, attrs.get("act"))
    if table is None or attention is None or ffn is None:
        return None
    vocab, width = table[1]
    norms = [n for n in first if "norm" in n.lower() or n.split(".")[0].startswith("ln")]
    accounted = {
        n for n in first if any(p in n for p in ("proj", "query", "key", "attn", "fc", "dense", "w1", "w2"))
    }
    if set(first) - accounted - set(norms):
        return None  # a parameter this model has no place for (q/k norms, gates, scalars)
    head = next(((n, s) for n, s in outside.items() if n.startswith("lm_head.")), None)
    learned = next(
        (s for n, s in outside.items() if n.endswith(("embed_positions.weight", "wpe.weight"))), None
    )
    positions = attrs.get("positions") if isinstance(attrs.get("positions"), int) else None
    position = "learned" if learned is not None else ("rope" if attrs.get("rope") is not None else "none")
    config: dict[str, Any] = {
        "name": name, "architecture": "decoder", "vocab_size": vocab, "embed_dim": width,
        "max_seq_len": learned[0] if learned is not None else (positions or 4096), "num_layers": len(layers),
        **attention, **ffn, "norm": "layernorm" if any(n.endswith(".bias") for n in norms) else "rmsnorm",
        "norm_placement": "pre", "embedding_norm": False, "position": position, "lm_head": True,
        "tie_embeddings": head is None, "lm_head_bias": "lm_head.bias" in outside, "dropout": 0.0,
    }  # fmt: skip
    if config["head_dim"] * heads == width:
        config.pop("head_dim")
    return config
