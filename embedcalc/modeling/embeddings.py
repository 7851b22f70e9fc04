"""The two ends of the torch model around its stacks: :class:`Embeddings` (token table, learned or sinusoidal
positions, segments, embedding norm, the factorised ``project_in``) on the way in, and :class:`Pooler` and
:class:`Head` (``project_out``, the LM projection, tied to the token table or not, and ``lm_bias``) on the way out.

:class:`embedcalc.modeling.model.TransformerModel` assembles them with its stacks as ``embedding``, ``pooler`` and
``head``; their submodule names are the analytic breakdown keys of docs/layers.md ("Embeddings and head").
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from embedcalc.config.resolved import ResolvedShape
from embedcalc.modeling.altup import altup_projections, expand_streams
from embedcalc.modeling.drafter import MaskedVocabProjection, stand_in
from embedcalc.modeling.hyper import expand_streams as hyper_streams
from embedcalc.modeling.layers import embedding_table, make_norm
from embedcalc.modeling.per_layer import per_layer_inputs, per_layer_modules
from embedcalc.modeling.positions import SinusoidalPositions


class Embeddings(nn.Module):
    """Token table (shared by every stack), per-stack learned positions and embedding norms, segment table.

    Submodules: ``token`` (vocab x token_embed_dim); ``decoder_token`` (the decoder's own table, with
    ``decoder_token_table``: T5Gemma); ``project_in`` (token_embed_dim -> embed_dim, a bias when
    ``embedding_projection_bias``, only when the widths differ); ``position.<stack>`` (learned, max_seq_len +
    position_offset rows, position p at row p + position_offset as OPT and RoBERTa do) or ``sinusoidal`` (a
    buffer); ``type_`` (``type`` is a Module method); ``norm.<stack>``. The segment table is added to the first
    stack's input only (the encoder's, for an encoder-decoder); segment ids default to 0.

    Without ``factorized_embeddings`` (OPT-350m) ``project_in`` follows the token lookup and the rest is
    embed_dim wide; with it (ALBERT, ELECTRA-small) positions, segments and the norm are token_embed_dim wide and
    ``project_in`` comes last. ``scale_embeddings`` multiplies the token vectors by sqrt(embed_dim) (Gemma).
    """

    def __init__(self, config: ResolvedShape, stack_names: list[str]) -> None:
        super().__init__()
        e = config.resolved_token_embed_dim
        self.factorized = config.factorized_embeddings and config.embedding_projection
        d = e if self.factorized else config.embed_dim  # width of positions, segments and the embedding norm
        self.max_seq_len = config.max_seq_len
        self.position_offset = config.position_offset
        self.first_stack = stack_names[0]
        self.scale = math.sqrt(config.embed_dim) if config.scale_embeddings else None
        self.token = embedding_table(config.token_rows, e)  # vocab_size + extra_token_rows (Mllama: + 8)
        # T5Gemma: the decoder's own table (encoder.embed_tokens, decoder.embed_tokens)
        self.decoder_token = embedding_table(config.token_rows, e) if config.decoder_token_table else None
        self.project_in = (
            nn.Linear(e, config.embed_dim, bias=config.embedding_projection_bias)
            if config.embedding_projection
            else None
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
            nn.ModuleDict({s: make_norm(config, d) for s in stack_names})
            if config.resolved_embedding_norm
            else None
        )
        self.num_layers = config.num_layers
        self.per_layer: nn.Embedding | None = None  # Gemma 3n/4's per-layer inputs (modeling/per_layer.py)
        if config.per_layer_input_dim:
            self.per_layer, self.per_layer_project, self.per_layer_norm = per_layer_modules(config)
        # Gemma 3n's AltUp: the extra copies of the stream (modeling/altup.py)
        self.altup_project = altup_projections(config) if config.altup_inputs else None
        self.hyper_streams = config.hyper_connections or 0  # DeepSeek-V4 (modeling/hyper.py)
        # a drafter's input (modeling/drafter.py): another model's vectors, projected to embed_dim
        self.input_projection = (
            nn.Linear(config.input_projection_dim, config.embed_dim, bias=False)
            if config.input_projection_dim
            else None
        )

    def forward(self, ids: Tensor, stack: str, type_ids: Tensor | None = None, position: int = 0) -> Tensor:
        """(B, T) ids -> (B, T, d); ``position`` is the first token's position (cached decode)."""
        length = ids.shape[1]
        if self.input_projection is not None:  # a drafter reads its target's vectors (stand-ins), not the ids
            states = stand_in(self.input_projection.weight, ids.shape[0], position, length,
                              self.input_projection.in_features)  # fmt: skip
            projected: Tensor = self.input_projection(states)  # (B, T, d)
            return projected
        table = self.decoder_token if self.decoder_token is not None and stack == "decoder" else self.token
        x: Tensor = table(ids)  # (B, T, d_tok)
        if self.scale is not None:
            x = x * self.scale
        if self.project_in is not None and not self.factorized:
            x = self.project_in(x)  # (B, T, d)
        if self.position is not None:
            if position + length > self.max_seq_len:
                raise ValueError(
                    f"sequence length ({position + length}) exceeds max_seq_len ({self.max_seq_len}), the size of the "
                    "learned position table; use a shorter sequence or a larger max_seq_len"
                )
            rows = torch.arange(position, position + length, device=ids.device) + self.position_offset  # (T,)
            x = x + self.position[stack](rows)  # (T, d) broadcast over B
        elif self.sinusoidal is not None:
            x = x + self.sinusoidal(position + length)[position:]  # (T, d) broadcast over B
        if self.type_ is not None and stack == self.first_stack:
            x = x + self.type_(type_ids if type_ids is not None else torch.zeros_like(ids))  # (B, T, d)
        if self.norm is not None:
            x = self.norm[stack](x)
        if self.project_in is not None and self.factorized:
            x = self.project_in(x)  # (B, T, d_tok) -> (B, T, d)
        return x

    def streams(self, embedded: Tensor) -> Tensor:
        """The decoder's input: ``embedded`` (B, T, d), or its n AltUp copies (n, B, T, d) (Gemma 3n), or its n
        hyper-connection streams (B, T, n, d) (DeepSeek-V4)."""
        if self.hyper_streams:
            return hyper_streams(embedded, self.hyper_streams)
        return embedded if self.altup_project is None else expand_streams(self.altup_project, embedded)

    def layer_inputs(self, ids: Tensor, embedded: Tensor) -> Tensor | None:
        """Every layer's per-layer input (B, T, L, p) for ``ids`` embedded as ``embedded``; None without them."""
        if self.per_layer is None:
            return None
        return per_layer_inputs(
            self.per_layer, self.per_layer_project, self.per_layer_norm, ids, embedded, self.num_layers
        )


