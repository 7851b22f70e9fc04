"""Greedy generation with a static KV cache: the measurement side of ``embedcalc bench --mode generate``.

The cache (:mod:`embedcalc.modeling.kv_cache`) is allocated before the prompt, for prompt + generated tokens, so
no allocation happens inside the timed steps. Prefill runs the prompt (an encoder-decoder: the source through
the encoder, once, and the decoder prompt through the decoder, which fills the cross-attention caches) and picks
the first token from the last position's logits: the time to first token. Each decode step then feeds the last
token, one per sequence, and picks the next: G decode steps after a prompt of P tokens run at KV lengths
P+1 … P+G, leaving P+G tokens in the cache (the analytic convention, analysis/roofline/estimate.py). The prefill
computes the logits of each prompt's last position only, as servers and transformers' ``generate`` do and as the
analytic prefill counts the LM head (``logits="last"``).

Timing: :class:`embedcalc.modeling.timing.Clock` around each step (the argmax makes each step's result
concrete). Memory: :func:`embedcalc.modeling.device.peak_memory`, paged in by a few tokens of a miniature.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import torch
from torch import Tensor

from embedcalc.config.resolved import ResolvedShape
from embedcalc.modeling.attention import Attention
from embedcalc.modeling.block_sparse_attention import BlockSparseAttention
from embedcalc.modeling.device import DTYPES, device_name, peak_memory
from embedcalc.modeling.fusion import fuse_projections
from embedcalc.modeling.kv_cache import BlockCache, CrossCache, KVCache, LayerCache
from embedcalc.modeling.latent_attention import LatentAttention
from embedcalc.modeling.layers import AttentionImpl, Block
from embedcalc.modeling.model import TransformerModel, build_model
from embedcalc.modeling.shared_kv import SharedKVAttention
from embedcalc.modeling.sparse_attention import SparseAttention
from embedcalc.modeling.ssm import allocate_state
from embedcalc.modeling.steps import make_inputs
from embedcalc.modeling.timing import Clock, StepCallback, timed_call

Forward = Callable[
    [Tensor, KVCache, Tensor | None, int | None], Tensor
]  # (ids, cache, memory, keep) -> logits


def allocate_cache(
    model: TransformerModel, batch_size: int, total_tokens: int, source_len: int = 0
) -> KVCache:
    """A static cache for ``batch_size`` sequences reaching ``total_tokens`` decoder tokens (and, for an
    encoder-decoder, ``source_len`` source tokens), on the model's device and in its dtype (module docstring)."""
    decoder = model.decoder
    if decoder is None:
        raise ValueError("an encoder has no KV cache: generation needs a decoder")
    weight = next(model.parameters())

    def empty(*shape: int) -> Tensor:
        return torch.empty(shape, device=weight.device, dtype=weight.dtype)

    layers: list[BlockCache] = []
    for i in range(decoder.num_layers):
        block = cast(Block, decoder.layers[i if len(decoder.layers) > 1 else 0])
        attn = block.attention
        if (
            attn is not None and block.external
        ):  # cross-attention: K and V of the external tokens, filled once
            if not isinstance(attn, Attention):  # pragma: no cover - cross-attention is standard
                raise ValueError("latent cross-attention")
            m = model.config.context_tokens or 0
            shape = (batch_size, attn.num_kv_heads, m, attn.head_dim)  # (B, h_kv, m, d_head)
            layers.append(BlockCache(None, CrossCache(empty(*shape), empty(*shape))))
            continue
        if attn is None:  # a recurrent mixer's fixed-size state, or nothing for a block without a mixer
            mixer = model.config.stack_plan("decoder").block_at(i).mixer
            state = allocate_state(mixer, batch_size, weight) if mixer is not None else None
            layers.append(BlockCache(None, None, state))
            continue
        limits = [x for x in (None if attn.full_cache else attn.window, attn.chunk) if x is not None]
        limit = min(limits) if limits else None
        size = total_tokens if limit is None else min(total_tokens, limit)
        if size < total_tokens and decoder.has_bias():
            raise ValueError("a rolling (windowed or chunked) KV cache with ALiBi or relative position bias")
        if isinstance(attn, LatentAttention):
            width = attn.latent_dim + attn.rope
            own = LayerCache(empty(batch_size, size, width), None, total_tokens, limit)  # (B, L, r_kv + rope)
            if isinstance(attn, SparseAttention) and not attn.shared:  # the indexer's keys (B, L, D_I)
                own.index_keys = empty(batch_size, size, attn.index_width)
        elif isinstance(attn, Attention):
            if isinstance(attn, SharedKVAttention):  # reads its source layer's keys and values: no cache
                size = 0
            shape = (batch_size, attn.num_kv_heads, size, attn.head_dim)  # (B, h_kv, L, d_head)
            values = (*shape[:3], attn.value_head_dim)  # (B, h_kv, L, d_v)
            own = LayerCache(empty(*shape), empty(*values), total_tokens, limit)
            if isinstance(attn, BlockSparseAttention):  # the block indexer's keys (B, L, D_I)
                own.index_keys = empty(batch_size, size, attn.index_width)
        else:  # pragma: no cover - make_attention builds one of the two
            raise TypeError(f"no KV cache layout for {type(attn).__name__}")
        cross = None
        if block.cross_attention is not None:
            c = block.cross_attention
            if not isinstance(c, Attention):  # pragma: no cover - cross-attention is standard
                raise ValueError("latent cross-attention")
            shape = (batch_size, c.num_kv_heads, source_len, c.head_dim)  # (B, h_kv, S, d_head)
            cross = CrossCache(empty(*shape), empty(*shape))
        mixer = model.config.stack_plan("decoder").block_at(i).mixer  # Falcon-H1: a state beside the KV cache
        state = allocate_state(mixer, batch_size, weight) if mixer is not None else None
        layers.append(BlockCache(own, cross, state))
    return KVCache(layers)


