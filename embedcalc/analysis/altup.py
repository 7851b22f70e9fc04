"""Gemma 3n's AltUp and Laurel (``altup_inputs``, ``laurel_rank``; transformers 5.24 ``Gemma3nTextAltUp``,
``Gemma3nTextLaurelBlock``, ``Gemma3nTextModel``): their parameter tensors, forward FLOPs and saved activations,
one term function each, on ints or numpy grids.

Conventions (n = altup_inputs copies of the stream, d = embed_dim, r = laurel_rank, t tokens):

- parameters per layer: ``altup/router`` n x d, ``altup/router_norm`` (a norm of d), ``altup/predict`` n^2 x n,
  ``altup/correct`` n x n, ``altup/output_scale`` d; ``laurel/left`` r x d, ``laurel/right`` d x r, ``laurel/norm``
  (layers with self-attention and an FFN, :func:`embedcalc.config.altup.has_laurel`). Model: n - 1
  projections d x d after the embeddings (``embedding/altup_project``) and n - 1 before the final norm
  (``<stack>/altup_unembed``, held by the last pipeline stage).
- FLOPs (2 per multiply-accumulate, matmuls only, as ``FlopCounterMode`` counts): the router runs twice per layer
  (predict reads copy 0, correct the block's output): 2 x 2 t d n; predict projects the modalities to the n x n
  mixing matrix (2 t n^3) and mixes the copies with it ((t, d, n) @ (t, n, n): 2 t d n^2); correct projects them
  to n scales (2 t n^2); its innovation update and the output scale are element-wise (not counted). Laurel
  2 t d r twice. The model's projections 2 t d^2 each. RMS rescaling, tanh and the mean of the copies are
  element-wise.
- saved activations (training): each layer keeps the n copies it mixes and the n corrected ones, 2 n t d
  elements, and Laurel its rank-r intermediate and its output before the norm, t (r + d).
"""

from __future__ import annotations

from collections.abc import Callable

from embedcalc.analysis.structure import Num
from embedcalc.analysis.tensor import ParamTensor

NormTensors = Callable[[str, Num], list[ParamTensor]]


def altup_layer_tensors(n: int, d: Num, norm: NormTensors) -> list[ParamTensor]:
    """One layer's AltUp tensors; ``norm(key, width)`` gives a norm's tensors under the config's norm kind."""
    return [
        ParamTensor("altup/router", (n, d)),
        *norm("altup/router_norm", d),
        ParamTensor("altup/predict", (n * n, n)),
        ParamTensor("altup/correct", (n, n)),
        ParamTensor("altup/output_scale", (d,)),
    ]


def laurel_tensors(rank: int, d: Num, norm: NormTensors) -> list[ParamTensor]:
    """One layer's Laurel tensors."""
    return [
        ParamTensor("laurel/left", (rank, d)),
        ParamTensor("laurel/right", (d, rank)),
        *norm("laurel/norm", d),
    ]


def altup_model_tensor(key: str, n: int, d: Num, stack: str | None = None) -> ParamTensor:
    """The n - 1 d x d projections of ``key`` (``embedding/altup_project``, ``<stack>/altup_unembed``)."""
    return ParamTensor(key, (d, d), n - 1, stack=stack)


def altup_layer_flops(n: int, d: Num, layers: Num, t: Num) -> list[tuple[str, Num]]:
    """Forward FLOPs of ``layers`` layers' AltUp on ``t`` tokens (module docstring)."""
    return [
        ("altup/router", t * (layers * 2 * 2 * d * n)),
        ("altup/predict", t * (layers * (2 * n * n * n + 2 * d * n * n))),
        ("altup/correct", t * (layers * 2 * n * n)),
    ]


def laurel_flops(rank: int, d: Num, layers: Num, t: Num) -> list[tuple[str, Num]]:
    """Forward FLOPs of ``layers`` layers' Laurel on ``t`` tokens."""
    return [("laurel/left", t * (layers * 2 * d * rank)), ("laurel/right", t * (layers * 2 * rank * d))]


def altup_model_flops(n: int, d: Num, t: Num) -> Num:
    """Forward FLOPs of the n - 1 projections on each side of the stack, on ``t`` tokens (one side)."""
    return t * ((n - 1) * 2 * d * d)


def altup_saved_bytes(n: int, rank: int | None, d: Num, t: Num, element_bytes: Num) -> Num:
    """Bytes one layer keeps for the backward pass beyond its block's own (module docstring)."""
    return t * element_bytes * (2 * n * d + ((rank + d) if rank else 0))
