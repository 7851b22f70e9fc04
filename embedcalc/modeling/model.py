"""The torch model built from a :class:`ResolvedShape`: its stacks of blocks, their assembly with the embeddings and
heads of :mod:`embedcalc.modeling.embeddings`, and :func:`build_model`, which builds it cheaply.

One class covers the three architectures (DESIGN.md §3): an encoder (BERT: token + position + type embeddings,
embedding norm, blocks, pooler), a causal decoder (GPT-2, LLaMA: blocks, LM head), and an encoder-decoder (Vaswani
et al. 2017 / Marian: both stacks share one token table, §3.4, and the LM head reuses it when tied).

Module paths follow the analytic breakdown keys of docs/layers.md (``embedding.token``, ``embedding.project_in``,
``encoder.layers.3.attention.qkv``, ``decoder.layers.5.ffn.moe.experts``, ``decoder.final_norm``, ``pooler.dense``,
``head.project_out``, ``head.lm``, ``head.lm_bias``); :mod:`embedcalc.modeling.counting` maps them back. Each
stack builds layer i from ``config.stack_plan(stack).block_at(i)`` (layers as data, DESIGN.md §9), or one block
called num_layers times when ``shared_layers`` (ALBERT). This is a second, independent implementation of the counts:
it shares no code with :mod:`embedcalc.analysis`.

A decoder with cross-attention layers over an external sequence (Llama-3.2-Vision) takes that sequence as
``context`` (B, context_tokens, d); without one it attends to :meth:`TransformerModel.context_states`, fixed
pseudo-random states of that shape (the analytic counts depend only on the shape).

Dropout is not built: it has no parameters and no matmul FLOPs, and the model is for measuring cost.
"""

from __future__ import annotations

from typing import NamedTuple, cast

import torch
from torch import Tensor, nn

from embedcalc.config.resolved import ResolvedShape
from embedcalc.modeling.altup import altup_projections, fold_streams
from embedcalc.modeling.attention import Rotary, rotary_widths
from embedcalc.modeling.disentangled import DisentangledAttention
from embedcalc.modeling.embeddings import Embeddings, Head, Pooler
from embedcalc.modeling.hyper import HyperHead
from embedcalc.modeling.kv_cache import KVCache
from embedcalc.modeling.layers import AttentionImpl, Block, make_norm
from embedcalc.modeling.moe import Routing
from embedcalc.modeling.positions import RotaryPositions, alibi_bias, rotary_tables


class TransformerOutput(NamedTuple):
    """What a forward pass returns: the last stack's hidden states, and the pooled output and logits if built."""

    hidden: Tensor  # (B, T, d), after the final norm of a pre-norm stack
    pooled: Tensor | None  # (B, d): tanh(dense(hidden[:, 0])), encoders with a pooler
    logits: Tensor | None  # (B, T, vocab): LM head on every position
    handback: Tensor | None = None  # (B, T, output_projection_dim): a drafter's state for its target

    @property
    def main(self) -> Tensor:
        """The model's headline output: logits, else the pooled vector, else the hidden states."""
        if self.logits is not None:
            return self.logits
        return self.pooled if self.pooled is not None else self.hidden


