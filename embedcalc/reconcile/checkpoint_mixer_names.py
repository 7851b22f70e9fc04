"""A recurrent mixer layer's checkpoint names -> its ``mixer/...`` breakdown keys (the keys of
:func:`embedcalc.analysis.mixers.mixer_tensors`), beside :mod:`embedcalc.reconcile.checkpoint_names`, which places
the layer's other tensors. The module is ``mamba`` (granitemoehybrid's Mamba-2, Jamba's Mamba-1), ``mixer``
(nemotron_h's Mamba-2), ``linear_attn`` (qwen3_next's and Qwen3.5's gated DeltaNet), ``conv`` (lfm2's short
convolution) or ``self_attn`` (minimax's lightning layers, Kimi Linear's KDA layers); its parts, read off
transformers' modeling files, are below.
"""

from __future__ import annotations

_MIXER_MODULES = ("mamba", "mixer", "linear_attn", "conv", "self_attn")
_MIXER_PARTS = {"in_proj": "in", "in_proj_qkvz": "in", "in_proj_ba": "in", "qkv_proj": "in", "output_gate": "in",
                "in_proj_qkv": "in", "in_proj_z": "in", "in_proj_a": "in", "in_proj_b": "in",  # Qwen3.5's
                "conv1d": "conv", "conv": "conv", "x_proj": "x_proj", "dt_proj": "dt_proj", "dt_layernorm": "bc_norm",
                "b_layernorm": "bc_norm", "c_layernorm": "bc_norm", "norm": "gate_norm", "out_proj": "out"}  # fmt: skip
# Kimi Linear's KDA layer (its checkpoint's names, under self_attn): a mixer alone in its layer, never beside
# attention (where self_attn's q_proj / o_proj are the attention's: Falcon-H1)
_KDA_PARTS = {"q_proj": "in", "k_proj": "in", "v_proj": "in", "b_proj": "in", "q_conv1d": "conv", "k_conv1d": "conv",
              "v_conv1d": "conv", "f_a_proj": "gate", "f_b_proj": "gate", "g_a_proj": "gate", "g_b_proj": "gate",
              "o_norm": "gate_norm", "o_proj": "out"}  # fmt: skip
_MIXER_PARAMS = ("A_log", "D", "dt_bias")


def mixer_key(inside: list[str], param: str, parallel: bool = False) -> str | None:
    """A recurrent mixer layer's tensor: ``mixer/<part>`` (module docstring), None for its FFN's (and, beside the
    block's attention, for the attention's)."""
    if not inside or inside[0] not in _MIXER_MODULES:
        return None
    if len(inside) == 1:
        return "mixer/ssm" if param in _MIXER_PARAMS else None
    part = _MIXER_PARTS.get(inside[1]) or (None if parallel else _KDA_PARTS.get(inside[1]))
    return f"mixer/{part}" if part is not None and len(inside) == 2 else None