class Pooler(nn.Module):
    """BERT's pooler (Devlin et al. 2019, §3): tanh(dense(first token))."""

    def __init__(self, config: ResolvedShape) -> None:
        super().__init__()
        self.dense = nn.Linear(config.embed_dim, config.embed_dim, bias=config.bias)

    def forward(self, hidden: Tensor) -> Tensor:
        return torch.tanh(self.dense(hidden[:, 0]))  # (B, d)


class VocabProjection(nn.Module):
    """The LM head's matmul: its own vocab x token_embed_dim weight (no bias), or the token table's when tied.

    The tied table is held in a tuple, so it is not registered twice, and read at call time (never passed in as
    an input, which would make FlopCounterMode's module tracker hook a Parameter on every call).
    """

    def __init__(self, config: ResolvedShape, tied_to: nn.Embedding | None) -> None:
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


class Bias(nn.Module):
    """A bias vector on its own (the LM head's ``lm_bias``, which exists even when the head's weight is tied)."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.empty(size))

    def forward(self, x: Tensor) -> Tensor:
        return x + self.bias


class Head(nn.Module):
    """Output heads; ``lm`` projects every position of the last stack onto the vocabulary, after ``project_out``
    (embed_dim -> token_embed_dim, no bias) when the token table has its own width (OPT-350m), and adds
    ``lm_bias`` (vocab_size) when ``lm_head_bias`` (phi-2, GPT-J)."""

    def __init__(self, config: ResolvedShape, token: nn.Embedding) -> None:
        super().__init__()
        self.project_out = (
            nn.Linear(config.embed_dim, config.resolved_token_embed_dim, bias=False)
            if config.embedding_projection
            else None
        )
        self.lm: nn.Module = VocabProjection(config, token if config.tie_embeddings else None)
        self.lm_bias = Bias(config.vocab_size) if config.lm_head_bias else None
        # a drafter's parts (modeling/drafter.py): the state handed back, a centroid-masked head over the tied table
        self.output_projection = (
            nn.Linear(config.embed_dim, config.output_projection_dim, bias=False)
            if config.output_projection_dim
            else None
        )
        self.centroids = None
        self.top_k = config.head_centroid_top_k or 0
        if config.head_centroids:
            self.centroids = nn.Linear(config.embed_dim, config.head_centroids, bias=False)
            self.lm = MaskedVocabProjection(config, token)

    def handback(self, hidden: Tensor) -> Tensor | None:
        """A drafter's state for its target (B, T, output_projection_dim), None without an output projection."""
        return None if self.output_projection is None else self.output_projection(hidden)

    def forward(self, hidden: Tensor) -> Tensor:
        if self.project_out is not None:
            hidden = self.project_out(hidden)  # (B, T, d_tok)
        if self.centroids is not None:  # the top_k clusters of every position: (B, T, k)
            clusters = torch.topk(self.centroids(hidden), self.top_k, dim=-1).indices
            out: Tensor = self.lm(hidden, clusters)  # (B, T, vocab), masked
        else:
            out = self.lm(hidden)  # (B, T, vocab)
        if self.lm_bias is not None:
            out = self.lm_bias(out)  # (B, T, vocab)
        return out
