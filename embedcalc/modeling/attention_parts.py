"""The parts attention sublayers are built from (modeling/attention.py, latent_attention.py, shared_kv.py,
disentangled.py, sparse_attention.py): the ``q``/``k``/``v`` projections, the eager ``scores`` and ``context``
matmuls and the fused ``sdpa`` core, each its own module so that FLOPs land on the breakdown key it is counted under
(docs/layers.md); q/k norms, attention sinks, the token table constructor, and the head reshapes.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from embedcalc.config.layer_plan import Attention as ResolvedAttention
from embedcalc.config.resolved import ResolvedShape
from embedcalc.modeling.norms import make_norm


def embedding_table(rows: int, dim: int) -> nn.Embedding:
    """An ``nn.Embedding`` without its N(0, 1) initialisation: ``build_model`` fills weights itself, and
    ``normal_`` on the meta device costs a one-off second or more (it imports ``torch._dynamo``)."""
    return nn.Embedding(rows, dim, _weight=torch.empty(rows, dim))


class Scores(nn.Module):
    """Eager Q·Kᵀ: (B, h, T, d_qk) x (B, h, d_qk, S) -> (B, h, T, S), counted as ``attention/scores``."""

    def forward(self, q: Tensor, k: Tensor) -> Tensor:
        return torch.matmul(q, k.transpose(-2, -1))  # (B, h, T, S)


class Context(nn.Module):
    """Eager A·V: (B, h, T, S) x (B, h, S, d_v) -> (B, h, T, d_v), counted as ``attention/context``."""

    def forward(self, weights: Tensor, v: Tensor) -> Tensor:
        return torch.matmul(weights, v)  # (B, h, T, d_v)


class FusedCore(nn.Module):
    """``scaled_dot_product_attention``: Q·Kᵀ, mask, softmax and ·V in one op (counted as scores + context, split
    in the ratio ``qk_head_dim : v_head_dim``, which differ for MLA)."""

    def __init__(self, qk_head_dim: int, v_head_dim: int) -> None:
        super().__init__()
        self.qk_head_dim, self.v_head_dim = qk_head_dim, v_head_dim

    def forward(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool) -> Tensor:
        if k.shape[1] != q.shape[1]:  # cached decode passes the KV heads unexpanded (GQA/MQA)
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, enable_gqa=True)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)  # (B, h, T, d_v)


class Sinks(nn.Module):
    """gpt-oss's attention sinks: one learned logit per head (``attention/sinks``), no matmul."""

    def __init__(self, num_heads: int) -> None:
        super().__init__()
        self.logits = nn.Parameter(torch.empty(num_heads))