class Stack(nn.Module):
    """The layers of one stack, RoPE tables (``rotary``, buffers, one per rotary width) and ``final_norm``.

    Layer i is ``config.stack_plan(name).block_at(i)``; with ``shared_layers`` one block is built and called
    num_layers times. A relative-position table lives in ``layers.0.attention.relative_bias`` and its bias is
    shared by all layers (with ``relative_bias_per_layer``, UMT5, every layer has its own table and bias); ALiBi's
    bias (no parameters) is shared likewise.
    """

    def __init__(
        self, config: ResolvedShape, name: str, *, impl: AttentionImpl, causal: bool, cross_attention: bool,
        routing: Routing = "real",
    ) -> None:  # fmt: skip
        super().__init__()
        plan = config.stack_plan(name)
        self.num_layers = plan.num_layers
        built = 1 if config.shared_layers else plan.num_layers
        cross = config.cross_attention_block() if cross_attention else None
        relative = config.resolved_relative_bias or config.disentangled is not None  # the table in layer 0
        self.bias_per_layer = config.relative_bias_per_layer  # UMT5: a table in every layer
        self.layers = nn.ModuleList(
            Block(
                config, plan.block_at(i), impl=impl, causal=causal, cross_attention=cross,
                relative_bias=relative and (i == 0 or self.bias_per_layer), routing=routing,
                depth=(i, plan.num_layers),
            )
            for i in range(built)
        )  # fmt: skip
        if any(b.attention is not None and b.attention.index_shared for b in plan.blocks):  # GLM-5
            from embedcalc.modeling.sparse_attention import link_shared_selections

            link_shared_selections([cast(Block, layer).attention for layer in self.layers])
        self.shared_blocks = any(
            b.shared is not None for b in plan.blocks
        )  # Zamba2: they read the embeddings
        if self.shared_blocks and not config.shared_layers:
            from embedcalc.modeling.shared_block import tie_shared_blocks

            tie_shared_blocks(list(self.layers), [plan.block_at(i) for i in range(built)])
        if any(b.attention is not None and b.attention.kv_shared for b in plan.blocks):  # Gemma 3n/4
            from embedcalc.modeling.shared_kv import link_shared_kv

            link_shared_kv([cast(Block, layer).attention for layer in self.layers])
        self.alibi_heads = config.num_heads if config.position == "alibi" else None
        widths = rotary_widths(config, [b.attention for b in plan.blocks if b.attention is not None])
        self.rotary = (
            nn.ModuleDict({str(w): RotaryPositions(config.max_seq_len, w) for w in sorted(widths)})
            if config.position == "rope"
            else None
        )
        # Mistral Large 4's LeRoPE: a learned log-scale per frequency of the widest rotary table
        self.rope_scale = (
            RopeScale(max(widths)) if config.rope_scale and self.rotary is not None and widths else None
        )
        # Gemma 3n: AltUp's copies folded back into one stream before the final norm (modeling/altup.py)
        self.altup_unembed = altup_projections(config) if config.altup_inputs else None
        # DeepSeek-V4: the hyper-connections' streams collapsed before the final norm (modeling/hyper.py)
        n = config.hyper_connections
        self.hyper_head = HyperHead(n, config.embed_dim) if n else None
        self.final_norm = make_norm(config) if config.resolved_final_norm else None

    def _bias(self, length: int, device: torch.device, position: int = 0) -> Tensor | None:
        """The stack's additive score bias for ``length`` queries from ``position`` against keys 0 .. position +
        length - 1: (1, h, T, S), or None."""
        first = cast(Block, self.layers[0])
        end = position + length
        if isinstance(first.attention, DisentangledAttention):
            return first.attention.relative_embeddings()  # (2 span, d): each layer projects it
        if first.attention is not None and first.attention.relative_bias is not None:
            return first.attention.position_bias(length, end, position)  # (1, h, T, S)
        if self.alibi_heads is not None:
            # (1, h, T, S)
            return alibi_bias(self.alibi_heads, length, end, device=device, query_offset=position)
        return None

    def has_bias(self) -> bool:
        """Whether attention scores get a position bias (T5 relative buckets, ALiBi)."""
        first = cast(Block, self.layers[0]).attention
        return (first is not None and first.relative_bias is not None) or self.alibi_heads is not None

    def forward(
        self, x: Tensor, memory: Tensor | None = None, cache: KVCache | None = None,
        per_layer: Tensor | None = None,
    ) -> Tensor:  # fmt: skip
        """(B, T, d) -> (B, T, d). With ``cache`` (generation, decoder only) the T tokens start at
        ``cache.position``, and each layer writes its keys and values to ``cache.layers[i]``; the caller advances
        the position. ``per_layer`` (B, T, L, p) holds every layer's per-layer input (Gemma 3n/4)."""
        # (B, T, d), AltUp's (n, B, T, d), or the hyper-connections' (B, T, n, d)
        length = x.shape[1] if self.hyper_head is not None else x.shape[-2]
        position = cache.position if cache is not None else 0
        bias = self._bias(length, x.device, position)
        rotary: Rotary | None = (
            {int(w): _angles_from(table(position + length), position) for w, table in self.rotary.items()}
            if self.rotary is not None
            else None
        )
        if rotary is not None and self.rope_scale is not None:
            dtype = rotary[self.rope_scale.width][0].dtype
            cos, sin = self.rope_scale(position, length, x.device)
            rotary[self.rope_scale.width] = (cos.to(dtype), sin.to(dtype))
        embeddings = x if self.shared_blocks else None  # (B, T, d): what a shared block concatenates (Zamba2)
        for i in range(self.num_layers):
            layer = self.layers[i if len(self.layers) > 1 else 0]
            step = cache.layers[i] if cache is not None else None
            own = per_layer[:, :, i] if per_layer is not None else None  # (B, T, p)
            own_table = cast(Block, layer).attention if self.bias_per_layer and i else None
            if own_table is not None:  # UMT5: layer i's own table, (1, h, T, S)
                bias = own_table.position_bias(length, position + length, position)
            x = layer(x, memory=memory, bias=bias, rotary=rotary, cache=step, position=position,
                      per_layer_input=own, embeddings=embeddings)  # fmt: skip
        if self.altup_unembed is not None:
            x = fold_streams(self.altup_unembed, x)  # (n, B, T, d) -> (B, T, d)
        if self.hyper_head is not None:
            x = self.hyper_head(x)  # (B, T, n, d) -> (B, T, d)
        if self.final_norm is not None:
            x = self.final_norm(x)
        return x


