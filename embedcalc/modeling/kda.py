"""Kimi Delta Attention in plain PyTorch (Kimi Team 2025, "Kimi Linear", arXiv:2510.26692 §3; the algorithm of
transformers' ``chunk_kimi_delta_attention`` / ``recurrent_kimi_delta_attention``, ``KimiLinearDeltaAttention``).

Module tree (the keys of ``analysis/mixers.py``): ``mixer.in_`` (one Linear d -> q, k, v, beta; transformers has
four, the same numel and FLOPs), ``mixer.conv`` (the causal depthwise convolution over q, k, v, no bias, silu),
``mixer.gate`` (the two low-rank gates: f_a -> f_b, the per-channel decay's input, and g_a -> g_b, the output gate),
``mixer.ssm`` (A_log per head, dt_bias per channel, and the chunked delta rule), ``mixer.gate_norm`` (an RMSNorm
over each head, one weight of head_dim, times sigmoid of the output gate), ``mixer.out``.

The decay is per channel (g: B, T, H, h), so within a chunk the scores between tokens are element-wise sums over
the channels, ``(a[i] * b[j] * exp(g[i] - g[j])).sum(-1)``, as transformers computes them (no matmul:
``FlopCounterMode`` counts none); the chunk's unit-triangular system is solved by ``torch.linalg.solve_triangular``
(none either, where transformers runs a row loop), and the inverse T then multiplies β V and β K e^g as matmuls
(counted, as transformers' ``attn @ v_beta`` and ``attn @ (k_beta * g.exp())``). Per chunk the state is read by the
decayed queries and by T β K e^g, and updated by the decayed keys' Kᵀ V (three matmuls), and the intra-chunk scores
multiply the new values (one more). One decode step runs the recurrence (two einsums: the state read by k and by q).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from embedcalc.config.mixer_plan import Mixer
from embedcalc.config.resolved import ResolvedShape
from embedcalc.modeling.ssm import MixerState, MixerSublayer

_EPS = 1e-6


def _l2norm(x: Tensor) -> Tensor:
    return x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) + _EPS)


def _unit_lower_inverse(strict: Tensor) -> Tensor:
    """(I + strict)⁻¹ for a strictly lower-triangular (..., C, C), in float32 (a triangular solve: no matmul)."""
    c = strict.shape[-1]
    eye = torch.eye(c, dtype=torch.float32, device=strict.device).expand(strict.shape)
    system = strict.to(torch.float32) + eye
    inverse: Tensor = torch.linalg.solve_triangular(system, eye, upper=False, unitriangular=True)
    return inverse.to(strict.dtype)


def _pair_sum(a: Tensor, b: Tensor, decay: Tensor) -> Tensor:
    """[.., i, j] = sum over channels of a[i] b[j] decay[i, j] (element-wise, as transformers computes it):
    a, b (..., C, h), decay (..., C, C, h) -> (..., C, C)."""
    return (a[..., :, None, :] * b[..., None, :, :] * decay).sum(-1)


class LowRankGates(nn.Module):
    """The forget gate's f_a (d -> h) -> f_b (h -> H h) and the output gate's g_a -> g_b, bias-free."""

    def __init__(self, embed_dim: int, m: Mixer) -> None:
        super().__init__()
        self.f_a = nn.Linear(embed_dim, m.head_dim, bias=False)
        self.f_b = nn.Linear(m.head_dim, m.inner, bias=False)
        self.g_a = nn.Linear(embed_dim, m.head_dim, bias=False)
        self.g_b = nn.Linear(m.head_dim, m.inner, bias=False)

    def forward(self, h: Tensor) -> tuple[Tensor, Tensor]:
        """(B, T, d) -> the decay's pre-activation and the output gate, (B, T, H h) each."""
        return self.f_b(self.f_a(h)), self.g_b(self.g_a(h))


