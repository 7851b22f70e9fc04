"""The torch model built from a :class:`ModelConfig`, and :func:`build_model`, which builds it cheaply.

One class covers the three architectures (DESIGN.md §3): an encoder (BERT: token + position + type embeddings,
embedding norm, blocks, pooler), a causal decoder (GPT-2, LLaMA: blocks, LM head), and an encoder-decoder (Vaswani
et al. 2017 / Marian: both stacks share one token table, §3.4, and the LM head reuses it when tied).

Module paths follow the analytic breakdown keys of :mod:`embedcalc.analysis.params` (``embedding.token``,
``embedding.project_in``, ``encoder.layers.3.attention.qkv``, ``decoder.final_norm``, ``pooler.dense``,
``head.project_out``, ``head.lm``);
:mod:`embedcalc.modeling.counting` maps them back. This is a second, independent implementation of the counts:
it shares no code with :mod:`embedcalc.analysis`.

Dropout is not built: it has no parameters and no matmul FLOPs, and the model is for measuring cost.
"""

from __future__ import annotations

from typing import NamedTuple, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from embedcalc.config.schema import ModelConfig
from embedcalc.modeling.layers import AttentionImpl, Block, embedding_table, make_norm
from embedcalc.modeling.positions import RotaryPositions, SinusoidalPositions


class TransformerOutput(NamedTuple):
    """What a forward pass returns: the last stack's hidden states, and the pooled output and logits if built."""

    hidden: Tensor  # (B, T, d), after the final norm of a pre-norm stack
    pooled: Tensor | None  # (B, d): tanh(dense(hidden[:, 0])), encoders with a pooler
    logits: Tensor | None  # (B, T, vocab): LM head on every position

    @property
    def main(self) -> Tensor:
        """The model's headline output: logits, else the pooled vector, else the hidden states."""
        if self.logits is not None:
            return self.logits
        return self.pooled if self.pooled is not None else self.hidden


class Embeddings(nn.Module):
    """Token table (shared by every stack), per-stack learned positions and embedding norms, segment table.

    Submodules: ``token`` (vocab x token_embed_dim); ``project_in`` (token_embed_dim -> embed_dim, no bias, only
    when they differ, OPT-350m); ``position.<stack>`` (learned, max_seq_len + position_offset rows, position p at
    row p + position_offset as OPT and RoBERTa do) or ``sinusoidal`` (a buffer); ``type_`` (``type`` is a Module
    method); ``norm.<stack>``. The segment table is added to the first stack's input only (the encoder's, for an
    encoder-decoder); segment ids default to 0.
    """

    def __init__(self, config: ModelConfig, stack_names: list[str]) -> None:
        super().__init__()
        d = config.embed_dim
        self.max_seq_len = config.max_seq_len
        self.position_offset = config.position_offset
        self.first_stack = stack_names[0]
        self.token = embedding_table(config.vocab_size, config.resolved_token_embed_dim)
        self.project_in = (
            nn.Linear(config.resolved_token_embed_dim, d, bias=False) if config.embedding_projection else None
        )
        self.position = (
            nn.ModuleDict({s: embedding_table(config.position_rows, d) for s in stack_names})
            if config.position == "learned"
            else None
        )
        self.sinusoidal = (
            SinusoidalPositions(config.max_seq_len, d) if config.position == "sinusoidal" else None
        )
        self.type_ = embedding_table(config.type_vocab_size, d) if config.type_vocab_size else None
        self.norm = (
            nn.ModuleDict({s: make_norm(config) for s in stack_names})
            if config.resolved_embedding_norm
            else None
        )

    def forward(self, ids: Tensor, stack: str, type_ids: Tensor | None = None) -> Tensor:
        length = ids.shape[1]
        x: Tensor = self.token(ids)  # (B, T, d_tok)
        if self.project_in is not None:
            x = self.project_in(x)  # (B, T, d)
        if self.position is not None:
            if length > self.max_seq_len:
                raise ValueError(
                    f"sequence length ({length}) exceeds max_seq_len ({self.max_seq_len}), the size of the "
                    "learned position table; use a shorter sequence or a larger max_seq_len"
                )
            rows = torch.arange(length, device=ids.device) + self.position_offset  # (T,)
            x = x + self.position[stack](rows)  # (T, d) broadcast over B
        elif self.sinusoidal is not None:
            x = x + self.sinusoidal(length)  # (T, d) broadcast over B
        if self.type_ is not None and stack == self.first_stack:
            x = x + self.type_(type_ids if type_ids is not None else torch.zeros_like(ids))  # (B, T, d)
        if self.norm is not None:
            x = self.norm[stack](x)
        return x