class QKV(nn.Module):
    """The ``q``, ``k`` and ``v`` projections of standard attention (the ``attention/qkv`` key).

    Self-attention projects one stream; cross-attention takes queries from the decoder stream and keys and values
    from the encoder memory, so no FLOPs are spent projecting the wrong stream.
    """

    def __init__(
        self, embed_dim: int, q_dim: int, kv_dim: int, bias: bool, kv: int = 2, v_dim: int | None = None
    ) -> None:
        super().__init__()
        self.q = nn.Linear(embed_dim, q_dim, bias=bias)
        # kv: the projections of K and V the layer has, 2; 1 when the values are the keys (Gemma 4
        # attention_k_eq_v); 0 when it reuses an earlier layer's (modeling/shared_kv.py); v_dim: the values'
        # width when the value heads are narrower or wider than the key heads (MiMo-V2-Flash)
        self.k = nn.Linear(embed_dim, kv_dim, bias=bias) if kv else None
        self.v = nn.Linear(embed_dim, v_dim or kv_dim, bias=bias) if kv == 2 else None

    def forward(self, x: Tensor, memory: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        if self.k is None:
            raise RuntimeError("a layer sharing another layer's keys and values projects queries only")
        source = x if memory is None else memory
        k = self.k(source)  # (B, S, kv_dim)
        v = self.v(source) if self.v is not None else k  # (B, S, v_dim): values from keys
        return self.q(x), k, v  # (B, T, q_dim), (B, S, kv_dim), (B, S, v_dim)


class QKNorm(nn.Module):
    """Norms on queries (``q``) and keys (``k``): per head over head_dim (Qwen3, Gemma 3) or over all heads
    together (OLMo 2, ``full``). Applied before rotary positions, as transformers does."""

    def __init__(self, config: ResolvedShape, spec: ResolvedAttention) -> None:
        super().__init__()
        self.full = spec.qk_norm == "full"
        self.q = make_norm(config, spec.q_dim if self.full else spec.head_dim)
        # a layer reusing another layer's keys has no key norm of its own
        self.k = (
            nn.Identity()
            if spec.kv_shared
            else make_norm(config, spec.kv_dim if self.full else spec.head_dim)
        )


class QueryScale(nn.Module):
    """A learned scale and bias per head multiplying each query by scale x log(position + 1) + bias (Mistral Large
    4's ``MistralLarge4TextSoftmaxScaling``); element-wise, counted as ``query_scale`` / ``index_query_scale``."""

    def __init__(self, heads: int) -> None:
        super().__init__()
        self.scale, self.bias = nn.Parameter(torch.zeros(heads)), nn.Parameter(torch.ones(heads))

    def forward(self, q: Tensor, position: int) -> Tensor:
        """q (B, heads, T, w) of the positions ``position`` on -> the same, scaled per head and position."""
        length = q.shape[-2]
        log_pos = torch.arange(
            position + 1, position + length + 1, device=q.device, dtype=torch.float32
        ).log()
        factor = self.scale.float()[:, None] * log_pos[None, :] + self.bias.float()[:, None]  # (heads, T)
        return q * factor.to(q.dtype)[None, :, :, None]


def split_heads(x: Tensor, heads: int) -> Tensor:
    """(B, T, heads x d_head) -> (B, heads, T, d_head)."""
    batch, length, width = x.shape
    return x.view(batch, length, heads, width // heads).transpose(1, 2)  # (B, heads, T, d_head)


def expand_kv(x: Tensor, heads: int) -> Tensor:
    """Repeat each K/V head for its group of query heads (GQA/MQA): (B, h_kv, S, d) -> (B, h, S, d)."""
    batch, heads_kv, length, dim = x.shape
    groups = heads // heads_kv
    if groups == 1:
        return x
    expanded = x[:, :, None].expand(batch, heads_kv, groups, length, dim)  # (B, h_kv, g, S, d_head)
    return expanded.reshape(batch, heads_kv * groups, length, dim)  # (B, h, S, d_head)


class GroupedOutput(nn.Module):
    """A grouped low-rank output projection (DeepSeek-V4 report §2.3.1, "Grouped Output Projection"; transformers'
    ``DeepseekV4GroupedLinear`` ``o_a_proj`` and ``o_b_proj``): the (.., value) context split into ``groups`` groups
    of whole heads, each projected on its own to ``rank`` values by ``a`` (one (groups x rank, value / groups)
    weight, a batched matmul), then ``b`` mixes the groups x rank values to ``d``."""

    def __init__(self, value: int, d: int, groups: int, rank: int, bias: bool) -> None:
        super().__init__()
        self.groups = groups
        self.a = nn.Parameter(torch.randn(groups * rank, value // groups) * 0.02)
        self.b = nn.Linear(groups * rank, d, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        """(B, T, value) -> (B, T, d)."""
        lead, g = x.shape[:-1], self.groups
        grouped = x.reshape(-1, g, x.shape[-1] // g).transpose(0, 1)  # (g, B T, value / g)
        weight = self.a.view(g, -1, self.a.shape[-1]).transpose(1, 2)  # (g, value / g, rank)
        mixed = torch.bmm(grouped, weight).transpose(0, 1).reshape(*lead, -1)  # (B, T, g rank)
        out: Tensor = self.b(mixed)
        return out


def output_projection(value: int, d: int, groups: int, rank: int, bias: bool) -> nn.Module:
    """The attention's output projection: one Linear(value, d), or grouped low-rank with ``groups``."""
    return GroupedOutput(value, d, groups, rank, bias) if groups else nn.Linear(value, d, bias=bias)
