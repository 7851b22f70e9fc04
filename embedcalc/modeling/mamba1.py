"""The Mamba-1 token mixer in plain PyTorch (Gu & Dao 2023, "Mamba", Algorithm 2; transformers' ``MambaMixer`` /
``JambaMambaMixer``): the selective scan run token by token, for a prompt and for a decode step alike.

Module tree (the keys of ``analysis/mixers.py``): ``mixer.in_`` (d -> x, z), ``mixer.conv``
(:class:`~embedcalc.modeling.ssm.CausalConv` over x), ``mixer.x_proj`` (x -> dt, B, C), ``mixer.bc_norm`` (Jamba's
RMSNorms of dt, B and C), ``mixer.dt_proj`` (dt_rank -> inner, biased), ``mixer.ssm`` (A_log, D and the scan: per
token the state is decayed and written element-wise and read out by C with one einsum, 2 I N FLOPs), ``mixer.out``.
The state is the conv window (B, inner, K) and the SSM state (B, 1, inner, N).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from embedcalc.config.mixer_plan import Mixer
from embedcalc.config.resolved import ResolvedShape
from embedcalc.modeling.ssm import MixerState, MixerSublayer


class SelectiveScan(nn.Module):
    """A_log (inner x N) and D (inner), and the sequential scan."""

    def __init__(self, m: Mixer) -> None:
        super().__init__()
        self.A_log = nn.Parameter(torch.empty(m.inner, m.state_size))
        self.D = nn.Parameter(torch.empty(m.inner))

    def forward(self, x: Tensor, dt: Tensor, b: Tensor, c: Tensor, state: MixerState | None) -> Tensor:
        """x, dt (B, T, I), b and c (B, T, N) -> y (B, T, I); ``state.ssm`` (B, 1, I, N) before and after."""
        a = -torch.exp(self.A_log)  # (I, N)
        decay = torch.exp(dt[..., None] * a)  # (B, T, I, N)
        write = (dt * x)[..., None] * b[:, :, None, :]  # (B, T, I, N)
        h = state.ssm[:, 0] if state is not None else x.new_zeros(x.shape[0], *self.A_log.shape)
        out = []
        for i in range(x.shape[1]):
            h = decay[:, i] * h + write[:, i]  # (B, I, N)
            out.append(torch.einsum("bdn,bn->bd", h.to(c.dtype), c[:, i]))  # (B, I); h in the state's dtype
        if state is not None:
            state.ssm[:, 0].copy_(h)
        return torch.stack(out, dim=1) + self.D * x


class BCNorm(nn.Module):
    """Jamba's RMSNorms of the time step, B and C (weights dt_rank, N, N)."""

    def __init__(self, m: Mixer) -> None:
        super().__init__()
        self.dt, self.b, self.c = (nn.RMSNorm(w, eps=1e-6) for w in (m.dt_rank, m.state_size, m.state_size))


class Mamba1Mixer(MixerSublayer):
    """The Mamba-1 sublayer of one block: its norm and the mixer (module docstring)."""

    def __init__(self, config: ResolvedShape, m: Mixer) -> None:
        super().__init__(config, m)
        self.x_proj = nn.Linear(m.inner, m.dt_rank + 2 * m.state_size, bias=False)
        self.bc_norm = BCNorm(m) if m.bc_norms else None
        self.dt_proj = nn.Linear(m.dt_rank, m.inner, bias=True)
        self.ssm = SelectiveScan(m)

    def transform(self, h: Tensor, state: MixerState | None = None) -> Tensor:
        """(B, T, d) -> (B, T, d); with ``state`` the T tokens continue the sequence it holds."""
        m = self.spec
        x, z = self.in_(h).chunk(2, dim=-1)  # (B, T, I) each
        x = self.conv(x, state)  # (B, T, I)
        dt, b, c = self.x_proj(x).split([m.dt_rank, m.state_size, m.state_size], dim=-1)
        if self.bc_norm is not None:
            dt, b, c = self.bc_norm.dt(dt), self.bc_norm.b(b), self.bc_norm.c(c)
        dt = F.softplus(self.dt_proj(dt))  # (B, T, I)
        y = self.ssm(x, dt, b, c, state) * F.silu(z)  # (B, T, I)
        out: Tensor = self.out(y)
        return out
