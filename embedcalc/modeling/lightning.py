"""MiniMax's lightning attention in plain PyTorch (Qin et al. 2024, "Lightning Attention-2", arXiv:2401.04658,
Algorithm 1; MiniMax 2025, arXiv:2501.08313; the algorithm of transformers' ``MiniMaxLightningAttention``): linear
attention with a fixed exponential decay λ = exp(-s) per head, S_t = λ S_{t-1} + k_tᵀ v_t, y_t = q_t S_t.

Module tree (the keys of ``analysis/mixers.py``): ``mixer.in_`` (one Linear d -> q, k, v and the output gate;
transformers has qkv_proj and output_gate, the same numel and FLOPs), ``mixer.ssm`` (no parameters: the decay
rates are computed from the head and the layer's depth), ``mixer.gate_norm`` (RMSNorm over the heads' output,
eps 1e-6 as ``MiniMaxRMSNorm``'s default), ``mixer.out`` and ``mixer.norm`` (the sublayer's norm); no
convolution. A prompt runs the block form, four matmuls per head and block of c tokens: Q Kᵀ (c x c), its product
with V after the decay mask (element-wise), Q times the carried state and the block's Kᵀ V; the state passes from
block to block by an element-wise decay. One decode step runs the recurrence: kᵀ v and q S, two matmuls per head.
The state is :class:`~embedcalc.modeling.ssm.MixerState`'s ``ssm`` (B, H, h, h), transformers' ``linear_cache``
layout; its conv window is empty. The decays are persistent buffers of the scan (``mixer.ssm``), the four tables
``MiniMaxLightningAttention.__init__`` registers, in its shapes: ``slope_rate`` (H, 1, 1), ``query_decay`` and
``key_decay`` (H, B, 1), ``diagonal_decay`` (1, H, B, B) for blocks of B tokens; a shorter last block reads their
leading (key: trailing) c rows, as transformers does.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from embedcalc.config.mixer_plan import Mixer
from embedcalc.config.resolved import ResolvedShape
from embedcalc.modeling.ssm import MixerState, MixerSublayer

_NORM_EPS = 1e-6  # MiniMaxLightningAttention builds MiniMaxRMSNorm(heads x head_dim) with its default eps


def decay_rates(heads: int, layer: int, layers: int) -> Tensor:
    """The per-head decay rate s (H,), as ``MiniMaxLightningAttention.get_slope_rate``: ALiBi's geometric slopes
    2^(-8 (i + 1) / H) (Press et al. 2022) scaled by 1 - layer / (layers - 1) (+ 1e-5 guards), so the deepest
    layer barely decays."""
    base = 1 / (2 ** (8 / heads))
    rate = base ** (torch.arange(heads) + 1)  # (H,)
    return rate * (1 - layer / (layers - 1 + 1e-5) + 1e-5)


class LightningScan(nn.Module):
    """The decayed linear-attention recurrence of one layer (no parameters; the decay tables as buffers): block form
    and recurrent step."""

    slope_rate: Tensor
    query_decay: Tensor
    key_decay: Tensor
    diagonal_decay: Tensor

    def __init__(self, m: Mixer, layer: int, layers: int) -> None:
        super().__init__()
        self.spec = m
        self.layer, self.layers = layer, layers
        heads, block = m.num_heads, m.chunk_size
        self.register_buffer("slope_rate", torch.empty(heads, 1, 1))
        self.register_buffer("query_decay", torch.empty(heads, block, 1))
        self.register_buffer("key_decay", torch.empty(heads, block, 1))
        self.register_buffer("diagonal_decay", torch.empty(1, heads, block, block))
        self.reset_buffers()

    def reset_buffers(self) -> None:
        """(Re)compute the decay tables in place (``MiniMaxLightningAttention.decay_factors``), e.g. after
        ``to_empty`` left them uninitialised: query exp(-s i), key exp(-s (B - i)) for i = 1 .. B, and the
        diagonal exp(-s (i - j)) where i >= j, else 0."""
        device = self.slope_rate.device
        s = decay_rates(self.spec.num_heads, self.layer, self.layers).to(device)[:, None, None]  # (H, 1, 1)
        steps = torch.arange(self.spec.chunk_size, device=device) + 1  # (B,)
        gap = (steps[:, None] - steps[None, :]).float()  # (B, B): i - j
        with torch.no_grad():
            self.slope_rate.copy_(s)
            self.query_decay.copy_(torch.exp(-s * steps[:, None]))  # (H, B, 1)
            self.key_decay.copy_(torch.exp(-s * (self.spec.chunk_size - steps[:, None])))  # (H, B, 1)
            self.diagonal_decay.copy_(torch.where(gap >= 0, torch.exp(-s * gap), 0)[None])  # (1, H, B, B)

    def forward(self, q: Tensor, k: Tensor, v: Tensor, state: MixerState | None) -> Tensor:
        """q, k, v (B, H, T, h) -> (B, H, T, h); ``state.ssm`` (B, H, h, h) holds the state before and is left
        holding the state after."""
        s = self.slope_rate.to(q)  # (H, 1, 1)
        if state is not None and q.shape[2] == 1:
            kv = state.ssm * torch.exp(-s) + k.transpose(-1, -2) @ v  # (B, H, h, h)
            state.ssm.copy_(kv)
            return q @ kv.to(q.dtype)  # (B, H, 1, h); kv in the state's dtype
        return self._blocks(q, k, v, s, state)

    def _blocks(self, q: Tensor, k: Tensor, v: Tensor, s: Tensor, state: MixerState | None) -> Tensor:
        """The block form over blocks of B tokens (the last at its own length, as transformers runs it)."""
        batch, heads, length, h = q.shape
        block = self.spec.chunk_size
        kv = state.ssm if state is not None else q.new_zeros(batch, heads, h, h)  # (B, H, h, h)
        out = []
        for start in range(0, length, block):
            c = min(block, length - start)
            qi, ki, vi = (t[:, :, start : start + c] for t in (q, k, v))  # (B, H, c, h)
            mask = self.diagonal_decay[:, :, :c, :c].to(q)  # (1, H, c, c)
            intra = ((qi @ ki.transpose(-1, -2)) * mask) @ vi  # (B, H, c, h)
            inter = (qi * self.query_decay[:, :c].to(q)) @ kv.to(q.dtype)  # (B, H, c, h)
            out.append(intra + inter)
            kv = kv * torch.exp(-s * c) + (ki * self.key_decay[:, -c:].to(q)).transpose(-1, -2) @ vi
        if state is not None:
            state.ssm.copy_(kv)
        return torch.cat(out, dim=2)  # (B, H, T, h)


class LightningMixer(MixerSublayer):
    """The lightning-attention sublayer of one block at ``layer`` of ``layers``: its norm and the mixer (module
    docstring)."""

    def __init__(self, config: ResolvedShape, m: Mixer, layer: int = 0, layers: int = 1) -> None:
        super().__init__(config, m)
        self.ssm = LightningScan(m, layer, layers)
        self.gate_norm = nn.RMSNorm(m.inner, eps=_NORM_EPS)

    def transform(self, h: Tensor, state: MixerState | None = None) -> Tensor:
        """(B, T, d) -> (B, T, d); with ``state`` the T tokens continue the sequence it holds."""
        m = self.spec
        batch, length, _ = h.shape
        qkv, gate = self.in_(h).split([3 * m.inner, m.inner], dim=-1)  # (B, T, 3 I), (B, T, I)
        # per head [q, k, v], as transformers reshapes qkv_proj's output: (B, T, H, 3 h)
        qkv = F.silu(qkv).reshape(batch, length, m.num_heads, 3 * m.head_dim)
        q, k, v = (t.transpose(1, 2) for t in qkv.chunk(3, dim=-1))  # (B, H, T, h)
        y = self.ssm(q, k, v, state).transpose(1, 2).reshape(batch, length, m.inner)  # (B, T, I)
        out: Tensor = self.out(torch.sigmoid(gate) * self.gate_norm(y))
        return out
