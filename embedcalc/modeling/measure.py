"""Measured attention cost: time the model with and without its attention core, per sequence length.

Method (stated in the output): for each seq_len the same model runs twice per repetition, alternating — as built,
and with every attention core (Q·Kᵀ, mask, softmax, ·V, or the fused SDPA kernel) replaced by a pass-through
that returns Q unchanged, so projections, FFN, norms, embeddings and head still run. attention time = full −
without core; rest = without core. The replacement keeps every tensor shape, so the rest of the network does
exactly the same work.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from embedcalc.config.resolved import ResolvedShape
from embedcalc.modeling.attention import AttentionBase, AttentionImpl
from embedcalc.modeling.device import DTYPES
from embedcalc.modeling.model import build_model
from embedcalc.modeling.steps import make_inputs
from embedcalc.modeling.timing import StepCallback, time_steps


@dataclass(frozen=True)
class SplitPoint:
    """Median seconds of one forward pass at ``seq_len``: in full and without the attention core."""

    seq_len: int
    full_s: float
    without_core_s: float

    @property
    def attention_s(self) -> float:
        return max(0.0, self.full_s - self.without_core_s)

    @property
    def attention_share(self) -> float:
        return self.attention_s / self.full_s if self.full_s > 0 else 0.0


@contextmanager
def attention_core_removed(model: torch.nn.Module) -> Iterator[None]:
    """Within the block, every attention core returns its queries: (B, h, T, d_head) in, (B, h, T, d_head) out
    (zeros of the value width where it differs from the query width, as in latent attention)."""
    patched: list[AttentionBase] = []

    def passthrough(q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None) -> Tensor:
        if q.shape[-1] == v.shape[-1]:
            return q  # (B, h, T, d_head): the shape the core would return
        return q.new_zeros(*q.shape[:-1], v.shape[-1])  # (B, h, T, d_v)

    for module in model.modules():
        if isinstance(module, AttentionBase):
            module._core = passthrough  # type: ignore[method-assign]
            patched.append(module)
    try:
        yield
    finally:
        for module in patched:
            del module._core  # back to the class's method


def measure_attention_split(
    config: ResolvedShape, seq_lens: list[int], batch_size: int, dtype: str, attention: AttentionImpl,
    device: torch.device, warmup: int = 1, repeat: int = 3, on_step: StepCallback | None = None,
) -> list[SplitPoint]:  # fmt: skip
    """Time full and core-less forward passes at each seq_len (one model, built once)."""
    model = build_model(config, attention=attention, device=device, dtype=DTYPES[dtype])
    points = []
    for i, n in enumerate(seq_lens):
        src, tgt = make_inputs(config, batch_size, n, None, device)
        args: tuple[Any, ...] = (src,) if tgt is None else (src, tgt)

        def forward(args: tuple[Any, ...] = args) -> None:
            with torch.inference_mode():
                model(*args)

        full: list[float] = []
        bare: list[float] = []
        for _ in range(repeat):  # alternate so that machine noise hits both variants alike
            full += time_steps(forward, device, warmup, 1).seconds
            with attention_core_removed(model):
                bare += time_steps(forward, device, warmup, 1).seconds
        points.append(SplitPoint(n, statistics.median(full), statistics.median(bare)))
        if on_step:
            on_step("seq-len points", i + 1, len(seq_lens))
    return points


def measured_crossover(points: list[SplitPoint]) -> float | None:
    """The seq_len where measured attention time first reaches the rest, interpolated in log-log between the
    bracketing points; None if it never does within the points."""
    previous: tuple[int, float] | None = None
    for p in points:
        ratio = p.attention_s / p.without_core_s if p.without_core_s > 0 else math.inf
        if ratio >= 1.0:
            if previous is None or previous[1] <= 0:
                return float(p.seq_len)
            n0, r0 = previous
            if ratio == math.inf:
                return float(p.seq_len)
            t = (0.0 - math.log(r0)) / (math.log(ratio) - math.log(r0))
            return float(math.exp(math.log(n0) + t * (math.log(p.seq_len) - math.log(n0))))
        previous = (p.seq_len, ratio)
    return None
