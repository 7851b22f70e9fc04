"""Gated DeltaNet linear attention in plain PyTorch (Yang, Kautz & Hatamizadeh 2025, "Gated Delta Networks"; the
algorithm of transformers' ``torch_chunk_gated_delta_rule`` / ``torch_recurrent_gated_delta_rule``, Qwen3-Next).

Module tree (the keys of ``analysis/mixers.py``): ``mixer.in_`` (one Linear d -> q, k, v, z, beta, a; transformers
splits it in two, the same numel and FLOPs), ``mixer.conv`` (the causal depthwise convolution over q, k, v,
:class:`~embedcalc.modeling.ssm.CausalConv`), ``mixer.ssm`` (A_log, dt_bias and the chunked delta rule),
``mixer.gate_norm`` (an RMSNorm over each value head, one weight of head_dim, times silu(z)), ``mixer.out``.
Within a chunk the rule's matmuls run as ``@`` (bmm: counted), the UT transform's two unit-triangular systems by
``torch.linalg.solve_triangular`` (not a matmul: ``FlopCounterMode`` counts none), in float32 below it (PyTorch's
CPU ``triangular_solve`` has no bf16 or fp16 kernel; transformers runs the whole rule in float32), and the state
passes from chunk to chunk through the per-chunk matmuls. One decode step runs the recurrence: the state decays, is
read by k (two einsums with the reads by q), and takes the rank-one delta update (element-wise).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from embedcalc.config.mixer_plan import Mixer
from embedcalc.config.resolved import ResolvedShape
from embedcalc.modeling.ssm import MixerState, MixerSublayer

_EPS = 1e-6


def _solve_unit_lower(a: Tensor, b: Tensor) -> Tensor:
    """X with a X = b for unit lower-triangular a (the UT transform), in float32 when the inputs are narrower."""
    wide = torch.promote_types(b.dtype, torch.float32)
    x: Tensor = torch.linalg.solve_triangular(a.to(wide), b.to(wide), upper=False, unitriangular=True)
    return x.to(b.dtype)


def _l2norm(x: Tensor) -> Tensor:
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + _EPS)


class DeltaRule(nn.Module):
    """The gated delta rule's parameters (A_log, dt_bias per value head) and its chunked and recurrent forms."""

    def __init__(self, m: Mixer) -> None:
        super().__init__()
        self.spec = m
        self.A_log = nn.Parameter(torch.empty(m.num_heads))
        self.dt_bias = nn.Parameter(torch.empty(m.num_heads))

    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, b: Tensor, a: Tensor, state: MixerState | None
    ) -> Tensor:
        """q, k (B, T, Hk, dk), v (B, T, Hv, dv), b and a (B, T, Hv) -> (B, T, Hv, dv); ``state.ssm``
        (B, Hv, dk, dv) holds the state before and is left holding the state after."""
        reps = self.spec.num_heads // self.spec.num_k_heads
        q, k = q.repeat_interleave(reps, dim=2), k.repeat_interleave(reps, dim=2)  # (B, T, Hv, dk)
        q, k = _l2norm(q) * q.shape[-1] ** -0.5, _l2norm(k)
        beta = torch.sigmoid(b)  # (B, T, Hv)
        g = -torch.exp(self.A_log) * F.softplus(a + self.dt_bias)  # (B, T, Hv), log decay <= 0
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # (B, Hv, T, d)
        beta, g = beta.transpose(1, 2), g.transpose(1, 2)  # (B, Hv, T)
        if state is not None and q.shape[2] == 1:
            return self._step(q[:, :, 0], k[:, :, 0], v[:, :, 0], beta[:, :, 0], g[:, :, 0], state.ssm)[
                :, None
            ]
        return self._chunked(q, k, v, beta, g, state).transpose(1, 2)

    def _step(self, q: Tensor, k: Tensor, v: Tensor, beta: Tensor, g: Tensor, s: Tensor) -> Tensor:
        """One token: S <- exp(g) S + k ((v - Sᵀk) beta)ᵀ, y = Sᵀ q; q, k (B, H, dk), v (B, H, dv) -> (B, H, dv)."""
        decayed = s * torch.exp(g)[..., None, None]  # (B, H, dk, dv)
        remembered = torch.einsum("bhkv,bhk->bhv", decayed.to(k.dtype), k)  # (B, H, dv)
        delta = (v - remembered) * beta[..., None]
        s.copy_(decayed + k[..., None] * delta[..., None, :])
        return torch.einsum("bhkv,bhk->bhv", s.to(q.dtype), q)  # (B, H, dv); s in the state's dtype

    def _chunked(
        self, q: Tensor, k: Tensor, v: Tensor, beta: Tensor, g: Tensor, state: MixerState | None
    ) -> Tensor:
        """The chunked rule: q, k (B, H, T, dk), v (B, H, T, dv), beta, g (B, H, T) -> (B, H, T, dv)."""
        batch, heads, length, dk = k.shape
        dv, c = v.shape[-1], self.spec.chunk_size
        pad = (c - length % c) % c
        q, k, v = (F.pad(t, (0, 0, 0, pad)) for t in (q, k, v))
        beta, g = F.pad(beta, (0, pad)), F.pad(g, (0, pad))
        chunks = (length + pad) // c

        def split(t: Tensor) -> Tensor:  # (B, H, L, d) -> (B, H, n, C, d)
            return t.reshape(batch, heads, chunks, c, t.shape[-1])

        k_beta, v_beta = split(k * beta[..., None]), split(v * beta[..., None])
        q, k = split(q), split(k)
        cum = g.reshape(batch, heads, chunks, c).cumsum(-1)  # (B, H, n, C)
        upper = torch.ones(c, c, dtype=torch.bool, device=q.device).triu(1)
        # (B, H, n, C, C)
        decay = (cum[..., :, None] - cum[..., None, :]).masked_fill(upper, float("-inf")).exp()
        ut = (k_beta @ k.transpose(-1, -2)) * decay  # (B, H, n, C, C)
        intra = (q @ k.transpose(-1, -2)) * decay
        # (B, H, n, C, dv)
        new_values = _solve_unit_lower(ut, v_beta)
        k_decay = _solve_unit_lower(ut, k_beta * cum.exp()[..., None])
        q = q * cum.exp()[..., None]
        k = k * (cum[..., -1:] - cum).exp()[..., None]
        chunk_decay = cum[..., -1].exp()[..., None, None]  # (B, H, n, 1, 1)
        s = state.ssm if state is not None else q.new_zeros(batch, heads, dk, dv)
        out = []
        for i in range(chunks):
            read = s.to(q.dtype)  # the state in its own dtype (ssm_state_dtype), read in the activations'
            v_new = new_values[:, :, i] - k_decay[:, :, i] @ read  # (B, H, C, dv)
            out.append(q[:, :, i] @ read + intra[:, :, i] @ v_new)
            s = s * chunk_decay[:, :, i] + k[:, :, i].transpose(-1, -2) @ v_new  # (B, H, dk, dv)
        if state is not None:
            state.ssm.copy_(s)
        return torch.cat(out, dim=2)[:, :, :length]  # (B, H, T, dv)


