"""Manifold-constrained hyper-connections (DeepSeek-V4's mHC; ``hyper_connections``): the torch reference of
:mod:`embedcalc.analysis.hyper`, written from transformers 5.24's ``DeepseekV4HyperConnection`` and
``DeepseekV4HyperHead`` (``modeling_deepseek_v4.py``; DeepSeek-V4 report §2.2, Xie et al. 2026).

The stream is (B, T, n, d). Around each residual sublayer, :class:`HyperConnection` reads the n streams flattened
and RMS-normalised (no weight), projects them to (2 + n) n weights and splits them: ``pre`` (n, sigmoid + eps)
collapses the streams into the sublayer's input, ``post`` (n, 2 sigmoid) spreads its output back, ``comb`` (n x n,
softmax + eps, then Sinkhorn-normalised over rows and columns) mixes the streams: streams' = post x out + combᵀ
streams. :class:`HyperHead` collapses the streams before the final norm with its own n weights.

Each module is called twice per sublayer (weights, then the mix), so that ``FlopCounterMode`` files both matmuls
under its key (``<stack>/hyper/<sublayer>``, :mod:`embedcalc.modeling.counting`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

_EPS = 1e-6  # DeepseekV4Config's hc_eps and rms_norm_eps defaults
SINKHORN_ITERS = 20  # DeepseekV4Config.hc_sinkhorn_iters (element-wise: no FLOPs counted)


def _rms(x: Tensor) -> Tensor:
    """RMS normalisation without a weight (DeepseekV4UnweightedRMSNorm)."""
    return x * torch.rsqrt(x.float().square().mean(-1, keepdim=True) + _EPS).to(x.dtype)


class HyperConnection(nn.Module):
    """One sublayer's hyper-connection: ``fn`` ((2 + n) n, n d), ``base`` ((2 + n) n), ``scale`` (3)."""

    def __init__(self, n: int, d: int) -> None:
        super().__init__()
        self.n = n
        width = (2 + n) * n
        self.fn = nn.Parameter(torch.randn(width, n * d) * 0.02)
        self.base = nn.Parameter(torch.zeros(width))
        self.scale = nn.Parameter(torch.ones(3))

    def forward(self, streams: Tensor, weights: tuple[Tensor, Tensor] | None = None, out: Tensor | None = None
                ) -> tuple[Tensor, Tensor, Tensor] | Tensor:  # fmt: skip
        """Without ``weights``: (post (B, T, n), comb (B, T, n, n), the collapsed input (B, T, d)) of ``streams``
        (B, T, n, d). With ``weights`` = (post, comb) and the sublayer's ``out`` (B, T, d): the mixed streams."""
        n = self.n
        if weights is not None and out is not None:
            post, comb = weights
            return post.unsqueeze(-1) * out.unsqueeze(-2) + torch.matmul(comb.transpose(-1, -2), streams)
        flat = _rms(streams.flatten(2).float())  # (B, T, n d)
        mixed = nn.functional.linear(flat, self.fn.float())  # (B, T, (2 + n) n)
        pre_w, post_w, comb_w = mixed[..., :n], mixed[..., n : 2 * n], mixed[..., 2 * n :]
        pre_b, post_b, comb_b = self.base[:n], self.base[n : 2 * n], self.base[2 * n :]
        scale = self.scale.float()
        pre = torch.sigmoid(pre_w * scale[0] + pre_b) + _EPS
        post = 2 * torch.sigmoid(post_w * scale[1] + post_b)
        comb = (
            torch.softmax(comb_w.reshape(*comb_w.shape[:-1], n, n) * scale[2] + comb_b.view(n, n), dim=-1)
            + _EPS
        )
        comb = comb / (comb.sum(dim=-2, keepdim=True) + _EPS)
        for _ in range(SINKHORN_ITERS - 1):
            comb = comb / (comb.sum(dim=-1, keepdim=True) + _EPS)
            comb = comb / (comb.sum(dim=-2, keepdim=True) + _EPS)
        collapsed = (pre.unsqueeze(-1) * streams).sum(dim=2).to(streams.dtype)  # (B, T, d)
        return post.to(streams.dtype), comb.to(streams.dtype), collapsed

    def around(self, streams: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        """``streams`` (B, T, n, d) after ``sublayer`` (its norm and transform, no residual: (B, T, d) -> (B, T, d))
        ran on their collapse."""
        post, comb, collapsed = self(streams)
        mixed: Tensor = self(streams, (post, comb), sublayer(collapsed))
        return mixed


class HyperHead(nn.Module):
    """The final collapse of the streams: ``fn`` (n, n d), ``base`` (n), ``scale`` (1)."""

    def __init__(self, n: int, d: int) -> None:
        super().__init__()
        self.fn = nn.Parameter(torch.randn(n, n * d) * 0.02)
        self.base = nn.Parameter(torch.zeros(n))
        self.scale = nn.Parameter(torch.ones(1))

    def forward(self, streams: Tensor) -> Tensor:
        """(B, T, n, d) -> (B, T, d)."""
        mixes = nn.functional.linear(_rms(streams.flatten(2).float()), self.fn.float())  # (B, T, n)
        pre = torch.sigmoid(mixes * self.scale.float() + self.base.float()) + _EPS
        return (pre.unsqueeze(-1) * streams).sum(dim=2).to(streams.dtype)


def expand_streams(embedded: Tensor, n: int) -> Tensor:
    """The decoder's input streams: (B, T, d) -> (B, T, n, d), n copies of the embeddings."""
    return embedded.unsqueeze(2).expand(-1, -1, n, -1).contiguous()
