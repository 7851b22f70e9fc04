"""The terms of a drafter's own parts (DESIGN.md §9; config/rules/drafter.py): the input read from the model it
drafts for, the state handed back, and a centroid-masked LM head. Sources: transformers 5.24/5.25
``Gemma4AssistantForCausalLM`` and ``Gemma4AssistantMaskedEmbedder`` (``modeling_gemma4_assistant.py``).

With d = embed_dim, t the tokens of the last stack, V = vocab_size, C = head_centroids, k = head_centroid_top_k:

- ``embedding/input_projection`` (``pre_projection``): input_projection_dim x d parameters, 2 t input_dim d FLOPs;
- ``head/output_projection`` (``post_projection``): output_projection_dim x d, 2 t d output_dim;
- ``head/centroids`` (``masked_embedding.centroids``): C x d, 2 t d C; the head then gathers the rows of the tied
  table of the k chosen clusters' k V / C tokens and scores only them: ``head/lm`` 2 t d k V / C instead of
  2 t d V. The top-k, the gather and the scatter into the masked logits are no matmuls. The token ordering
  (``masked_embedding.token_ordering``, V integers) is a buffer, no parameter.

Training saves the input vectors (t input_dim) for the input projection's weight gradient and, for a masked head,
the gathered rows (t k V / C d) and two int64 index tensors: the chosen tokens (t k V / C: the gather's and the
scatter's index) and the top-k's clusters (t k); the final norm's output that the projections read is the LM head's
input, saved once. (Measured: autograd's saved tensors of the torch model, tests/modeling/test_drafter.py.)
"""

from __future__ import annotations

from embedcalc.analysis.structure import Num
from embedcalc.analysis.tensor import ParamTensor, linear
from embedcalc.config.resolved import ResolvedShape

INDEX_BYTES = 8  # int64 indices (torch.topk's, the gathered token ids)


def scored_tokens(config: ResolvedShape) -> int:
    """Tokens whose logit the LM head computes for one position: all of the vocabulary, or the k chosen clusters'
    tokens of a centroid-masked head."""
    if config.head_centroids and config.head_centroid_top_k:
        return config.head_centroid_top_k * (config.vocab_size // config.head_centroids)
    return config.vocab_size


def input_tensors(config: ResolvedShape, d: Num) -> list[ParamTensor]:
    """The input projection's weight (none without one)."""
    if not config.input_projection_dim:
        return []
    return linear("embedding/input_projection", config.input_projection_dim, d, False, "none")


def head_tensors(config: ResolvedShape, d: Num) -> list[ParamTensor]:
    """The output projection's and the centroids' weights (none without them)."""
    out: list[ParamTensor] = []
    if config.output_projection_dim:
        out += linear("head/output_projection", d, config.output_projection_dim, False, "none")
    if config.resolved_lm_head and config.head_centroids:
        out += linear("head/centroids", d, config.head_centroids, False, "none")
    return out


def input_flops(config: ResolvedShape, tokens: Num, d: Num) -> list[tuple[str, Num]]:
    if not config.input_projection_dim:
        return []
    return [("embedding/input_projection", tokens * (2 * config.input_projection_dim * d))]


def head_flops(config: ResolvedShape, tokens: Num, d: Num, d_tok: Num) -> list[tuple[str, Num]]:
    """The terms after the last stack's final norm on ``tokens`` positions: the output projection, the LM head's
    own projection to the token width (OPT-350m), the centroids and the head's matmul."""
    out: list[tuple[str, Num]] = []
    if config.output_projection_dim:
        out.append(("head/output_projection", tokens * (2 * d * config.output_projection_dim)))
    if not config.resolved_lm_head:
        return out
    if config.embedding_projection:
        out.append(("head/project_out", tokens * (2 * d * d_tok)))
    if config.head_centroids:
        out.append(("head/centroids", tokens * (2 * d * config.head_centroids)))
    out.append(("head/lm", tokens * (2 * d_tok * scored_tokens(config))))
    return out


def drafter_saved(config: ResolvedShape, tokens: Num, d: Num, e: int) -> tuple[Num, Num]:
    """Bytes saved for the backward on ``tokens`` positions at ``e`` bytes per value: (the input vectors, the
    masked head's gathered rows and its int64 indices)."""
    inputs = tokens * (e * config.input_projection_dim) if config.input_projection_dim else 0
    head: Num = 0
    if config.resolved_lm_head and config.head_centroids and config.head_centroid_top_k:
        chosen = scored_tokens(config)
        head = tokens * (e * chosen * d + INDEX_BYTES * (chosen + config.head_centroid_top_k))
    return inputs, head