@dataclass(frozen=True)
class Generated:
    """One greedy generation: the tokens (B, G + 1), the prefill and each decode step's seconds."""

    tokens: Tensor
    ttft_s: float
    decode_s: list[float]


def greedy_generate(
    model: TransformerModel, prompt: Tensor, gen_tokens: int, cache: KVCache, source: Tensor | None = None,
    forward: Forward | None = None, clock: Clock | None = None,
) -> Generated:  # fmt: skip
    """Prefill ``prompt`` (B, P) (after encoding ``source`` (B, S) for an encoder-decoder) and decode
    ``gen_tokens`` steps greedily through ``cache``: G + 1 tokens per sequence. ``forward`` replaces
    :meth:`TransformerModel.decode_step` (a compiled one)."""
    step = forward or model.decode_step
    clock = clock or Clock(prompt.device)
    cache.reset()
    out: list[Tensor] = []
    memory: list[Tensor | None] = [None]

    def prefill() -> None:
        memory[0] = model.encode(source) if source is not None else None  # (B, S, d)
        logits = step(prompt, cache, memory[0], 1)  # (B, 1, vocab): the last position's
        out.append(logits[:, -1].argmax(dim=-1, keepdim=True))  # (B, 1)

    def decode() -> None:
        logits = step(out[-1], cache, None, None)  # (B, 1, vocab)
        out.append(logits[:, -1].argmax(dim=-1, keepdim=True))  # (B, 1)

    with torch.inference_mode():
        ttft = clock.time(prefill)
        seconds = [clock.time(decode) for _ in range(gen_tokens)]
    return Generated(torch.cat(out, dim=1), ttft, seconds)


def reference_generate(
    model: TransformerModel, prompt: Tensor, gen_tokens: int, source: Tensor | None = None
) -> Tensor:
    """Greedy tokens (B, G + 1) by full recomputation: every step runs the whole sequence, no cache."""
    ids = prompt
    with torch.inference_mode():
        for _ in range(gen_tokens + 1):
            output = model(source, ids) if source is not None else model(ids)
            if output.logits is None:
                raise ValueError("generation needs an LM head")
            ids = torch.cat((ids, output.logits[:, -1].argmax(dim=-1, keepdim=True)), dim=1)  # (B, T + 1)
    return ids[:, prompt.shape[1] :]