class RopeScale(nn.Module):
    """A learned log-scale per rotary frequency of the ``width`` table (Mistral Large 4's LeRoPE,
    ``MistralLarge4TextRotaryEmbedding.alpha``): the angles are computed per call, frequency x exp(scale)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.width = width
        self.log_scale = nn.Parameter(torch.zeros(width // 2))

    def forward(self, position: int, length: int, device: torch.device) -> tuple[Tensor, Tensor]:
        """cos and sin rows of the positions ``position`` .. ``position + length`` - 1: (T, width) each."""
        cos, sin = rotary_tables(position + length, self.width, device=device, log_scale=self.log_scale)
        return cos[position:], sin[position:]


def _angles_from(angles: tuple[Tensor, Tensor], position: int) -> tuple[Tensor, Tensor]:
    """The cos and sin rows from ``position`` on: (T, width) each."""
    cos, sin = angles
    return cos[position:], sin[position:]


class TransformerModel(nn.Module):
    """Encoder, decoder or encoder-decoder, as the config says.

    Call it as ``model(input_ids)`` (B, T) for an encoder or decoder, ``model(src_ids, tgt_ids)`` (B, S), (B, T)
    for an encoder-decoder; ``token_type_ids`` (segments) optional. Returns a :class:`TransformerOutput`.
    """

    def __init__(
        self, config: ResolvedShape, attention: AttentionImpl = "sdpa", routing: Routing = "real"
    ) -> None:
        super().__init__()
        self.config = config
        self.attention_impl: AttentionImpl = attention
        self.routing: Routing = routing
        arch = config.architecture
        names: list[str] = ["encoder", "decoder"] if arch == "encoder-decoder" else [arch]
        self.embedding = Embeddings(config, names)
        self.encoder = (
            Stack(config, "encoder", impl=attention, causal=False, cross_attention=False, routing=routing)
            if arch != "decoder"
            else None
        )
        self.decoder = (
            Stack(
                config, "decoder", impl=attention, causal=True, cross_attention=arch == "encoder-decoder",
                routing=routing,
            )
            if arch != "encoder"
            else None
        )  # fmt: skip
        self.pooler = Pooler(config) if config.resolved_pooler else None
        table = self.embedding.decoder_token or self.embedding.token  # a tied head reuses the decoder's table
        self.head = Head(config, table) if config.resolved_lm_head else None

    def context_states(self, batch_size: int) -> Tensor | None:
        """The external sequence the decoder's cross-attention layers attend to (Llama-3.2-Vision's projected
        vision tokens): (B, context_tokens, d), the same fixed pseudo-random values on every call (so a cached
        generation and a full recomputation see one image), on the model's device and dtype; None when no layer
        reads one. On the meta device, shapes only."""
        m = self.config.context_tokens
        if self.decoder is None or m is None:
            return None
        weight = self.embedding.token.weight
        shape = (batch_size, m, self.config.embed_dim)
        if weight.device.type == "meta":
            return torch.empty(shape, device=weight.device, dtype=weight.dtype)
        generator = torch.Generator().manual_seed(0)
        states = torch.randn(shape, generator=generator) * _CONTEXT_STD  # (B, m, d)
        return states.to(device=weight.device, dtype=weight.dtype)

    def forward(
        self, input_ids: Tensor, tgt_ids: Tensor | None = None, token_type_ids: Tensor | None = None,
        context: Tensor | None = None,
    ) -> TransformerOutput:  # fmt: skip
        """``context``: the external tokens (B, m, d) of cross-attention layers, default :meth:`context_states`."""
        if self.encoder is not None and self.decoder is not None:
            if tgt_ids is None:
                raise ValueError("an encoder-decoder takes source and target ids: model(src_ids, tgt_ids)")
            memory = self.encoder(self.embedding(input_ids, "encoder", token_type_ids))  # (B, S, d)
            hidden = self.decoder(self.embedding(tgt_ids, "decoder"), memory=memory)  # (B, T, d)
        elif tgt_ids is not None:
            raise ValueError("tgt_ids only applies to an encoder-decoder; call model(input_ids)")
        elif self.encoder is not None:
            hidden = self.encoder(self.embedding(input_ids, "encoder", token_type_ids))  # (B, T, d)
        elif self.decoder is not None:
            if context is None:
                context = self.context_states(input_ids.shape[0])  # (B, m, d) or None
            x = self.embedding(input_ids, "decoder", token_type_ids)  # (B, T, d)
            per_layer = self.embedding.layer_inputs(input_ids, x)  # (B, T, L, p) or None
            hidden = self.decoder(self.embedding.streams(x), memory=context, per_layer=per_layer)  # (B, T, d)
        else:  # pragma: no cover - the constructor always builds a stack
            raise RuntimeError("model has no stack")
        pooled = self.pooler(hidden) if self.pooler is not None else None
        logits = self.head(hidden) if self.head is not None else None
        handback = self.head.handback(hidden) if self.head is not None else None
        return TransformerOutput(hidden, pooled, logits, handback)

    def encode(self, src_ids: Tensor, token_type_ids: Tensor | None = None) -> Tensor:
        """An encoder-decoder's encoder output (the memory its decoder attends to): (B, S) -> (B, S, d)."""
        if self.encoder is None or self.decoder is None:
            raise ValueError("encode applies to an encoder-decoder")
        memory: Tensor = self.encoder(self.embedding(src_ids, "encoder", token_type_ids))  # (B, S, d)
        return memory

    def decode_step(
        self, ids: Tensor, cache: KVCache, memory: Tensor | None = None, keep: int | None = None
    ) -> Tensor:
        """Logits of ``ids`` (B, T), the next T tokens of the decoder from ``cache.position`` on, through the KV
        cache (which they are written to; the position then advances by T): (B, T, vocab), or of the last ``keep``
        positions only (B, keep, vocab), as a server's prefill computes them (transformers' ``logits_to_keep``).
        ``memory`` (the encoder output) is needed until the cross-attention caches are filled, at prefill."""
        if self.decoder is None or self.head is None:
            raise ValueError("generation needs a decoder with an LM head")
        if memory is None and cache.position == 0 and self.encoder is None:  # prefill fills the cross caches
            memory = self.context_states(ids.shape[0])  # (B, m, d) or None
        x = self.embedding(ids, "decoder", position=cache.position)  # (B, T, d)
        per_layer = self.embedding.layer_inputs(ids, x)  # (B, T, L, p) or None
        hidden = self.decoder(self.embedding.streams(x), memory=memory, cache=cache, per_layer=per_layer)
        cache.position += ids.shape[1]
        if keep is not None:
            hidden = hidden[:, -keep:]  # (B, keep, d)
        logits: Tensor = self.head(hidden)  # (B, T or keep, vocab)
        return logits


