"""Which sublayers of a block DeepSeek-V4's hyper-connections wrap (``hyper_connections``; transformers 5.24
``DeepseekV4DecoderLayer``: ``attn_hc`` around the attention, ``ffn_hc`` around the MoE): one function, read by the
analyzer and the torch model alike. Free of pydantic; the field's rules are in :mod:`embedcalc.config.rules.altup`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from embedcalc.config.layer_plan import Block


def hyper_sublayers(block: Block) -> list[str]:
    """The residual sublayers of ``block`` a hyper-connection wraps, in order: its token mixer (``attention``, or
    ``mixer`` for a recurrent or projected one) and its FFN (``ffn``, dense, MoE or projected)."""
    out = []
    if block.attention is not None:
        out.append("attention")
    elif block.mixer is not None or "mixer" in block.projections:
        out.append("mixer")
    if block.ffn is not None or "ffn" in block.projections:
        out.append("ffn")
    return out
