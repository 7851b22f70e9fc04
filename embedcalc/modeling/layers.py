"""One Transformer layer: the attention and FFN sublayers of a resolved :class:`embedcalc.config.layer_plan.Block`
(and the cross-attention of an encoder-decoder's decoder), wired by the config's norm placement.

Each sublayer owns its norm(s), so the module tree mirrors the analytic breakdown keys (docs/layers.md):
``attention/...`` (:mod:`embedcalc.modeling.attention`), ``ffn/in``, ``ffn/out``, ``ffn/norm``
(:mod:`embedcalc.modeling.ffn`), and for a mixture of experts ``ffn.moe.*``, which
:mod:`embedcalc.modeling.counting` files under ``moe/...`` (the sublayer's norms stay ``ffn/norm``); a sublayer
replaced by a linear is ``mixer.projection`` / ``ffn.projection`` beside its ``norm`` (:class:`Projection`).

Placements: pre, post and sandwich wrap each sublayer (:func:`embedcalc.modeling.norms.residual`). ``parallel``
(GPT-J, GPT-NeoX, phi-2) runs attention and FFN on the same input, x + attn(n1(x)) + ffn(n2(x)), with n2 = n1
(one norm, under ``attention/norm``) when ``parallel_norms`` is 1; a decoder's cross-attention, if any, runs
before them as a pre-norm sublayer. A recurrent mixer with ``parallel_attention`` (Falcon-H1) runs beside the
attention on the output of its norm, x + attn(n(x)) + mixer(n(x)), before the FFN's own pre-norm sublayer.
A block whose attention is cross-attention over an external sequence (Llama-3.2-Vision) attends from the text to
``memory``, the external tokens (no rotary positions, no mask), through a cross cache filled at prefill; with tanh
gates each sublayer's output is scaled by tanh(g) before its residual add (``attention/tanh_gate``,
``ffn/tanh_gate``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import torch
from torch import Tensor, nn

from embedcalc.config.altup import has_laurel
from embedcalc.config.hyper import hyper_sublayers
from embedcalc.config.layer_plan import FFN as ResolvedFFN
from embedcalc.config.layer_plan import Attention as ResolvedAttention
from embedcalc.config.layer_plan import Block as ResolvedBlock
from embedcalc.config.mixer_plan import Mixer
from embedcalc.config.resolved import ResolvedShape
from embedcalc.modeling.altup import AltUp, Laurel
from embedcalc.modeling.attention import Attention, AttentionBase, AttentionImpl, Rotary
from embedcalc.modeling.attention_parts import embedding_table
from embedcalc.modeling.block_sparse_attention import BlockSparseAttention
from embedcalc.modeling.compressed_attention import CompressedAttention
from embedcalc.modeling.deltanet import GatedDeltaNetMixer
from embedcalc.modeling.disentangled import DisentangledAttention
from embedcalc.modeling.ffn import MLP
from embedcalc.modeling.hyper import HyperConnection
from embedcalc.modeling.kda import KimiDeltaMixer
from embedcalc.modeling.kv_cache import BlockCache
from embedcalc.modeling.latent_attention import LatentAttention
from embedcalc.modeling.lightning import LightningMixer
from embedcalc.modeling.mamba1 import Mamba1Mixer
from embedcalc.modeling.moe import BranchNorms, MoE, Routing
from embedcalc.modeling.norms import TanhGate, gated, make_norm, residual, sublayer_norm
from embedcalc.modeling.per_layer import PerLayerSublayer
from embedcalc.modeling.shared_block import SharedAttention, SharedFeedForward, SharedUse, run_shared
from embedcalc.modeling.shared_kv import ExternalKVAttention, SharedKVAttention
from embedcalc.modeling.short_conv import ShortConvMixer
from embedcalc.modeling.sparse_attention import SparseAttention
from embedcalc.modeling.ssm import Mamba2Mixer, MixerSublayer

__all__ = [
    "AttentionImpl",
    "Block",
    "FeedForward",
    "MoEFeedForward",
    "Projection",
    "embedding_table",
    "make_norm",
]


def make_attention(
    config: ResolvedShape,
    spec: ResolvedAttention,
    *,
    impl: AttentionImpl,
    causal: bool,
    cross: bool,
    relative_bias: bool,
) -> AttentionBase:
    """The attention sublayer of ``spec``: DeepSeek sparse attention for kind sparse, block-sparse attention for a
    standard one with a block indexer, DeBERTa's disentangled
    attention for a config with ``disentangled``, latent attention for kind mla, else :class:`Attention`. It lives
    here, beside its only caller, so that attention.py (the base the other kinds build on) imports none of them."""
    if spec.compressed:  # DeepSeek-V4
        return CompressedAttention(config, spec, impl=impl, causal=causal)
    if spec.kind == "sparse":
        return SparseAttention(config, spec, impl=impl, causal=causal, relative_bias=relative_bias)
    if config.disentangled is not None and not cross:  # DeBERTa: relative_bias marks the table's owner
        return DisentangledAttention(config, spec, impl=impl, owns_table=relative_bias)
    if spec.kind == "mla":
        return LatentAttention(config, spec, impl=impl, causal=causal, relative_bias=relative_bias)
    if spec.kv_external:  # a drafter's: the target's keys and values
        return ExternalKVAttention(config, spec, impl=impl, causal=causal)
    if spec.kv_shared:
        return SharedKVAttention(config, spec, impl=impl, causal=causal)
    if spec.block_indexer and not cross:
        return BlockSparseAttention(config, spec, impl=impl, causal=causal, relative_bias=relative_bias)
    return Attention(config, spec, impl=impl, causal=causal, cross=cross, relative_bias=relative_bias)


def make_mixer(config: ResolvedShape, m: Mixer, depth: tuple[int, int] = (0, 1)) -> nn.Module:
    """The recurrent mixer sublayer of kind ``m.kind``: Mamba-2 (:mod:`embedcalc.modeling.ssm`, which also holds
    the base the others build on), gated DeltaNet, Mamba-1, the short convolution, lightning attention (whose
    decay rates depend on ``depth``, the layer's index and the stack's layer count). Here, beside its only caller,
    so that ssm.py imports none of the kinds built on it."""
    if m.lightning:
        return LightningMixer(config, m, *depth)
    if m.short_conv:
        return ShortConvMixer(config, m)
    if m.deltanet:
        return GatedDeltaNetMixer(config, m)
    if m.kda:
        return KimiDeltaMixer(config, m)
    if m.mamba1:
        return Mamba1Mixer(config, m)
    return Mamba2Mixer(config, m)


def _ffn_residual(
    x: Tensor, norm: nn.Module | None, transform: Callable[[Tensor], Tensor], placement: str
) -> Tensor:
    """An FFN sublayer's forward: ``transform`` inside its norm and residual; a one-norm parallel block's FFN has no
    norm (the block calls ``transform`` itself)."""
    if norm is None:
        raise RuntimeError(
            "a one-norm parallel block's FFN has no norm of its own; the block calls transform"
        )
    return residual(x, norm, transform, placement)


class FeedForward(MLP):
    """The dense FFN sublayer: ``in_``, ``out`` and its ``norm`` (None for the FFN of a one-norm parallel block);
    ``tanh_gate`` scales its output in a tanh-gated block (Mllama's cross_attn_mlp_gate)."""

    def __init__(self, config: ResolvedShape, spec: ResolvedFFN, norm: bool, tanh_gate: bool = False) -> None:
        super().__init__(config.embed_dim, spec.ffn_dim, spec.bias, config.activation, spec.down_bias)
        self.placement = config.resolved_norm_placement
        self.norm = sublayer_norm(config) if norm else None
        self.tanh_gate = TanhGate() if tanh_gate else None

    def forward(self, x: Tensor) -> Tensor:
        return _ffn_residual(x, self.norm, gated(self.transform, self.tanh_gate), self.placement)


class MoEFeedForward(nn.Module):
    """The mixture-of-experts FFN sublayer: ``moe`` (router, experts, shared experts), its ``norm`` and, in a
    tanh-gated block, ``tanh_gate``."""

    def __init__(
        self, config: ResolvedShape, spec: ResolvedFFN, norm: bool, routing: Routing, tanh_gate: bool = False
    ) -> None:
        super().__init__()
        self.placement = config.resolved_norm_placement
        norms = (
            BranchNorms(make_norm(config), make_norm(config), make_norm(config))
            if spec.branch_norms
            else None
        )
        self.moe = MoE(config.embed_dim, spec, config.activation, routing, norms)
        self.norm = sublayer_norm(config) if norm else None
        self.tanh_gate = TanhGate() if tanh_gate else None

    def transform(self, x: Tensor) -> Tensor:
        out: Tensor = self.moe(x)  # (B, T, d)
        return out

    def forward(self, x: Tensor) -> Tensor:
        return _ffn_residual(x, self.norm, gated(self.transform, self.tanh_gate), self.placement)


class Projection(nn.Module):
    """A sublayer replaced by one bias-free d x d linear behind its own norm and residual: DeciLM's
    ``replace_with_linear`` (``DeciLMLinearAttention`` / ``DeciLMLinearMLP`` in NVIDIA's ``modeling_decilm.py``,
    which keep ``input_layernorm`` / ``post_attention_layernorm``). In place of the mixer it mixes no tokens and
    caches nothing; ``norm`` is None for the FFN of a one-norm parallel block, as for :class:`FeedForward`."""

    def __init__(self, config: ResolvedShape, norm: bool) -> None:
        super().__init__()
        self.placement = config.resolved_norm_placement
        self.projection = nn.Linear(config.embed_dim, config.embed_dim, bias=False)
        self.norm = sublayer_norm(config) if norm else None

    def transform(self, x: Tensor) -> Tensor:
        out: Tensor = self.projection(x)  # (B, T, d)
        return out

    def forward(self, x: Tensor, state: object = None) -> Tensor:
        """(B, T, d) -> (B, T, d); ``state`` is what a recurrent mixer in its place would take (none here)."""
        return _ffn_residual(x, self.norm, self.transform, self.placement)


class Block(nn.Module):
    """One Transformer layer: self-attention, cross-attention (decoder of an encoder-decoder), FFN."""

    def __init__(
        self,
        config: ResolvedShape,
        spec: ResolvedBlock,
        *,
        impl: AttentionImpl,
        causal: bool,
        cross_attention: ResolvedAttention | None,
        relative_bias: bool,
        routing: Routing = "real",
        depth: tuple[int, int] = (0, 1),
    ) -> None:
        super().__init__()
        self.parallel = config.resolved_norm_placement == "parallel"
        # cross-attention over an external sequence (Llama-3.2-Vision) is this block's attention, K/V from memory
        self.external = spec.attention is not None and spec.attention.external
        self.attention: AttentionBase | None = (
            make_attention(
                config,
                spec.attention,
                impl=impl,
                causal=causal,
                cross=self.external,
                relative_bias=relative_bias,
            )
            if spec.attention is not None
            else None
        )
        self.mixer: nn.Module | None = (
            make_mixer(config, spec.mixer, depth) if spec.mixer is not None else None
        )
        if "mixer" in spec.projections:
            self.mixer = Projection(config, norm=True)
        self.parallel_mixers = spec.parallel_mixers
        self.cross_attention: AttentionBase | None = (
            make_attention(config, cross_attention, impl=impl, causal=causal, cross=True, relative_bias=False)
            if cross_attention is not None
            else None
        )
        ffn_norm = not self.parallel or config.parallel_norms == 2
        self.ffn: FeedForward | MoEFeedForward | Projection | SharedFeedForward | None = None
        if "ffn" in spec.projections:
            self.ffn = Projection(config, ffn_norm)
        self.shared: SharedUse | None = None
        self.shared_spec = spec.shared
        if spec.shared is not None and spec.ffn is not None:  # Zamba2: a shared block before the mixer
            self.attention = SharedAttention(config, spec, impl=impl, causal=causal)
            self.ffn = SharedFeedForward(config, spec.ffn.ffn_dim, spec.ffn.bias, spec.ffn.down_bias)
            self.shared = SharedUse(config, spec)
        elif spec.ffn is not None:
            gate = spec.attention is not None and spec.attention.tanh_gates
            self.ffn = (
                MoEFeedForward(config, spec.ffn, ffn_norm, routing, gate)
                if spec.ffn.moe
                else FeedForward(config, spec.ffn, ffn_norm, gate)
            )
        width = config.per_layer_input_dim
        self.per_layer = PerLayerSublayer(config, width) if width else None  # Gemma 3n/4, after the FFN
        # Gemma 3n (modeling/altup.py): the block runs inside AltUp's predict / correct; Laurel beside attention
        self.altup = AltUp(config, config.altup_inputs) if config.altup_inputs else None
        rank = config.laurel_rank
        self.laurel = Laurel(config, rank) if rank and has_laurel(rank, spec) else None
        n = (
            config.hyper_connections
        )  # DeepSeek-V4: one hyper-connection around each sublayer (modeling/hyper.py)
        self.hyper = (
            nn.ModuleDict({where: HyperConnection(n, config.embed_dim) for where in hyper_sublayers(spec)})
            if n
            else None
        )

    def forward(
        self, x: Tensor, memory: Tensor | None = None, bias: Tensor | None = None, rotary: Rotary | None = None,
        cache: BlockCache | None = None, position: int = 0, per_layer_input: Tensor | None = None,
        embeddings: Tensor | None = None,
    ) -> Tensor:  # fmt: skip
        """(B, T, d) -> (B, T, d); with ``cache`` (generation) the T new tokens start at ``position``;
        ``embeddings`` (B, T, d) are the stack's token embeddings, which a shared block reads (Zamba2);
        ``per_layer_input`` (B, T, p) is this layer's per-layer input (Gemma 3n/4), added after the FFN. With
        AltUp (Gemma 3n) ``x`` is the (n, B, T, d) copies of the stream, and so is the result."""
        if self.altup is not None:
            corrected: Tensor
            corrected, first = self.altup(
                x, lambda h: self._sublayers(h, memory, bias, rotary, cache, position)
            )
            if self.per_layer is None:
                return corrected
            if per_layer_input is None:
                raise ValueError("a layer with per-layer embeddings needs its per-layer input")
            added = self.per_layer.delta(first, per_layer_input)  # (B, T, d), into copies 1 .. n-1
            return torch.cat([corrected[:1], corrected[1:] + added])  # (n, B, T, d)
        if self.hyper is not None:  # (B, T, n, d) streams in and out
            return self._hyper_sublayers(x, bias, rotary, cache, position)
        x = self._sublayers(x, memory, bias, rotary, cache, position, embeddings)  # (B, T, d)
        if self.per_layer is not None:
            if per_layer_input is None:
                raise ValueError("a layer with per-layer embeddings needs its per-layer input")
            x = self.per_layer(x, per_layer_input)  # (B, T, d)
        return x

    def _sublayers(
        self, x: Tensor, memory: Tensor | None, bias: Tensor | None, rotary: Rotary | None,
        cache: BlockCache | None, position: int, embeddings: Tensor | None = None,
    ) -> Tensor:  # fmt: skip
        """The mixer(s) and the FFN with their norms and residuals: (B, T, d) -> (B, T, d)."""
        own = cache.self_attention if cache is not None else None
        cross = cache.cross_attention if cache is not None else None
        state = cache.state if cache is not None else None
        if self.shared is not None and self.shared_spec is not None:  # Zamba2 (modeling/shared_block.py)
            mixer = self.mixer
            assert isinstance(self.attention, SharedAttention) and isinstance(self.ffn, SharedFeedForward)
            assert isinstance(mixer, MixerSublayer) and mixer.norm is not None
            norm = mixer.norm
            return run_shared(self.attention, self.ffn, self.shared, self.shared_spec, x, embeddings,
                              lambda h: mixer.transform(norm(h), state), bias, rotary, own, position)  # fmt: skip
        if self.parallel_mixers and self.attention is not None and isinstance(self.mixer, MixerSublayer):
            # Falcon-H1: attention and the mixer on one normalised input, x + attn(n(x)) + mixer(n(x))
            normed = self.attention.norm(x)  # (B, T, d)
            attended = self.attention.attend(normed, None, bias, rotary, own, position)  # (B, T, d)
            x = x + attended + self.mixer.transform(normed, state)  # (B, T, d)
            return self.ffn(x) if self.ffn is not None else x
        if self.attention is None or self.ffn is None:  # a mixer-only, FFN-only or recurrent block: pre/post
            if self.attention is not None and self.external:
                x = self.attention(x, memory=memory, cache=cross)  # (B, T, d)
            elif self.attention is not None:
                x = self.attention(x, bias=bias, rotary=rotary, cache=own, position=position)  # (B, T, d)
            if self.mixer is not None:
                x = self.mixer(x, state)  # (B, T, d)
            return self.ffn(x) if self.ffn is not None else x
        if self.parallel:
            assert not isinstance(self.ffn, SharedFeedForward)  # a shared block is pre-norm (check_shared)
            if self.cross_attention is not None:
                x = self.cross_attention(x, memory=memory, cache=cross)  # (B, T, d)
            normed = self.attention.norm(x)  # (B, T, d)
            ffn_in = self.ffn.norm(x) if self.ffn.norm is not None else normed  # (B, T, d)
            attended = self.attention.attend(normed, None, bias, rotary, own, position)  # (B, T, d)
            return x + attended + self.ffn.transform(ffn_in)
        if self.external:  # K and V from the external sequence (memory), cached once in the cross cache
            x = self.attention(x, memory=memory, cache=cross)  # (B, T, d)
        elif self.laurel is not None:  # Gemma 3n: Laurel beside attention, on the same normalised input
            attention = self.attention
            x = self.laurel.beside(
                x, attention.norm, lambda h: attention.attend(h, None, bias, rotary, own, position)
            )
        else:
            x = self.attention(x, bias=bias, rotary=rotary, cache=own, position=position)  # (B, T, d)
        if self.cross_attention is not None:
            x = self.cross_attention(x, memory=memory, cache=cross)  # (B, T, d)
        out: Tensor = self.ffn(x)  # (B, T, d)
        return out

    def _hyper_sublayers(
        self, x: Tensor, bias: Tensor | None, rotary: Rotary | None, cache: BlockCache | None, position: int
    ) -> Tensor:
        """DeepSeek-V4's block: each sublayer's norm and transform on the collapse of the (B, T, n, d) streams,
        its output mixed back by the sublayer's hyper-connection (no residual add of its own)."""
        if self.hyper is None:
            raise RuntimeError("a block without hyper-connections has no streams to mix")
        own = cache.self_attention if cache is not None else None
        state = cache.state if cache is not None else None
        steps: list[Callable[[Tensor], Tensor]] = []
        attention, mixer, ffn = self.attention, self.mixer, self.ffn
        if attention is not None:
            steps.append(lambda h: attention.attend(_normed(attention, h), None, bias, rotary, own, position))
        elif isinstance(mixer, MixerSublayer):
            steps.append(lambda h: mixer.transform(_normed(mixer, h), state))
        elif isinstance(mixer, Projection):
            steps.append(lambda h: mixer.transform(_normed(mixer, h)))
        if ffn is not None and not isinstance(
            ffn, SharedFeedForward
        ):  # a shared block has no streams (schema)
            steps.append(lambda h: ffn.transform(_normed(ffn, h)))
        wrappers = [cast(HyperConnection, m) for m in self.hyper.values()]
        if len(steps) != len(wrappers):
            raise ValueError("hyper-connections wrap pre-norm sublayers only (an attention or mixer, an FFN)")
        for hyper, step in zip(wrappers, steps, strict=True):
            x = hyper.around(x, step)
        return x


def _normed(sublayer: nn.Module, h: Tensor) -> Tensor:
    """``h`` through ``sublayer``'s own pre-norm (a hyper-connected block has one per sublayer)."""
    norm = getattr(sublayer, "norm", None)
    if not isinstance(norm, nn.Module):
        raise ValueError("hyper-connections wrap pre-norm sublayers only: this one has no norm of its own")
    out: Tensor = norm(h)
    return out
