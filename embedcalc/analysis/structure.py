"""The stacks a config builds (encoder, decoder) and per-block facts shared by the param, FLOP and memory counts."""

from __future__ import annotations

from dataclasses import dataclass

from embedcalc.config.schema import ModelConfig


@dataclass(frozen=True)
class Stack:
    """One stack of identical blocks."""

    name: str  # "encoder" or "decoder": the first segment of breakdown keys
    num_layers: int
    causal: bool
    cross_attention: bool


def stacks(config: ModelConfig) -> list[Stack]:
    """The stacks of ``config`` in forward order."""
    if config.architecture == "encoder":
        return [Stack("encoder", config.num_layers, causal=False, cross_attention=False)]
    if config.architecture == "decoder":
        return [Stack("decoder", config.num_layers, causal=True, cross_attention=False)]
    return [
        Stack("encoder", config.num_layers, causal=False, cross_attention=False),
        Stack("decoder", config.resolved_decoder_layers, causal=True, cross_attention=True),
    ]


def norm_has_bias(config: ModelConfig) -> bool:
    """LayerNorm has a bias (shift) unless ``norm_bias`` is false; RMSNorm never has one."""
    return config.norm == "layernorm" and config.norm_bias


def ffn_in_width(config: ModelConfig) -> int:
    """Output width of the FFN's input projection(s): gated FFNs have two (gate and up), so 2 * ffn_dim."""
    return 2 * config.resolved_ffn_dim if config.gated else config.resolved_ffn_dim