class HeadRMSNorm(nn.Module):
    """RMSNorm over each value head (one weight of head_dim for all heads), then times silu(z)."""

    def __init__(self, head_dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(head_dim))

    def forward(self, y: Tensor, z: Tensor) -> Tensor:
        """y, z (B, T, H, dv) -> (B, T, H, dv)."""
        normed = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + _EPS) * self.weight
        return normed * F.silu(z)


class GatedDeltaNetMixer(MixerSublayer):
    """The gated DeltaNet sublayer of one block: its norm and the mixer (module docstring)."""

    def __init__(self, config: ResolvedShape, m: Mixer) -> None:
        super().__init__(config, m)
        self.ssm = DeltaRule(m)
        self.gate_norm = HeadRMSNorm(m.head_dim)

    def transform(self, h: Tensor, state: MixerState | None = None) -> Tensor:
        """(B, T, d) -> (B, T, d); with ``state`` the T tokens continue the sequence it holds."""
        m = self.spec
        batch, length, _ = h.shape
        projected = self.in_(h)  # (B, T, conv_dim + inner + 2 Hv)
        qkv, z, b, a = projected.split([m.conv_dim, m.inner, m.num_heads, m.num_heads], dim=-1)
        qkv = self.conv(qkv, state)  # (B, T, conv_dim)
        q, k, v = qkv.split([m.key_dim, m.key_dim, m.inner], dim=-1)
        qk_shape = (batch, length, m.num_k_heads, m.head_k_dim)
        # (B, T, Hv, dv)
        y = self.ssm(
            q.reshape(qk_shape),
            k.reshape(qk_shape),
            v.reshape(batch, length, m.num_heads, m.head_dim),
            b,
            a,
            state,
        )
        y = self.gate_norm(y, z.reshape(batch, length, m.num_heads, m.head_dim))
        out: Tensor = self.out(y.reshape(batch, length, m.inner))
        return out
