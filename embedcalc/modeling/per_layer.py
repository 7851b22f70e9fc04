"""Per-layer embeddings (Gemma 3n, Gemma 4; transformers' ``Gemma4TextModel.get_per_layer_inputs`` /
``project_per_layer_inputs`` and ``Gemma4TextDecoderLayer``): besides the token table, a second table gives every
token a vector of per_layer_input_dim for each of the num_layers layers, packed as one per_layer_vocab_size x
(num_layers x per_layer_input_dim) table (``embedding.per_layer``). The embedded tokens are also projected to that
packed width (``embedding.per_layer_project``, d -> L p, scaled by d^-1/2) and normalised per layer
(``embedding.per_layer_norm``, width p); the two are added and scaled by 2^-1/2. Layer i then takes its slice:
after its FFN it gates the stream (``per_layer.gate``, d -> p, GELU-tanh), multiplies by the slice, projects back
(``per_layer.out``, p -> d), normalises (``per_layer.norm``) and adds the result into the residual.

The module paths are the analytic breakdown keys (``embedding/per_layer*``, ``<stack>/per_layer/*``).
"""

from __future__ import annotations

import math

import torch.nn.functional as F
from torch import Tensor, nn

from embedcalc.config.resolved import ResolvedShape
from embedcalc.modeling.attention_parts import embedding_table
from embedcalc.modeling.norms import make_norm


def per_layer_modules(config: ResolvedShape) -> tuple[nn.Embedding, nn.Linear, nn.Module]:
    """The model-level half, registered on the embeddings as ``per_layer`` (the packed table, rows x L p),
    ``per_layer_project`` (d -> L p) and ``per_layer_norm`` (p)."""
    width = config.per_layer_input_dim or 0
    rows = config.per_layer_vocab_size or config.vocab_size
    table = embedding_table(rows, config.num_layers * width)
    project = nn.Linear(config.embed_dim, config.num_layers * width, bias=False)
    return table, project, make_norm(config, width)


def per_layer_inputs(
    table: nn.Embedding, project: nn.Linear, norm: nn.Module, ids: Tensor, embedded: Tensor, layers: int
) -> Tensor:
    """(B, T) ids and their (B, T, d) embeddings -> (B, T, L, p): every layer's input."""
    batch, length = ids.shape
    width = project.out_features // layers
    rows = ids.masked_fill(
        ids >= table.num_embeddings, 0
    )  # ids past a smaller table: row 0, as Gemma 3n does
    tokens = table(rows).view(batch, length, layers, width) * math.sqrt(width)  # (B, T, L, p)
    projected = project(embedded) * embedded.shape[-1] ** -0.5  # (B, T, L p)
    projected = norm(projected.view(batch, length, layers, width))  # (B, T, L, p)
    out: Tensor = (projected + tokens) * 2**-0.5  # (B, T, L, p)
    return out


class PerLayerSublayer(nn.Module):
    """The layer-level half: ``gate`` (d -> p), ``out`` (p -> d) and ``norm`` (d), added into the residual."""

    def __init__(self, config: ResolvedShape, width: int) -> None:
        super().__init__()
        self.gate = nn.Linear(config.embed_dim, width, bias=False)
        self.out = nn.Linear(width, config.embed_dim, bias=False)
        self.norm = make_norm(config)

    def delta(self, x: Tensor, per_layer_input: Tensor) -> Tensor:
        """What the (B, T, d) stream and this layer's (B, T, p) input add to the residual: (B, T, d)."""
        gated = F.gelu(self.gate(x), approximate="tanh") * per_layer_input  # (B, T, p)
        out: Tensor = self.norm(self.out(gated))  # (B, T, d)
        return out

    def forward(self, x: Tensor, per_layer_input: Tensor) -> Tensor:
        """(B, T, d) stream and this layer's (B, T, p) input -> (B, T, d)."""
        return x + self.delta(x, per_layer_input)
