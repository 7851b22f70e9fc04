"""LFM2's gated short convolution in plain PyTorch (Liquid AI 2025; transformers' ``Lfm2ShortConv``): the token
mixer of LFM2's conv layers, the same computation for a prompt and for a decode step.

Module tree (the keys of ``analysis/mixers.py``): ``mixer.in_`` (Linear d -> B, C, x, inner each), ``mixer.conv``
(:class:`~embedcalc.modeling.ssm.CausalConv` of K taps over B * x, no activation), ``mixer.out`` (Linear inner ->
d) and ``mixer.norm``; y = out(C * conv(B * x)). The state is the conv window alone, (B, inner, K), the layout of
transformers' conv cache; the scan state of :class:`~embedcalc.modeling.ssm.MixerState` is empty.
"""

from __future__ import annotations

from torch import Tensor

from embedcalc.config.mixer_plan import Mixer
from embedcalc.config.resolved import ResolvedShape
from embedcalc.modeling.ssm import MixerState, MixerSublayer


class ShortConvMixer(MixerSublayer):
    """The short-convolution sublayer of one block: its norm and the mixer (module docstring)."""

    def __init__(self, config: ResolvedShape, m: Mixer) -> None:
        super().__init__(config, m, conv_activation=False)

    def transform(self, h: Tensor, state: MixerState | None = None) -> Tensor:
        """(B, T, d) -> (B, T, d); with ``state`` the T tokens continue the sequence it holds."""
        b, c, x = self.in_(h).chunk(3, dim=-1)  # (B, T, I) each
        y = c * self.conv(b * x, state)  # (B, T, I)
        out: Tensor = self.out(y)
        return out
