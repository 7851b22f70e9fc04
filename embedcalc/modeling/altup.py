"""Gemma 3n's residual-stream parts in plain PyTorch: AltUp (Baykal et al. 2023, "Alternating Updates for Efficient
Transformers", NeurIPS; transformers 5.24 ``Gemma3nTextAltUp`` and ``Gemma3nTextModel.forward``) and Laurel
(``Gemma3nTextLaurelBlock``).

AltUp keeps the residual stream as n = ``altup_inputs`` copies (n, B, T, d). After the embeddings, copies 1 .. n-1
are ``embedding.altup_project.<i>`` (d x d) of the embedded tokens, rescaled to their RMS; every layer then

- **predicts** all copies: a router reads copy 0 (``altup.router_norm``, scaled by 1/d, ``altup.router`` d -> n,
  tanh), ``altup.predict`` turns that into an n x n mixing matrix per token (n -> n^2) and mixes the copies with it
  (a (B, T, d, n) @ (B, T, n, n) matmul), added to them;
- runs the block on prediction 0 only;
- **corrects** all copies with the innovation (the block's output minus prediction 0), each scaled by 1 +
  ``altup.correct`` (n -> n) of the router's reading of the output;
- scales corrected copy 0 by ``altup.output_scale`` (d) and feeds it to the per-layer input, whose result is added
  to copies 1 .. n-1 (not 0, unlike Gemma 4).

Before the final norm, copies 1 .. n-1 go through ``<stack>.altup_unembed.<i>`` (d x d), are rescaled to the RMS
of copy 0, and the n copies are averaged. Laurel: beside a layer's attention, its normalised input x goes through
``laurel.left`` (d -> r), ``laurel.right`` (r -> d) and ``laurel.norm``; x plus that is added to the attention
residual and the sum halved in variance (/ sqrt 2). Every matmul runs inside the module whose path is its breakdown
key, so ``FlopCounterMode`` attributes it there.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from embedcalc.config.resolved import ResolvedShape
from embedcalc.modeling.norms import make_norm

_MIN_SQUARE = 1e-5  # Gemma3nTextModel.forward clamps the mean square of a projected copy at 1e-5


def _rescaled(x: Tensor, target: Tensor) -> Tensor:
    """``x`` (B, T, d) rescaled to the RMS ``target`` (B, T, 1), as Gemma3nTextModel does its copies."""
    square = x.pow(2).mean(dim=-1, keepdim=True).clamp(min=_MIN_SQUARE)  # (B, T, 1)
    return x * target / square.sqrt()


def _rms(x: Tensor) -> Tensor:
    return x.pow(2).mean(dim=-1, keepdim=True).sqrt()  # (B, T, 1)


def altup_projections(config: ResolvedShape) -> nn.ModuleList:
    """n - 1 bias-free d x d projections (``embedding.altup_project`` / ``<stack>.altup_unembed``)."""
    n = config.altup_inputs or 1
    return nn.ModuleList(nn.Linear(config.embed_dim, config.embed_dim, bias=False) for _ in range(n - 1))


def expand_streams(projections: nn.ModuleList, x: Tensor) -> Tensor:
    """The embedded tokens (B, T, d) -> the n copies (n, B, T, d)."""
    target = _rms(x)  # (B, T, 1)
    return torch.stack([x, *(_rescaled(p(x), target) for p in projections)])  # (n, B, T, d)


def fold_streams(projections: nn.ModuleList, streams: Tensor) -> Tensor:
    """The n copies (n, B, T, d) -> their mean (B, T, d), copies 1 .. n-1 unembedded first."""
    target = _rms(streams[0])  # (B, T, 1)
    copies = [streams[0], *(_rescaled(p(s), target) for p, s in zip(projections, streams[1:], strict=True))]
    return torch.stack(copies).mean(dim=0)  # (B, T, d)


class _Coefficients(nn.Module):
    """A bias-free n -> ``width`` projection of the router's modalities."""

    def __init__(self, n: int, width: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(width, n))


