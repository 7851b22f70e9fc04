"""DeepSeek-V4's compressed attention (attention kind ``compressed``; transformers 5.24 ``DeepseekV4Attention``,
``DeepseekV4HCACompressor``, ``DeepseekV4CSACompressor`` and ``DeepseekV4Indexer``, ``modeling_deepseek_v4.py``;
DeepSeek-V4 report §2.3): its parameter tensors, forward FLOPs and cached values, one term function each, on ints
or numpy grids.

A layer of h heads of width hd, query rank r, compress rate m (0: none), c = 2 series per token with overlapping
windows (else 1), and an indexer of H_I heads of D_I keeping k entries:

- parameters: ``q_a`` Linear(d, r), ``q_a_norm`` Norm(r), ``q_b`` Linear(r, h hd) (the queries' own RMS norm per
  head has no weight); ``kv`` Linear(d, hd) (the one key, which is also the value), ``kv_norm`` Norm(hd); with a
  compressor ``compressor``: kv and gate Linear(d, c hd), a bias per window position (m, c hd), Norm(hd); with an
  indexer ``index_compressor`` (the same at D_I, always two series), ``index_q`` Linear(r, H_I D_I),
  ``index_weights`` Linear(d, H_I). The sinks and the output projection are the attention's own (``sinks``,
  ``out``). No biases.
- FLOPs: ``q_a`` 2 t d r, ``q_b`` 2 t r h hd, ``kv`` 2 t d hd, ``compressor`` 2 t d 2 c hd; the core over the n local
  keys and the T = n // m pooled entries: ``scores`` and ``context`` 2 b h pairs hd each, pairs n (n + T) in full
  (transformers' eager path masks, it does not skip) and causally the window's pairs plus, per query at position i,
  its (i + 1) // m visible entries (at most k with an indexer); the indexer ``index_compressor`` 2 t d 4 D_I,
  ``index_q`` 2 t r H_I D_I, ``index_weights`` 2 t d H_I, ``index_scores`` 2 b H_I D_I per query-entry pair (n T in
  full, the visible ones causally). The pooling (softmax-gated sums), the norms, rotary positions and the sinks are
  element-wise.
- cache after s tokens (transformers' ``DeepseekV4HCACache`` / ``DeepseekV4CSACache``): the window's keys, hd per
  token (:attr:`Attention.kv_cache_width`; a layer without a compressor is transformers' plain
  ``DynamicSlidingWindowLayer``, which keeps the same tensor as keys and as values: 2 hd), and beside them the
  s // m pooled entries (hd, and D_I for the indexer's), the s mod m tokens waiting for a full window (their kv and
  gate, 2 c hd and 4 D_I each), and with overlapping windows, once one closed, the last window's first series (kv
  and gate: 2 m hd, 2 m D_I).
- saved activations (training, :func:`compressed_saved`): per token the input (d), the query latent before and after
  its norm (2 r), the queries before and after their norm (2 h hd), the key before and after its norm (2 hd), the
  compressor's kv and gate (2 c hd), the context (h hd) and the grouped output's intermediate (G r_o); per sequence
  the T pooled entries (hd); the indexer selects without a gradient (integer indices), so nothing of it is saved.
  The core's scores cover the n local keys and the T entries.
"""

from __future__ import annotations

from collections.abc import Callable

from embedcalc.analysis.structure import Dims, Num, minimum
from embedcalc.analysis.tensor import ParamTensor
from embedcalc.analysis.tensor import linear as _linear
from embedcalc.config.layer_plan import Attention

NormTensors = Callable[[str, Num], list[ParamTensor]]


def _series(a: Attention) -> int:
    return 2 if a.compress_overlap else 1


def compressed_tensors(
    a: Attention, x: Dims, h: Num, hd: Num, prefix: str, norm: NormTensors
) -> list[ParamTensor]:
    """The projections of one compressed attention layer before its core (module docstring)."""
    d, r = x.d, a.q_lora_rank or 0
    out = _linear(f"{prefix}/q_a", d, r, False, "none") + norm(f"{prefix}/q_a_norm", r)
    out += _linear(f"{prefix}/q_b", r, h * hd, False, "column")
    out += _linear(f"{prefix}/kv", d, hd, False, "none") + norm(f"{prefix}/kv_norm", hd)
    if a.compress_rate:
        wide = _series(a) * hd
        out += _linear(f"{prefix}/compressor", d, 2 * wide, False, "none")  # kv and gate
        out += [
            ParamTensor(f"{prefix}/compressor", (a.compress_rate, wide)),
            *norm(f"{prefix}/compressor", hd),
        ]
    if a.compressed_indexer:
        heads, width = a.index_heads, a.index_head_dim
        out += _linear(f"{prefix}/index_compressor", d, 4 * width, False, "none")
        out += [ParamTensor(f"{prefix}/index_compressor", (a.compress_rate, 2 * width)),
                *norm(f"{prefix}/index_compressor", width)]  # fmt: skip
        out += _linear(f"{prefix}/index_q", r, heads * width, False, "none")
        out += _linear(f"{prefix}/index_weights", d, heads, False, "none")
    return out


