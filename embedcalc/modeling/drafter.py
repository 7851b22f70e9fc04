"""A drafter's parts in torch (analysis/drafter.py counts them; transformers 5.24/5.25 ``Gemma4AssistantForCausalLM``,
``modeling_gemma4_assistant.py``): the stand-ins of what its target hands over, the input vectors' projection and a
centroid-masked LM head (attention over the target's keys and values: modeling/shared_kv.py's
``ExternalKVAttention``).

What the target model would hand over (its keys and values of every position, its token embedding and last hidden
state) is not part of this model: stand-ins of the right shape take their place, fixed pseudo-random values drawn
position by position (so a cached step and a full recomputation see the same), or shapes only on the meta device.
Costs do not depend on their values.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from embedcalc.config.resolved import ResolvedShape

_STD = 1.0  # the stand-ins play normalised states


def stand_in(like: Tensor, batch: int, start: int, length: int, *inner: int) -> Tensor:
    """Values for positions ``start`` .. ``start + length`` of ``batch`` sequences, (batch, length, *inner), on
    ``like``'s device and dtype: the same for a position whatever the call (drawn for positions 0 .. end in order,
    then sliced)."""
    shape = (start + length, batch, *inner)
    if like.device.type == "meta":
        return torch.empty(shape, device=like.device, dtype=like.dtype)[start:].transpose(0, 1)
    generator = torch.Generator().manual_seed(0)
    values = torch.randn(shape, generator=generator)[start:] * _STD  # (length, B, *inner)
    return values.transpose(0, 1).to(device=like.device, dtype=like.dtype)


class MaskedVocabProjection(nn.Module):
    """The LM head's matmul over the chosen clusters' tokens only (``Gemma4AssistantMaskedEmbedder``): the rows of
    the tied table at those tokens (``order`` viewed as centroids x tokens per centroid), each position's dot
    products with them, scattered into logits whose other entries hold the lowest chosen score less 1."""

    def __init__(self, config: ResolvedShape, table: nn.Embedding) -> None:
        super().__init__()
        self._table = (table,)  # not registered twice
        self.centroids = config.head_centroids or 1
        self.order = nn.Buffer(
            torch.arange(config.vocab_size)
        )  # transformers' token_ordering (a checkpoint's)

    def reset_buffers(self) -> None:
        self.order.copy_(torch.arange(self.order.numel(), device=self.order.device))

    def forward(self, hidden: Tensor, clusters: Tensor) -> Tensor:
        batch, length = hidden.shape[:2]
        tokens = self.order.view(self.centroids, -1)[clusters].reshape(batch, length, -1)  # (B, T, k V/C)
        rows = F.embedding(tokens, self._table[0].weight)  # (B, T, k V/C, d)
        chosen = (hidden.unsqueeze(-2) @ rows.transpose(-1, -2)).squeeze(-2)  # (B, T, k V/C)
        floor = chosen.detach().amin() - 1.0  # transformers: selected_logits.min().item() - 1, no gradient
        logits = floor.expand(batch, length, self.order.numel()).clone()  # (B, T, V)
        return logits.scatter(-1, tokens, chosen)
