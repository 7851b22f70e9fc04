"""Kernels the eager model launches (issue 35, item 7): the operations one prefill and one decode step of
embedcalc's own torch model call, as ``bench`` runs it, counted on the meta device.

The time model counts kernels as a fused stack launches them (:func:`embedcalc.analysis.time.model.
kernels_per_layer`: one QKV GEMM, one attention kernel, ...). ``bench`` runs the eager model, where every torch
operation the Python code calls is a dispatch of its own, views and copies included (a layer of GPT-2 calls 26 of
them in a decode step where a fused stack launches 10 kernels), and each pays the per-kernel overhead
``bench --peak`` measures (a chain of tiny operations). This module counts those calls: the model is built on the
meta device (no memory, no arithmetic) as :func:`embedcalc.modeling.generate.run_generation` builds it (QKV and
gate/up fused), and a :class:`~torch.overrides.TorchFunctionMode` counts every torch call that returns a tensor,
at the top level only (a call made inside another, a composite's own steps, is not counted again), the same
operations torch's profiler lists without a parent. For a dense model the count equals the profiler's on a real
run exactly (tests); a mixture-of-experts layer routes by its data, which the meta device routes
deterministically, so its count is that routing's.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from embedcalc.config.resolved import ResolvedShape
from embedcalc.modeling.attention import AttentionImpl
from embedcalc.modeling.fusion import fuse_projections
from embedcalc.modeling.generate import allocate_cache
from embedcalc.modeling.model import build_model
from embedcalc.modeling.steps import make_inputs


class _Count(TorchFunctionMode):
    """Counts the top-level torch calls that return a tensor (or a sequence of tensors)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))  # the mode is off while it runs: nested calls are not counted
        many = isinstance(out, (tuple, list)) and bool(out) and all(isinstance(o, torch.Tensor) for o in out)
        if isinstance(out, torch.Tensor) or many:
            self.calls += 1
        return out


def _counted(step: Any) -> tuple[int, Any]:
    count = _Count()
    with count:
        out = step()
    return count.calls, out


def eager_launches(
    config: ResolvedShape, batch_size: int, seq_len: int, attention: AttentionImpl
) -> tuple[int, int] | None:
    """(prefill, decode step): the eager model's top-level operations for ``batch_size`` prompts of ``seq_len``
    tokens (module docstring); an encoder's forward and 0; None for an encoder-decoder, which ``bench`` times
    apart."""
    if config.architecture == "encoder-decoder":
        return None
    meta = torch.device("meta")
    model = build_model(config, attention=attention, device=meta)
    fuse_projections(model)
    ids, _ = make_inputs(config, batch_size, seq_len, None, meta)
    with torch.inference_mode():
        if config.architecture == "encoder":
            return _counted(lambda: model(ids))[0], 0
        cache = allocate_cache(model, batch_size, seq_len + 1)

        def step(tokens: torch.Tensor, keep: int | None) -> torch.Tensor:  # greedy_generate's step
            return model.decode_step(tokens, cache, None, keep)[:, -1].argmax(dim=-1, keepdim=True)  # (B, 1)

        prefill, token = _counted(lambda: step(ids, 1))
        decode, _ = _counted(lambda: step(token, None))
    return prefill, decode
