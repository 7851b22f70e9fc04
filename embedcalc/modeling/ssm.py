"""The Mamba-2 token mixer in plain PyTorch (Dao & Gu 2024, "Transformers are SSMs", §6 and Listing 1): the chunked
(SSD) scan for a prompt, the recurrence for one decode step, and the fixed-size state generation carries.

Module tree (:mod:`embedcalc.modeling.counting` maps it to the keys of ``analysis/mixers.py``): ``mixer.in_``
(Linear d -> z, x, B, C, dt), ``mixer.conv`` (the causal depthwise convolution over x, B, C), ``mixer.ssm`` (A_log,
D, dt_bias and the scan), ``mixer.gate_norm`` (RMSNorm of the scan output gated by silu(z), per group; without
``gate_norm`` the output is only gated, Falcon-H1's ``mamba_rms_norm`` false), ``mixer.out`` (Linear inner -> d)
and ``mixer.norm`` (the sublayer's norm; none for a mixer beside the block's attention, which reads the
attention's norm). Every matmul runs inside one of the
keyed modules, so ``FlopCounterMode`` attributes it: the convolution (left-padded with the state, so its output is
exactly the kept tokens) and the scan's four einsums per chunk, C Bᵀ, (C Bᵀ ∘ L) X, Bᵀ X and C h, which torch
runs as bmm. The state is passed from chunk to chunk by an element-wise scan. The scan runs in the model's dtype
(transformers upcasts to float32; that changes values, not the count).

:class:`MixerState` holds, per sequence, the convolution's last ``conv_kernel`` inputs (B, conv_dim, K) and the SSM
state (B, H, P, N), allocated once before the prompt: its bytes are the analytic recurrent state.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from embedcalc.config.mixer_plan import Mixer
from embedcalc.config.resolved import ResolvedShape
from embedcalc.modeling.device import DTYPES
from embedcalc.modeling.norms import residual, sublayer_norm

_EPS = 1e-6


@dataclass
class MixerState:
    """One Mamba-2 layer's recurrent state: ``conv`` (B, conv_dim, K), the last K inputs of the convolution, and
    ``ssm`` (B, H, P, N)."""

    conv: Tensor
    ssm: Tensor

    def tensors(self) -> list[Tensor]:
        return [self.conv, self.ssm]

    def reset(self) -> None:
        """A new sequence: no inputs seen, a zero state."""
        self.conv.zero_()
        self.ssm.zero_()


def allocate_state(m: Mixer, batch_size: int, like: Tensor) -> MixerState:
    """A zero state of mixer ``m`` for ``batch_size`` sequences on ``like``'s device and dtype: the conv window
    (B, conv_dim, K) and the scan's state (B, *ssm_state_shape), the latter in the mixer's ``ssm_state_dtype``
    where it sets one."""
    conv = torch.zeros(batch_size, m.conv_dim, m.conv_kernel, device=like.device, dtype=like.dtype)
    dtype = DTYPES[m.ssm_state_dtype] if m.ssm_state_dtype is not None else like.dtype  # Nemotron-H: float32
    ssm = torch.zeros(batch_size, *m.ssm_state_shape, device=like.device, dtype=dtype)
    return MixerState(conv, ssm)


class CausalConv(nn.Module):
    """Depthwise causal Conv1d over ``channels`` with ``kernel`` taps: weight (C, 1, K), bias (C) when asked; silu
    after it unless ``activation`` is false (the short convolution)."""

    def __init__(self, channels: int, kernel: int, bias: bool, activation: bool = True) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(channels, 1, kernel))
        self.bias = nn.Parameter(torch.empty(channels)) if bias else None
        self.activation = activation

    def forward(self, x: Tensor, state: MixerState | None) -> Tensor:
        """(B, T, C) -> silu(conv(x)) (B, T, C); the K - 1 inputs before x come from ``state`` (zeros without),
        which then holds the last K inputs."""
        kernel = self.weight.shape[-1]
        xt = x.transpose(1, 2)  # (B, C, T)
        before = (
            state.conv[..., 1:] if state is not None else xt.new_zeros(xt.shape[0], xt.shape[1], kernel - 1)
        )  # (B, C, K - 1)
        padded = torch.cat((before, xt), dim=-1)  # (B, C, K - 1 + T)
        if state is not None:
            state.conv.copy_(padded[..., -kernel:])
        out = F.conv1d(padded, self.weight, self.bias, groups=xt.shape[1])  # (B, C, T)
        return (F.silu(out) if self.activation else out).transpose(1, 2)  # (B, T, C)


class MixerSublayer(nn.Module):
    """What every recurrent mixer's sublayer has, in this order of its module tree: ``in_`` (Linear d -> in_width),
    ``conv`` (:class:`CausalConv` over conv_dim channels; none when conv_dim is 0, lightning), the kind's own parts
    (added by the subclass's ``__init__``), ``out`` (Linear inner -> d) and ``norm`` (the sublayer's norm); the
    subclass writes :meth:`transform`, the residual wraps it."""

    conv: CausalConv

    def __init__(self, config: ResolvedShape, m: Mixer, conv_activation: bool = True) -> None:
        super().__init__()
        self.spec = m
        self.placement = config.resolved_norm_placement
        self.in_ = nn.Linear(config.embed_dim, m.in_width, bias=m.bias)
        if m.conv_dim:  # lightning attention has no convolution
            self.conv = CausalConv(m.conv_dim, m.conv_kernel, m.conv_bias, conv_activation)
        self.out = nn.Linear(m.inner, config.embed_dim, bias=m.out_proj_bias)
        # beside the block's attention (Falcon-H1) the mixer reads the attention's norm: none of its own
        self.norm = None if m.parallel else sublayer_norm(config)

    def transform(self, h: Tensor, state: MixerState | None = None) -> Tensor:
        """(B, T, d) -> (B, T, d); with ``state`` the T tokens continue the sequence it holds."""
        raise NotImplementedError

    def forward(self, x: Tensor, state: MixerState | None = None) -> Tensor:
        if self.norm is None:
            raise RuntimeError(
                "a mixer beside the block's attention has no norm of its own; the block calls transform"
            )
        return residual(x, self.norm, lambda h: self.transform(h, state), self.placement)


def _segment_sum(a: Tensor) -> Tensor:
    """(..., Q) -> (..., Q, Q): entry [i, j] = a[j+1] + ... + a[i] for j <= i, -inf above the diagonal."""
    q = a.shape[-1]
    expanded = a[..., None].expand(*a.shape, q)  # (..., Q, Q): [i, j] = a[i]
    below = torch.tril(torch.ones(q, q, dtype=torch.bool, device=a.device), diagonal=-1)
    sums = torch.cumsum(expanded.masked_fill(~below, 0), dim=-2)
    keep = torch.tril(torch.ones(q, q, dtype=torch.bool, device=a.device), diagonal=0)
    return sums.masked_fill(~keep, float("-inf"))


class SSDScan(nn.Module):
    """Mamba-2's selective scan: A_log, D and dt_bias per head; chunked for many tokens, recurrent for one."""

    def __init__(self, m: Mixer) -> None:
        super().__init__()
        self.spec = m
        self.A_log = nn.Parameter(torch.empty(m.num_heads))
        self.D = nn.Parameter(torch.empty(m.num_heads))
        self.dt_bias = nn.Parameter(torch.empty(m.num_heads))

    def forward(self, x: Tensor, dt: Tensor, b: Tensor, c: Tensor, state: MixerState | None) -> Tensor:
        """x (B, T, H, P), dt (B, T, H), b and c (B, T, G, N) -> y (B, T, H, P); ``state.ssm`` is the state
        before x and is left holding the state after it."""
        m = self.spec
        reps = m.num_heads // m.groups
        b = b.repeat_interleave(reps, dim=2)  # (B, T, H, N)
        c = c.repeat_interleave(reps, dim=2)  # (B, T, H, N)
        dt = F.softplus(dt + self.dt_bias)  # (B, T, H)
        a = -torch.exp(self.A_log) * dt  # (B, T, H)
        if state is not None and x.shape[1] == 1:
            y = self._step(x[:, 0], dt[:, 0], a[:, 0], b[:, 0], c[:, 0], state.ssm)[:, None]  # (B, 1, H, P)
        else:
            y = self._chunked(x * dt[..., None], a, b, c, state)
        return y + self.D[:, None] * x

    def _step(self, x: Tensor, dt: Tensor, a: Tensor, b: Tensor, c: Tensor, h: Tensor) -> Tensor:
        """One token: h <- exp(a) h + dt x bᵀ (element-wise), y = h c: x (B, H, P), b and c (B, H, N)."""
        h.copy_(h * torch.exp(a)[..., None, None] + (dt[..., None] * x)[..., None] * b[:, :, None, :])
        return torch.einsum("bhpn,bhn->bhp", h.to(c.dtype), c)  # (B, H, P); h in the state's dtype

    def _chunked(self, x: Tensor, a: Tensor, b: Tensor, c: Tensor, state: MixerState | None) -> Tensor:
        """The SSD algorithm over chunks of Q tokens (x already scaled by dt): (B, T, H, P) -> (B, T, H, P)."""
        batch, length, heads, p = x.shape
        q = self.spec.chunk_size
        chunks = -(-length // q)
        pad = chunks * q - length

        def split(t: Tensor) -> Tensor:  # (B, T, ...) -> (B, c, Q, ...), zero-padded
            t = F.pad(t, (0, 0) * (t.dim() - 2) + (0, pad))
            return t.reshape(batch, chunks, q, *t.shape[2:])

        x, b, c = split(x), split(b), split(c)  # (B, c, Q, H, P), (B, c, Q, H, N) twice
        a = split(a).permute(0, 3, 1, 2)  # (B, H, c, Q)
        a_cum = torch.cumsum(a, dim=-1)  # (B, H, c, Q)
        decay = torch.exp(_segment_sum(a))  # (B, H, c, Q, Q)
        scores = torch.einsum("bclhn,bcshn->bclsh", c, b)  # (B, c, Q, Q, H)
        masked = scores * decay.permute(0, 2, 3, 4, 1)  # (B, c, Q, Q, H)
        y_diag = torch.einsum("bclsh,bcshp->bclhp", masked, x)  # (B, c, Q, H, P)
        to_end = torch.exp(a_cum[..., -1:] - a_cum)  # (B, H, c, Q)
        b_decayed = b * to_end.permute(0, 2, 3, 1)[..., None]  # (B, c, Q, H, N)
        chunk_states = torch.einsum("bclhn,bclhp->bchpn", b_decayed, x)  # (B, c, H, P, N)
        chunk_decay = torch.exp(a_cum[..., -1])  # (B, H, c)
        h = state.ssm if state is not None else x.new_zeros(batch, heads, p, self.spec.state_size)
        starts = []
        for k in range(chunks):  # the state passing: element-wise, one multiply-add per state element
            starts.append(h)
            h = h * chunk_decay[:, :, k, None, None] + chunk_states[:, k]  # (B, H, P, N)
        if state is not None:
            state.ssm.copy_(h)
        start = torch.stack([s.to(c.dtype) for s in starts], dim=1)  # (B, c, H, P, N)
        y_off = torch.einsum("bclhn,bchpn->bclhp", c, start)  # (B, c, Q, H, P)
        y_off = y_off * torch.exp(a_cum).permute(0, 2, 3, 1)[..., None]
        y = (y_diag + y_off).reshape(batch, chunks * q, heads, p)
        return y[:, :length]


class GatedRMSNorm(nn.Module):
    """RMSNorm over groups of the scan output, gated by silu(z) before (or after) normalising."""

    def __init__(self, width: int, groups: int, norm_before_gate: bool) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.groups = groups
        self.norm_before_gate = norm_before_gate

    def forward(self, y: Tensor, z: Tensor) -> Tensor:
        """y, z (B, T, I) -> (B, T, I)."""
        if not self.norm_before_gate:
            y = y * F.silu(z)
        grouped = y.reshape(*y.shape[:-1], self.groups, -1)  # (B, T, G, I / G)
        grouped = grouped * torch.rsqrt(grouped.pow(2).mean(-1, keepdim=True) + _EPS)
        out = grouped.reshape(y.shape) * self.weight
        return out * F.silu(z) if self.norm_before_gate else out


class Mamba2Mixer(MixerSublayer):
    """The Mamba-2 sublayer of one block: its norm and the mixer (module docstring)."""

    def __init__(self, config: ResolvedShape, m: Mixer) -> None:
        super().__init__(config, m)
        self.ssm = SSDScan(m)
        self.gate_norm = GatedRMSNorm(m.inner, m.groups, m.norm_before_gate) if m.gate_norm else None

    def transform(self, h: Tensor, state: MixerState | None = None) -> Tensor:
        """(B, T, d) -> (B, T, d); with ``state`` the T tokens continue the sequence it holds."""
        m = self.spec
        batch, length, _ = h.shape
        projected = self.in_(h)  # (B, T, 2 I + 2 G N + H)
        z, xbc, dt = projected.split([m.inner, m.conv_dim, m.num_heads], dim=-1)
        xbc = self.conv(xbc, state)  # (B, T, conv_dim)
        x, b, c = xbc.split([m.inner, m.groups * m.state_size, m.groups * m.state_size], dim=-1)
        y = self.ssm(
            x.reshape(batch, length, m.num_heads, m.head_dim), dt,
            b.reshape(batch, length, m.groups, m.state_size), c.reshape(batch, length, m.groups, m.state_size),
            state,
        )  # (B, T, H, P)  # fmt: skip
        y = y.reshape(batch, length, m.inner)  # (B, T, I)
        gated = self.gate_norm(y, z) if self.gate_norm is not None else y * F.silu(z)  # (B, T, I)
        out: Tensor = self.out(gated)
        return out