class Stack(nn.Module):
    """``layers`` of identical blocks, RoPE tables (``rotary``, buffers) and ``final_norm`` (default: pre-norm).

    A relative-position table lives in ``layers.0.attention.relative_bias`` and its bias is shared by all layers.
    """

    def __init__(
        self,
        config: ModelConfig,
        num_layers: int,
        *,
        impl: AttentionImpl,
        causal: bool,
        cross_attention: bool,
    ) -> None:
        super().__init__()
        relative = config.position == "relative"
        self.layers = nn.ModuleList(
            Block(
                config,
                impl=impl,
                causal=causal,
                cross_attention=cross_attention,
                relative_bias=relative and i == 0,
            )
            for i in range(num_layers)
        )
        self.rotary = (
            RotaryPositions(config.max_seq_len, config.resolved_head_dim)
            if config.position == "rope"
            else None
        )
        self.final_norm = make_norm(config) if config.resolved_final_norm else None

    def forward(self, x: Tensor, memory: Tensor | None = None) -> Tensor:
        length = x.shape[1]
        first = cast(Block, self.layers[0])
        bias = (
            first.attention.position_bias(length, length)
            if first.attention.relative_bias is not None
            else None
        )
        rotary = self.rotary(length) if self.rotary is not None else None
        for layer in self.layers:
            x = layer(x, memory=memory, bias=bias, rotary=rotary)  # (B, T, d)
        if self.final_norm is not None:
            x = self.final_norm(x)
        return x