# --- cheap initialisation -------------------------------------------------------------------------------------

_CONTEXT_STD = 1.0  # the external states stand for normalised vision features
_POOL_SIZE = 16381  # prime, so rows of a tiled matrix are distinct windows, never exact repeats
_INIT_STD = 0.02


def _fill_from_pool(tensor: Tensor, pool: Tensor, offset: int) -> None:
    """Tile ``tensor`` with the pool's values from ``offset`` on: one broadcast copy at memory speed, no RNG."""
    flat = tensor.view(-1)
    size = pool.numel() // 2  # the pool is stored twice over, so any window of ``size`` values is one slice
    window = pool[offset : offset + size]
    rows, rest = divmod(flat.numel(), size)
    if rows:
        flat[: rows * size].view(rows, size).copy_(window.expand(rows, size))  # (rows, size)
    if rest:
        flat[rows * size :].copy_(window[:rest])


def initialise_(model: nn.Module, seed: int = 0) -> None:
    """Give every parameter finite, small values cheaply; recompute fixed buffers (sinusoidal, RoPE).

    Norm weights are 1 and biases (``bias``, ``*_bias``) 0; every other weight is tiled from one pool of 16381
    N(0, 0.02) values, each tensor starting at its own random offset, so a multi-GB model fills at memory-write
    speed instead of paying the RNG for every element (bert-large: ~0.5 s instead of ~2.5 s on two CPU cores).
    Tensors smaller than the pool get a plain random window. Good for timing and numerics checks; not a training
    initialisation.
    """
    generator = torch.Generator().manual_seed(seed)
    pools: dict[tuple[torch.device, torch.dtype], Tensor] = {}
    with torch.no_grad():
        for module in model.modules():
            is_norm = isinstance(module, nn.LayerNorm | nn.RMSNorm)
            for name, param in module.named_parameters(recurse=False):
                if is_norm:
                    param.fill_(1.0 if name == "weight" else 0.0)
                elif name == "bias" or name.endswith("_bias"):
                    param.zero_()
                else:
                    key = (param.device, param.dtype)
                    if key not in pools:
                        values = torch.randn(_POOL_SIZE, generator=generator) * _INIT_STD
                        pools[key] = torch.cat((values, values)).to(device=param.device, dtype=param.dtype)
                    offset = int(torch.randint(_POOL_SIZE, (1,), generator=generator))
                    _fill_from_pool(param, pools[key], offset)
            reset = getattr(module, "reset_buffers", None)
            if callable(reset):
                reset()