@dataclass(frozen=True)
class GenerateSettings:
    """What to run: batch, prompt (seq_len; the decoder prompt tgt_len, default seq_len, for an
    encoder-decoder), generated tokens, dtype, attention, compile, warm-up and timed generations."""

    batch_size: int
    seq_len: int
    tgt_len: int | None
    gen_tokens: int
    dtype: str
    attention: AttentionImpl
    compile: bool
    warmup: int
    repeat: int


@dataclass(frozen=True)
class GenerationRun:
    """What was measured: prefill seconds per timed generation, decode seconds per step (repeat × G, in order),
    the cache's bytes, peak memory and how it was measured."""

    ttft_s: list[float]
    decode_s: list[list[float]]
    kv_cache_bytes: int
    peak_memory_bytes: int
    memory_method: str
    build_s: float
    device: str
    threads: int
    prompt_len: int
    state_bytes: int = 0  # the recurrent mixers' states (Mamba-2), constant in the sequence length


def run_generation(
    config: ResolvedShape,
    settings: GenerateSettings,
    device: torch.device,
    on_step: StepCallback | None = None,
) -> GenerationRun:
    """Build ``config`` on ``device``, allocate the cache, run ``warmup`` then ``repeat`` timed generations."""
    if config.architecture == "encoder":
        raise ValueError(f"{config.name or 'this model'} is an encoder: it does not generate")
    with peak_memory(device, lambda: _page_in(config, settings, device)) as peak:
        model, build_s = timed_call(lambda: _build(config, settings, device), device)
        src, tgt = make_inputs(config, settings.batch_size, settings.seq_len, settings.tgt_len, device)
        prompt, source = (src, None) if tgt is None else (tgt, src)
        total = prompt.shape[1] + settings.gen_tokens
        cache = allocate_cache(
            model, settings.batch_size, total, source.shape[1] if source is not None else 0
        )
        forward: Forward | None = (
            cast(Forward, torch.compile(model.decode_step, dynamic=True)) if settings.compile else None
        )
        clock = Clock(device)
        for i in range(settings.warmup):
            greedy_generate(model, prompt, settings.gen_tokens, cache, source, forward, clock)
            if on_step:
                on_step("warm-up", i + 1, settings.warmup)
        ttft, decode = [], []
        for i in range(settings.repeat):
            run = greedy_generate(model, prompt, settings.gen_tokens, cache, source, forward, clock)
            ttft.append(run.ttft_s)
            decode.append(run.decode_s)
            if on_step:
                on_step("timing", i + 1, settings.repeat)
    return GenerationRun(ttft, decode, cache.nbytes, peak.bytes, peak.method, build_s, device_name(device),
                         torch.get_num_threads(), prompt.shape[1], cache.state_nbytes)  # fmt: skip


def _build(config: ResolvedShape, settings: GenerateSettings, device: torch.device) -> TransformerModel:
    model = build_model(config, attention=settings.attention, device=device, dtype=DTYPES[settings.dtype])
    # one QKV and one gate/up GEMM (embedcalc.modeling.fusion): bench only, never verify
    fuse_projections(model)
    return model


def _page_in(config: ResolvedShape, settings: GenerateSettings, device: torch.device) -> None:
    """Generate a few tokens with a miniature of the model: the page-in of :func:`run_generation`'s peak memory."""
    from embedcalc.modeling.benchmark import miniature

    tiny = miniature(config)
    model = build_model(tiny, attention=settings.attention, device=device, dtype=DTYPES[settings.dtype])
    length = min(4, tiny.max_seq_len // 2)
    src, tgt = make_inputs(tiny, 1, length, None, device)
    prompt, source = (src, None) if tgt is None else (tgt, src)
    cache = allocate_cache(model, 1, length + 2, length)
    greedy_generate(model, prompt, 2, cache, source)
