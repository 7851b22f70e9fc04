"""A shared block beside a recurrent mixer (config/shared_spec.py; Zamba2, Zyphra 2024, arXiv:2411.15242 §2;
transformers' ``Zamba2HybridLayer``, ``Zamba2AttentionDecoderLayer``, ``Zamba2Attention``, ``Zamba2MLP``).

A layer with ``shared`` is a :class:`embedcalc.modeling.layers.Block` whose ``attention`` is a
:class:`SharedAttention` (its norm and Q/K/V over the input concatenated with the token embeddings, 2 d wide), whose
``ffn`` is a :class:`SharedFeedForward` and whose ``shared`` (:class:`SharedUse`) holds what each use owns: the
low-rank adapters (``attention_adapters``: q, k, v; ``ffn_adapters``: the FFN's input projection, gate and up) and the
bias-free d x d ``projection``. :func:`tie_shared_blocks` then makes the j-th such layer of a stack reuse the
attention's and FFN's projections and norms of the (j mod copies)-th, as transformers ties
``layers.N.shared_transformer`` to the first ``num_mem_blocks`` hybrid layers' (``Zamba2Model.get_layers``), so a
weight set is one set of ``Parameter`` objects and counts once. One forward (:func:`run_shared`):

    side = projection(ffn(ffn.norm(attention(attention.norm(concat(x, embeddings))))))
    out  = x + mixer(mixer.norm(x + side))

The per-use modules sit under ``<stack>.layers.N.shared`` (breakdown keys ``shared/attention_adapters``,
``shared/ffn_adapters``, ``shared/projection``). Zamba2 scales its scores by (head_dim / 2)^-1/2; that changes
values, not sizes or FLOPs, and is not modelled.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn

from embedcalc.config.layer_plan import Block as ResolvedBlock
from embedcalc.config.layer_plan import Shared
from embedcalc.config.resolved import ResolvedShape
from embedcalc.modeling.attention import Attention, AttentionImpl, Rotary
from embedcalc.modeling.attention_parts import QKV
from embedcalc.modeling.ffn import MLP, GatedInput, activate, activate_gated
from embedcalc.modeling.kv_cache import LayerCache
from embedcalc.modeling.norms import make_norm

Deltas = tuple[Tensor, Tensor, Tensor]


class LowRank(nn.Module):
    """One adapter: Linear(in -> rank) then Linear(rank -> out), no biases (Zamba2's ``nn.Sequential`` pairs)."""

    def __init__(self, width_in: int, rank: int, width_out: int) -> None:
        super().__init__()
        self.down = nn.Linear(width_in, rank, bias=False)
        self.up = nn.Linear(rank, width_out, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.up(self.down(x))  # (B, T, out)
        return out


class FFNAdapter(nn.Module):
    """The adapter a use adds to the FFN's input projection: ``down`` (d -> rank) then, for a gated FFN, ``gate`` and
    ``up`` (rank -> f each: Zamba2's one Linear(rank, 2 f), whose halves are added to gate and up, held as two so
    that tensor parallelism splits each with the projection it adapts), else ``up`` (rank -> f)."""

    def __init__(self, width: int, rank: int, ffn_dim: int, gated: bool) -> None:
        super().__init__()
        self.down = nn.Linear(width, rank, bias=False)
        self.gate = nn.Linear(rank, ffn_dim, bias=False) if gated else None
        self.up = nn.Linear(rank, ffn_dim, bias=False)

    def forward(self, x: Tensor) -> tuple[Tensor | None, Tensor]:
        h = self.down(x)  # (B, T, rank)
        return (self.gate(h) if self.gate is not None else None), self.up(h)  # (B, T, f) each


class AttentionAdapters(nn.Module):
    """The adapters a use adds to Q, K and V: (B, T, w) -> q (B, T, q_dim), k, v (B, T, kv_dim)."""

    def __init__(self, width: int, rank: int, q_dim: int, kv_dim: int) -> None:
        super().__init__()
        self.q, self.k, self.v = (
            LowRank(width, rank, q_dim),
            LowRank(width, rank, kv_dim),
            LowRank(width, rank, kv_dim),
        )

    def forward(self, x: Tensor) -> Deltas:
        return self.q(x), self.k(x), self.v(x)


class SharedUse(nn.Module):
    """What one use of a shared block owns: its adapters and its ``projection`` (d -> d, no bias)."""

    def __init__(self, config: ResolvedShape, spec: ResolvedBlock) -> None:
        super().__init__()
        use, a, ffn = spec.shared, spec.attention, spec.ffn
        assert use is not None and a is not None and ffn is not None  # the schema's rule (check_shared)
        d, r = config.embed_dim, use.adapter_rank
        wide = use.input_width(d)
        self.attention_adapters = (
            AttentionAdapters(wide, r, a.q_dim, a.kv_dim) if use.attention_adapters else None
        )
        self.ffn_adapters = FFNAdapter(d, r, ffn.ffn_dim, ffn.gated) if use.ffn_adapters else None
        self.projection = nn.Linear(d, d, bias=False)


class SharedAttention(Attention):
    """Standard self-attention whose norm and Q/K/V read the shared block's input (``wide`` channels) and whose
    output projection writes d; a use's adapter outputs are added to Q, K and V (:meth:`attend_adapted`)."""

    def __init__(
        self, config: ResolvedShape, spec: ResolvedBlock, *, impl: AttentionImpl, causal: bool
    ) -> None:
        a, use = spec.attention, spec.shared
        assert a is not None and use is not None
        super().__init__(config, a, impl=impl, causal=causal, cross=False, relative_bias=False)
        wide = use.input_width(config.embed_dim)
        self.qkv = QKV(wide, a.q_dim, a.kv_dim, a.qkv_bias, 2, a.v_kv_dim)
        self.norm = make_norm(config, wide)
        self.deltas: Deltas | None = None  # the current use's adapter outputs, for one call

    def _qkv(self, x: Tensor, memory: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
        q, k, v = self.qkv(x)  # (B, T, q_dim), (B, T, kv_dim) x2
        if self.deltas is None:
            return q, k, v
        dq, dk, dv = self.deltas
        return q + dq, k + dk, v + dv

    def attend_adapted(
        self, h: Tensor, adapters: AttentionAdapters | None, bias: Tensor | None, rotary: Rotary | None,
        cache: LayerCache | None, position: int,
    ) -> Tensor:  # fmt: skip
        """Attention on the normalised input ``h`` (B, T, wide) with the use's adapters: (B, T, d)."""
        self.deltas = adapters(h) if adapters is not None else None
        try:
            return self.attend(h, None, bias, rotary, cache, position)
        finally:
            self.deltas = None


class SharedFeedForward(nn.Module):
    """The shared block's FFN (``in_``, ``out``) behind its ``norm``, without a residual; a use's adapter output is
    added to the input projection's (gate and up, split in half, for a gated FFN: Zamba2's gate_up_proj)."""

    def __init__(self, config: ResolvedShape, width: int, bias: bool, down_bias: bool) -> None:
        super().__init__()
        mlp = MLP(config.embed_dim, width, bias, config.activation, down_bias)
        self.activation = config.activation
        self.in_, self.out, self.act = mlp.in_, mlp.out, mlp.act
        self.norm = make_norm(config)

    def forward(self, x: Tensor, adapter: FFNAdapter | None) -> Tensor:
        """(B, T, d) -> (B, T, d): norm, the input projection (+ the adapter), activation, output projection."""
        h = self.norm(x)  # (B, T, d)
        d_gate, d_up = adapter(h) if adapter is not None else (None, None)  # (B, T, f) each
        if isinstance(self.in_, GatedInput):
            gate, up = self.in_(h)  # (B, T, f) each
            gate = gate + d_gate if d_gate is not None else gate
            up = up + d_up if d_up is not None else up
            hidden = activate_gated(self.activation, gate, up)  # (B, T, f)
        else:
            pre = self.in_(h)  # (B, T, f)
            pre = pre + d_up if d_up is not None else pre
            hidden = self.act(pre) if self.act is not None else activate(self.activation, pre)
        out: Tensor = self.out(hidden)  # (B, T, d)
        return out


def run_shared(
    attention: SharedAttention, ffn: SharedFeedForward, use: SharedUse, spec: Shared, x: Tensor,
    embeddings: Tensor | None, mixer: Callable[[Tensor], Tensor], bias: Tensor | None, rotary: Rotary | None,
    cache: LayerCache | None, position: int,
) -> Tensor:  # fmt: skip
    """One layer with a shared block (module docstring): ``mixer`` is the mixer sublayer with its norm and
    residual-free transform, x -> mixer(norm(x)); returns x + mixer(x + side), (B, T, d)."""
    if spec.embeddings:
        if embeddings is None:
            raise ValueError("a shared block reads the token embeddings; the stack passes them")
        inputs = torch.cat([x, embeddings], dim=-1)  # (B, T, 2d)
    else:
        inputs = x
    h = attention.norm(inputs)  # (B, T, wide)
    attended = attention.attend_adapted(h, use.attention_adapters, bias, rotary, cache, position)  # (B, T, d)
    side = use.projection(ffn(attended, use.ffn_adapters))  # (B, T, d)
    return x + mixer(x + side)


def tie_shared_blocks(layers: Sequence[nn.Module], specs: Sequence[ResolvedBlock]) -> None:
    """Make the j-th layer with a shared block reuse the weight set of the (j mod copies)-th (module docstring):
    its attention's ``qkv``, ``out`` and ``norm`` and its FFN's ``in_``, ``out`` and ``norm``."""
    owners: list[nn.Module] = []
    for layer, spec in zip(layers, specs, strict=True):
        if spec.shared is None:
            continue
        j = len(owners)
        owners.append(layer if j < spec.shared.copies else owners[j % spec.shared.copies])
        if owners[j] is layer:
            continue
        for part, names in (("attention", ("qkv", "out", "norm")), ("ffn", ("in_", "out", "norm"))):
            mine, theirs = getattr(layer, part), getattr(owners[j], part)
            for name in names:
                setattr(mine, name, getattr(theirs, name))