def materialise_(model: nn.Module, device: torch.device) -> None:
    """Replace every meta parameter and buffer by an uninitialised tensor on ``device``, shared ones once.

    What ``Module.to_empty`` does, without its ``empty_like`` on meta tensors, which costs a one-off second of
    imports (``torch._refs``) on the first call in a process.
    """
    replaced: dict[int, Tensor] = {}
    for module in model.modules():
        for name, param in list(module.named_parameters(recurse=False)):
            if id(param) not in replaced:
                empty = torch.empty(param.shape, dtype=param.dtype, device=device)
                replaced[id(param)] = nn.Parameter(empty, requires_grad=param.requires_grad)
            setattr(module, name, replaced[id(param)])
        for name, buffer in list(module.named_buffers(recurse=False)):
            if id(buffer) not in replaced:
                replaced[id(buffer)] = torch.empty(buffer.shape, dtype=buffer.dtype, device=device)
            setattr(module, name, replaced[id(buffer)])


def build_model(
    config: ResolvedShape,
    attention: AttentionImpl = "sdpa",
    device: str | torch.device = "meta",
    dtype: torch.dtype = torch.float32,
    seed: int = 0,
    routing: Routing = "real",
) -> TransformerModel:
    """The torch model for ``config``, in eval mode.

    ``routing`` is how mixture-of-experts layers pick experts on a real device (``real`` top-k, or
    ``deterministic``: token i -> experts (i k + j) mod E); on the meta device they always route
    deterministically, since there is no data to route by.

    ``device="meta"`` (the default) allocates nothing: shapes only, for counting parameters and FLOPs of any size.
    On a real device the model is built on meta, given uninitialised storage by :func:`materialise_` (like
    ``to_empty``) and filled by :func:`initialise_`, so no time goes to random initialisation of every weight.
    """
    target = torch.device(device)
    with torch.device("meta"):
        model = TransformerModel(config, attention, routing)
    model = model.to(dtype=dtype)
    if target.type != "meta":
        materialise_(model, target)
        initialise_(model, seed)
    return model.eval()