class Pooler(nn.Module):
    """BERT's pooler (Devlin et al. 2019, §3): tanh(dense(first token))."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.embed_dim, config.embed_dim, bias=config.bias)

    def forward(self, hidden: Tensor) -> Tensor:
        return torch.tanh(self.dense(hidden[:, 0]))  # (B, d)


class VocabProjection(nn.Module):
    """The LM head's matmul: its own vocab x token_embed_dim weight (no bias), or the token table's when tied.

    The tied table is held in a tuple, so it is not registered twice, and read at call time (never passed in as
    an input, which would make FlopCounterMode's module tracker hook a Parameter on every call).
    """

    def __init__(self, config: ModelConfig, tied_to: nn.Embedding | None) -> None:
        super().__init__()
        self._tied: tuple[nn.Embedding, ...] = (tied_to,) if tied_to is not None else ()
        self.weight = (
            None
            if tied_to is not None
            else nn.Parameter(torch.empty(config.vocab_size, config.resolved_token_embed_dim))
        )

    def forward(self, hidden: Tensor) -> Tensor:
        weight = self._tied[0].weight if self.weight is None else self.weight
        return F.linear(hidden, weight)  # (B, T, vocab)


class Head(nn.Module):
    """Output heads; ``lm`` projects every position of the last stack onto the vocabulary, after ``project_out``
    (embed_dim -> token_embed_dim, no bias) when the token table has its own width (OPT-350m)."""

    def __init__(self, config: ModelConfig, token: nn.Embedding) -> None:
        super().__init__()
        self.project_out = (
            nn.Linear(config.embed_dim, config.resolved_token_embed_dim, bias=False)
            if config.embedding_projection
            else None
        )
        self.lm = VocabProjection(config, token if config.tie_embeddings else None)

    def forward(self, hidden: Tensor) -> Tensor:
        if self.project_out is not None:
            hidden = self.project_out(hidden)  # (B, T, d_tok)
        out: Tensor = self.lm(hidden)  # (B, T, vocab)
        return out


class TransformerModel(nn.Module):
    """Encoder, decoder or encoder-decoder, as the config says.

    Call it as ``model(input_ids)`` (B, T) for an encoder or decoder, ``model(src_ids, tgt_ids)`` (B, S), (B, T)
    for an encoder-decoder; ``token_type_ids`` (segments) optional. Returns a :class:`TransformerOutput`.
    """

    def __init__(self, config: ModelConfig, attention: AttentionImpl = "sdpa") -> None:
        super().__init__()
        self.config = config
        self.attention_impl: AttentionImpl = attention
        arch = config.architecture
        names: list[str] = ["encoder", "decoder"] if arch == "encoder-decoder" else [arch]
        self.embedding = Embeddings(config, names)
        self.encoder = (
            Stack(config, config.num_layers, impl=attention, causal=False, cross_attention=False)
            if arch != "decoder"
            else None
        )
        decoder_layers = config.resolved_decoder_layers if arch == "encoder-decoder" else config.num_layers
        self.decoder = (
            Stack(
                config, decoder_layers, impl=attention, causal=True, cross_attention=arch == "encoder-decoder"
            )
            if arch != "encoder"
            else None
        )
        self.pooler = Pooler(config) if config.resolved_pooler else None
        self.head = Head(config, self.embedding.token) if config.resolved_lm_head else None

    def forward(
        self, input_ids: Tensor, tgt_ids: Tensor | None = None, token_type_ids: Tensor | None = None
    ) -> TransformerOutput:
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
            hidden = self.decoder(self.embedding(input_ids, "decoder", token_type_ids))  # (B, T, d)
        else:  # pragma: no cover - the constructor always builds a stack
            raise RuntimeError("model has no stack")
        pooled = self.pooler(hidden) if self.pooler is not None else None
        logits = self.head(hidden) if self.head is not None else None
        return TransformerOutput(hidden, pooled, logits)


# --- cheap initialisation -------------------------------------------------------------------------------------

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

    Norm weights are 1 and biases 0; every other weight is tiled from one pool of 16381 N(0, 0.02) values, each
    tensor starting at its own random offset, so a multi-GB model fills at memory-write speed instead of paying
    the RNG for every element (bert-large: ~0.5 s instead of ~2.5 s on two CPU cores). Tensors smaller than the
    pool get a plain random window. Good for timing and numerics checks; not a training initialisation.
    """
    generator = torch.Generator().manual_seed(seed)
    pools: dict[tuple[torch.device, torch.dtype], Tensor] = {}
    with torch.no_grad():
        for module in model.modules():
            is_norm = isinstance(module, nn.LayerNorm | nn.RMSNorm)
            for name, param in module.named_parameters(recurse=False):
                if is_norm:
                    param.fill_(1.0 if name == "weight" else 0.0)
                elif name == "bias":
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
    config: ModelConfig,
    attention: AttentionImpl = "sdpa",
    device: str | torch.device = "meta",
    dtype: torch.dtype = torch.float32,
    seed: int = 0,
) -> TransformerModel:
    """The torch model for ``config``, in eval mode.

    ``device="meta"`` (the default) allocates nothing: shapes only, for counting parameters and FLOPs of any size.
    On a real device the model is built on meta, given uninitialised storage by :func:`materialise_` (like
    ``to_empty``) and filled by :func:`initialise_`, so no time goes to random initialisation of every weight.
    """
    target = torch.device(device)
    with torch.device("meta"):
        model = TransformerModel(config, attention)
    model = model.to(dtype=dtype)
    if target.type != "meta":
        materialise_(model, target)
        initialise_(model, seed)
    return model.eval()