class _Predict(_Coefficients):
    def forward(self, streams: Tensor, modalities: Tensor) -> Tensor:
        """(n, B, T, d) copies and (B, T, n) modalities -> (n, B, T, d) predictions."""
        n, batch, length, _ = streams.shape
        coefs = F.linear(modalities, self.weight).view(batch, length, n, n).transpose(-1, -2)  # (B, T, n, n)
        mixed = torch.matmul(streams.permute(1, 2, 3, 0), coefs)  # (B, T, d, n)
        return mixed.permute(3, 0, 1, 2) + streams  # (n, B, T, d)


class _Correct(_Coefficients):
    def forward(self, predictions: Tensor, activated: Tensor, modalities: Tensor) -> Tensor:
        """(n, B, T, d) predictions, the block's (B, T, d) output and (B, T, n) modalities -> (n, B, T, d)."""
        innovation = activated - predictions[0]  # (B, T, d)
        coefs = F.linear(modalities, self.weight) + 1.0  # (B, T, n)
        return predictions + innovation.unsqueeze(0) * coefs.permute(2, 0, 1).unsqueeze(-1)  # (n, B, T, d)


class _Scale(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(width))


class AltUp(nn.Module):
    """One layer's AltUp: ``router_norm``, ``router`` (d -> n), ``predict`` (n -> n^2), ``correct`` (n -> n) and
    ``output_scale`` (d), around the block's own sublayers."""

    def __init__(self, config: ResolvedShape, n: int) -> None:
        super().__init__()
        d = config.embed_dim
        self.router_norm = make_norm(config)
        self.router = nn.Linear(d, n, bias=False)
        self.predict = _Predict(n, n * n)
        self.correct = _Correct(n, n)
        self.output_scale = _Scale(d)
        self.router_scale = 1.0 / d  # Gemma3nTextAltUp.router_input_scale (a buffer)

    def _modalities(self, x: Tensor) -> Tensor:
        return torch.tanh(self.router(self.router_norm(x) * self.router_scale))  # (B, T, n)

    def forward(self, streams: Tensor, block: Callable[[Tensor], Tensor]) -> tuple[Tensor, Tensor]:
        """The (n, B, T, d) copies through ``block`` (on prediction 0) -> the corrected copies (n, B, T, d) and
        corrected copy 0 scaled (B, T, d), which the per-layer input reads."""
        predictions = self.predict(streams, self._modalities(streams[0]))  # (n, B, T, d)
        activated = block(predictions[0])  # (B, T, d)
        corrected = self.correct(predictions, activated, self._modalities(activated))  # (n, B, T, d)
        return corrected, corrected[0] * self.output_scale.weight


class Laurel(nn.Module):
    """Gemma 3n's learned augmented residual beside attention: ``left`` (d -> r), ``right`` (r -> d), ``norm``."""

    def __init__(self, config: ResolvedShape, rank: int) -> None:
        super().__init__()
        self.left = nn.Linear(config.embed_dim, rank, bias=False)
        self.right = nn.Linear(rank, config.embed_dim, bias=False)
        self.norm = make_norm(config)

    def beside(self, x: Tensor, norm: nn.Module, attend: Callable[[Tensor], Tensor]) -> Tensor:
        """The attention sublayer of ``x`` (B, T, d) with Laurel beside it: ``norm`` is the sublayer's (a sandwich
        normalises its output too) -> (x + attn + normed + laurel(normed)) / sqrt 2, (B, T, d)."""
        normed = norm(x)  # (B, T, d): the input norm (SandwichNorm's forward is its ``before``)
        attended = attend(normed)  # (B, T, d)
        after = getattr(norm, "after", None)
        if after is not None:
            attended = after(attended)
        laurel: Tensor = normed + self.norm(self.right(self.left(normed)))  # (B, T, d)
        return (x + attended + laurel) / math.sqrt(2)