def _visible(n: Num, m: int) -> Num:
    """Sum over the queries at positions 0 .. n - 1 of the pooled entries each sees, (i + 1) // m."""
    q, rest = n // m, n % m
    return m * q * (q - 1) // 2 + q * (rest + 1)


def _visible_capped(n: Num, m: int, k: int) -> Num:
    """The same, each query's count capped at k (the indexer's top-k): past position k m - 1 every query sees k."""
    first = k * m - 1  # queries 0 .. first - 1 see fewer than k
    head = minimum(n, first)
    return _visible(head, m) + k * (n - head)


def entry_pairs(a: Attention, n: Num, causal: bool) -> Num:
    """Query-entry pairs of the core over the pooled entries (per head, one sequence of n tokens)."""
    m = a.compress_rate
    if not m:
        return 0
    if not causal:
        return n * (n // m)
    return _visible_capped(n, m, a.index_topk) if a.compressed_indexer else _visible(n, m)


def compressed_flops(a: Attention, x: Dims, layers: Num, t: Num, b: Num, n: Num, h: Num, hd: Num, causal: bool,
                     window_pairs: Num, prefix: str) -> list[tuple[str, Num]]:  # fmt: skip
    """Forward FLOPs of ``layers`` compressed attention layers on b sequences of n tokens (t = b n) before the
    output projection; ``window_pairs`` the local query-key pairs per head (module docstring)."""
    d, r = x.d, a.q_lora_rank or 0
    pairs = window_pairs + entry_pairs(a, n, causal)
    terms: list[tuple[str, Num]] = [
        (f"{prefix}/q_a", t * (layers * 2 * d * r)),
        (f"{prefix}/q_b", t * (layers * 2 * r * h * hd)),
        (f"{prefix}/kv", t * (layers * 2 * d * hd)),
        (f"{prefix}/scores", b * pairs * (layers * 2 * h * hd)),
        (f"{prefix}/context", b * pairs * (layers * 2 * h * hd)),
    ]
    if a.compress_rate:
        terms.append((f"{prefix}/compressor", t * (layers * 2 * d * 2 * _series(a) * hd)))
    if a.compressed_indexer:
        heads, width = a.index_heads, a.index_head_dim
        index_pairs = n * (n // a.compress_rate) if not causal else _visible(n, a.compress_rate)
        terms += [
            (f"{prefix}/index_compressor", t * (layers * 2 * d * 4 * width)),
            (f"{prefix}/index_q", t * (layers * 2 * r * heads * width)),
            (f"{prefix}/index_weights", t * (layers * 2 * d * heads)),
            (f"{prefix}/index_scores", b * index_pairs * (layers * 2 * heads * width)),
        ]
    return terms


def compressed_cache_values(a: Attention, s: Num) -> Num:
    """Values a compressed layer caches per sequence after ``s`` tokens beside its window's keys: the pooled
    entries, the tokens waiting for a full window, and the last window's first series (module docstring)."""
    m = a.compress_rate
    if not m:
        return 0
    entries, waiting = s // m, s % m
    width = a.head_dim + (a.index_head_dim if a.compressed_indexer else 0)
    out = entries * width + waiting * 2 * _series(a) * a.head_dim
    if a.compressed_indexer:
        out = out + waiting * 4 * a.index_head_dim
    if a.compress_overlap:  # kept once a window has closed
        out = out + minimum(entries, 1) * 2 * m * width
    return out


def compressed_saved(a: Attention, q: Num, d: Num, e: int, b: Num, n: Num) -> tuple[Num, Num]:
    """(saved bytes of a compressed layer's projections on b sequences of n tokens, the pooled entries per sequence
    its core also scores); ``q`` = h hd on this rank, ``e`` bytes per activation (module docstring)."""
    hd, m = a.head_dim, a.compress_rate
    per_token = d + 2 * (a.q_lora_rank or 0) + 3 * q + 2 * hd + a.out_groups * a.out_rank
    if m:
        per_token = per_token + 2 * _series(a) * hd
    entries = n // m if m else 0
    return b * n * (e * per_token) + b * entries * (e * hd), entries
