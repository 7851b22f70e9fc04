"""Training activations of DeBERTa's disentangled attention (He et al. 2021, §3.1; transformers 5.24
``DisentangledSelfAttention.forward`` and ``disentangled_attention_bias`` of ``models/deberta_v2``): what autograd
saves for the position terms, beside the standard attention terms of :mod:`embedcalc.analysis.memory.training`.

Derived op by op from transformers' code and measured with ``saved_tensors_hooks`` on its model and on embedcalc's
(tests/analysis/test_disentangled_memory.py). Per layer, with b sequences of n tokens, h heads of hd (on one TP
rank), R = 2 span table rows, e bytes per activation value:

- each term (c2p, p2c): the position keys (c2p) or queries (p2c) of the table, broadcast over the batch
  (``.repeat``: b h R hd, saved by the bmm against them); that bmm's output, b h n R, saved by ``torch.gather``
  (its backward scatters into a tensor of the input's shape and reads the input); the gather's index, the n x n
  int64 of ``torch.clamp(relative_pos ± span)`` (one per term and layer, expanded over b h without a copy); and the
  0-dim scale it is divided by (``scaled_size_sqrt(...).to(dtype)``: e bytes);
- p2c also saves the keys K once more (t kv), the operand of its bmm: the content bmm saves K / scale, another
  tensor. The queries Q are shared by the content and c2p bmm's and saved once (in the standard terms);
- the content scores divide K by a 0-dim scale too: e bytes;
- the pre-gather scores, not the n x n gathered ones: a division by a constant saves only the divisor, and the sum
  of the three score terms saves nothing.

Once per stack: the table the layers project, when it is LayerNorm-ed (``norm_rel_ebd: layer_norm``): R d, saved
by every layer's projections as one tensor (un-normed, the table is the parameter itself). With dropout > 0
(``pos_dropout``, hidden_dropout_prob) each layer drops the table first and its projections save the dropped copy,
R d values and the 1-byte mask per layer, in place of the shared one (full recompute keeps the shared table: it is
an input of every recomputed layer). ``--recompute selective`` re-materialises the softmax core only: the position
terms stay saved; ``full`` keeps none of them.

The core is always eager (transformers' DeBERTa has no SDPA path, and neither has embedcalc's): the n x n softmax
output is saved whatever ``--attention`` says (:func:`eager_core`). Not counted, as for every encoder here: the
padding mask transformers builds and ``masked_fill``s with (``attention_mask.bool()``, b n² bytes per layer).
"""

from __future__ import annotations

from embedcalc.analysis.structure import Num
from embedcalc.analysis.workload import Workload
from embedcalc.config.resolved import ResolvedShape
from embedcalc.config.spec_shapes import DisentangledShape

INDEX_BYTES = 8  # the gather's int64 index
MASK_BYTES = 1


def eager_core(config: ResolvedShape, workload: Workload, cross: bool = False) -> bool:
    """Whether an attention layer runs the eager core (scores and softmax materialised): under ``--attention
    eager``, and always for disentangled self-attention, whose position terms need the scores."""
    return workload.attention == "eager" or (config.disentangled is not None and not cross)


def position_terms_saved(spec: DisentangledShape, b: Num, n: Num, heads: Num, q: Num, kv: Num, d: Num, e: int,
                         dropout: bool) -> Num:  # fmt: skip
    """Bytes one layer's position terms save (module docstring); ``q`` and ``kv`` are all heads' query and key
    widths on the rank (q = heads x hd)."""
    rows = spec.rows
    per_term = (b * rows) * (e * q) + (b * n * rows) * (e * heads) + (n * n) * INDEX_BYTES + e
    out = spec.terms * per_term + e  # and the content scores' scale
    if spec.p2c:
        out = out + (b * n) * (e * kv)
    if dropout:
        out = out + rows * d * (e + MASK_BYTES)
    return out


def table_saved(spec: DisentangledShape, d: Num, e: int, dropout: bool, recompute: str) -> Num:
    """Bytes of the normed table the stack's layers share (module docstring): R d e, or 0."""
    shared = not dropout or recompute == "full"
    return spec.rows * d * e if spec.norm and shared else 0