class KimiDeltaRule(nn.Module):
    """The delta rule with a per-channel decay: A_log (H), dt_bias (H h) and the chunked and recurrent forms."""

    def __init__(self, m: Mixer) -> None:
        super().__init__()
        self.spec = m
        self.A_log = nn.Parameter(torch.empty(m.num_heads))
        self.dt_bias = nn.Parameter(torch.empty(m.inner))

    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, b: Tensor, f: Tensor, state: MixerState | None
    ) -> Tensor:
        """q, k, v (B, T, H, h), b (B, T, H), f (B, T, H h) -> (B, T, H, h); ``state.ssm`` (B, H, h, h) holds the
        state before and is left holding the state after."""
        heads, width = self.spec.num_heads, self.spec.head_dim
        q, k = _l2norm(q) * width**-0.5, _l2norm(k)
        beta = torch.sigmoid(b)  # (B, T, H)
        raw = (f + self.dt_bias).view(*f.shape[:2], heads, width)  # (B, T, H, h)
        g = -torch.exp(self.A_log)[:, None] * F.softplus(raw)  # (B, T, H, h): log decay per channel, <= 0
        if state is not None and q.shape[1] == 1:
            return self._step(q[:, 0], k[:, 0], v[:, 0], beta[:, 0], g[:, 0], state.ssm)[:, None]
        q, k, v, g = (t.transpose(1, 2) for t in (q, k, v, g))  # (B, H, T, h)
        return self._chunked(q, k, v, beta.transpose(1, 2), g, state).transpose(1, 2)

    def _step(self, q: Tensor, k: Tensor, v: Tensor, beta: Tensor, g: Tensor, s: Tensor) -> Tensor:
        """One token: S <- exp(g) ∘ S (per key channel), S += k ((v - Sᵀk) beta)ᵀ, y = Sᵀ q; q, k, v (B, H, h)."""
        decayed = s * torch.exp(g)[..., None]  # (B, H, h, h)
        remembered = torch.einsum("bhkv,bhk->bhv", decayed.to(k.dtype), k)  # (B, H, h)
        delta = (v - remembered) * beta[..., None]
        s.copy_(decayed + k[..., None] * delta[..., None, :])
        return torch.einsum("bhkv,bhk->bhv", s.to(q.dtype), q)  # (B, H, h)

    def _chunked(
        self, q: Tensor, k: Tensor, v: Tensor, beta: Tensor, g: Tensor, state: MixerState | None
    ) -> Tensor:
        """The chunked rule: q, k, v, g (B, H, T, h), beta (B, H, T) -> (B, H, T, h)."""
        batch, heads, length, width = k.shape
        c = self.spec.chunk_size
        pad = (c - length % c) % c
        q, k, v, g = (F.pad(t, (0, 0, 0, pad)) for t in (q, k, v, g))
        beta = F.pad(beta, (0, pad))
        chunks = (length + pad) // c

        def split(t: Tensor) -> Tensor:  # (B, H, L, h) -> (B, H, n, C, h)
            return t.reshape(batch, heads, chunks, c, width)

        k_beta, v_beta = split(k * beta[..., None]), split(v * beta[..., None])
        q, k, cum = split(q), split(k), split(g).cumsum(-2)  # cum: (B, H, n, C, h)
        upper = torch.ones(c, c, dtype=torch.bool, device=q.device).triu(1)  # j > i
        # (B, H, n, C, C, h): exp(cum[i] - cum[j]) for j <= i, 0 above
        decay = (
            (cum[..., :, None, :] - cum[..., None, :, :]).masked_fill(upper[..., None], float("-inf")).exp()
        )
        below = torch.ones(c, c, dtype=torch.bool, device=q.device).tril(-1)  # j < i
        strict = _pair_sum(k_beta, k, decay).masked_fill(~below, 0)  # (B, H, n, C, C)
        inverse = _unit_lower_inverse(strict)
        new_values = inverse @ v_beta  # (B, H, n, C, h)
        k_decay = inverse @ (k_beta * cum.exp())
        intra = _pair_sum(q, k, decay).masked_fill(upper, 0)  # (B, H, n, C, C), the diagonal kept
        q = q * cum.exp()
        k = k * (cum[..., -1:, :] - cum).exp()
        chunk_decay = cum[..., -1, :].exp()[..., None]  # (B, H, n, h, 1)
        s = state.ssm if state is not None else q.new_zeros(batch, heads, width, width)
        out = []
        for i in range(chunks):
            read = s.to(q.dtype)  # the state in its own dtype (ssm_state_dtype), read in the activations'
            v_new = new_values[:, :, i] - k_decay[:, :, i] @ read  # (B, H, C, h)
            out.append(q[:, :, i] @ read + intra[:, :, i] @ v_new)
            s = s * chunk_decay[:, :, i] + k[:, :, i].transpose(-1, -2) @ v_new  # (B, H, h, h)
        if state is not None:
            state.ssm.copy_(s)
        return torch.cat(out, dim=2)[:, :, :length]  # (B, H, T, h)


class SigmoidHeadNorm(nn.Module):
    """RMSNorm over each head (one weight of head_dim for all heads), then times sigmoid(gate)."""

    def __init__(self, head_dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(head_dim))

    def forward(self, y: Tensor, gate: Tensor) -> Tensor:
        """y, gate (B, T, H, h) -> (B, T, H, h)."""
        normed = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + _EPS) * self.weight
        return normed * torch.sigmoid(gate)


class KimiDeltaMixer(MixerSublayer):
    """The Kimi Delta Attention sublayer of one block: its norm and the mixer (module docstring)."""

    def __init__(self, config: ResolvedShape, m: Mixer) -> None:
        super().__init__(config, m)
        self.gate = LowRankGates(config.embed_dim, m)
        self.ssm = KimiDeltaRule(m)
        self.gate_norm = SigmoidHeadNorm(m.head_dim)

    def transform(self, h: Tensor, state: MixerState | None = None) -> Tensor:
        """(B, T, d) -> (B, T, d); with ``state`` the T tokens continue the sequence it holds."""
        m = self.spec
        batch, length, _ = h.shape
        qkv, b = self.in_(h).split([m.conv_dim, m.num_heads], dim=-1)  # (B, T, 3 I), (B, T, H)
        qkv = self.conv(qkv, state)  # (B, T, 3 I)
        shape = (batch, length, m.num_heads, m.head_dim)
        q, k, v = (t.reshape(shape) for t in qkv.split([m.inner] * 3, dim=-1))
        f, gate = self.gate(h)  # (B, T, I) each
        y = self.ssm(q, k, v, b, f, state)  # (B, T, H, h)
        y = self.gate_norm(y, gate.reshape(shape))
        out: Tensor = self.out(y.reshape(batch, length, m.inner))
        return out
