"""The sublayers of a Transformer block: attention (self and cross), the feed-forward network, norms.

Each sublayer owns its norm and its residual connection, so the module tree mirrors the analytic breakdown keys
(``attention/qkv``, ``attention/norm``, ``ffn/in``, ...). Every matmul runs inside the submodule named after the
key it is counted under; :mod:`embedcalc.modeling.counting` relies on that to attribute FLOPs. Inside a key the
tensors are laid out as Hugging Face ``transformers`` lays them out: separate ``q``, ``k``, ``v`` projections under
``qkv``, separate ``gate`` and ``up`` projections under ``ffn.in_`` for gated FFNs, so that parameter shapes can be
compared with a transformers model of the same config tensor by tensor.

Attention follows Vaswani et al. 2017, §3.2: softmax(Q·Kᵀ / sqrt(head_dim) + bias) · V, with grouped K/V heads
(Ainslie et al. 2023, GQA) expanded to the query heads before the core.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from embedcalc.config.schema import ModelConfig
from embedcalc.modeling.positions import apply_rotary, relative_position_bucket

AttentionImpl = Literal["sdpa", "eager"]
RotaryAngles = tuple[Tensor, Tensor]  # cos, sin: (T, head_dim) each


def embedding_table(rows: int, dim: int) -> nn.Embedding:
    """An ``nn.Embedding`` without its N(0, 1) initialisation: ``build_model`` fills weights itself, and
    ``normal_`` on the meta device costs a one-off second or more (it imports ``torch._dynamo``)."""
    return nn.Embedding(rows, dim, _weight=torch.empty(rows, dim))


def make_norm(config: ModelConfig) -> nn.Module:
    """LayerNorm (weight, and a bias unless ``norm_bias`` is false) or RMSNorm (weight only) over embed_dim."""
    if config.norm == "rmsnorm":
        return nn.RMSNorm(config.embed_dim, eps=1e-6)
    return nn.LayerNorm(config.embed_dim, eps=1e-5, bias=config.norm_bias)


def activate(name: str, x: Tensor) -> Tensor:
    """The FFN activation of a plain (not gated) FFN."""
    if name == "relu":
        return F.relu(x)
    if name == "gelu":
        return F.gelu(x)
    if name == "gelu_tanh":
        return F.gelu(x, approximate="tanh")
    if name == "silu":
        return F.silu(x)
    raise ValueError(f"unknown activation {name!r}")


def activate_gated(name: str, gate: Tensor, up: Tensor) -> Tensor:
    """A gated activation (Shazeer 2020): act(gate) * up, SiLU for swiglu, GELU for geglu."""
    if name == "swiglu":
        return F.silu(gate) * up
    if name == "geglu":
        return F.gelu(gate) * up
    raise ValueError(f"unknown gated activation {name!r}")


class QKV(nn.Module):
    """The ``q``, ``k`` and ``v`` projections of one attention layer (the ``attention/qkv`` key).

    Self-attention projects one stream; cross-attention takes queries from the decoder stream and keys and values
    from the encoder memory, so no FLOPs are spent projecting the wrong stream.
    """

    def __init__(self, embed_dim: int, q_dim: int, kv_dim: int, bias: bool) -> None:
        super().__init__()
        self.q = nn.Linear(embed_dim, q_dim, bias=bias)
        self.k = nn.Linear(embed_dim, kv_dim, bias=bias)
        self.v = nn.Linear(embed_dim, kv_dim, bias=bias)

    def forward(self, x: Tensor, memory: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        source = x if memory is None else memory
        return self.q(x), self.k(source), self.v(source)  # (B, T, q_dim), (B, S, kv_dim), (B, S, kv_dim)


class Scores(nn.Module):
    """Eager Q·Kᵀ: (B, h, T, d_head) x (B, h, d_head, S) -> (B, h, T, S), counted as ``attention/scores``."""

    def forward(self, q: Tensor, k: Tensor) -> Tensor:
        return torch.matmul(q, k.transpose(-2, -1))  # (B, h, T, S)


class Context(nn.Module):
    """Eager A·V: (B, h, T, S) x (B, h, S, d_head) -> (B, h, T, d_head), counted as ``attention/context``."""

    def forward(self, weights: Tensor, v: Tensor) -> Tensor:
        return torch.matmul(weights, v)  # (B, h, T, d_head)


class FusedCore(nn.Module):
    """``scaled_dot_product_attention``: Q·Kᵀ, mask, softmax and ·V in one op (counted as scores + context)."""

    def forward(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool) -> Tensor:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)  # (B, h, T, d_head)


class Attention(nn.Module):
    """Multi-head (grouped-query) attention with its norm and residual: self-attention or cross-attention.

    Submodules: ``qkv`` (``q``, ``k``, ``v``), ``out``, ``norm``; the core is ``scores`` + ``context`` (eager) or
    ``sdpa`` (fused); ``relative_bias`` (T5 buckets x heads) only in the first self-attention of a stack when
    positions are relative. Causal self-attention with a ``sliding_window`` W masks keys W or more tokens back.
    """

    def __init__(
        self, config: ModelConfig, *, impl: AttentionImpl, causal: bool, cross: bool, relative_bias: bool
    ) -> None:
        super().__init__()
        d, q_dim, kv_dim = config.embed_dim, config.q_dim, config.kv_dim
        self.num_heads, self.num_kv_heads = config.num_heads, config.resolved_kv_heads
        self.head_dim = config.resolved_head_dim
        self.impl, self.causal, self.cross = impl, causal, cross
        self.window = config.sliding_window if causal and not cross else None
        self.pre_norm = config.resolved_norm_placement == "pre"
        self.qkv = QKV(d, q_dim, kv_dim, config.resolved_qkv_bias)
        self.out = nn.Linear(q_dim, d, bias=config.resolved_out_bias)
        self.norm = make_norm(config)
        self.scores: Scores | None = Scores() if impl == "eager" else None
        self.context: Context | None = Context() if impl == "eager" else None
        self.sdpa: FusedCore | None = FusedCore() if impl == "sdpa" else None
        self.num_buckets = config.relative_attention_num_buckets
        self.max_distance = config.relative_attention_max_distance
        self.relative_bias = embedding_table(self.num_buckets, config.num_heads) if relative_bias else None

    def position_bias(self, query_len: int, key_len: int) -> Tensor:
        """T5's relative position bias, (1, h, T, S); only the module that owns the table can compute it."""
        if self.relative_bias is None:
            raise RuntimeError("this attention layer has no relative position table")
        device = self.relative_bias.weight.device
        query = torch.arange(query_len, device=device)[:, None]  # (T, 1)
        key = torch.arange(key_len, device=device)[None, :]  # (1, S)
        buckets = relative_position_bucket(
            key - query,
            bidirectional=not self.causal,
            num_buckets=self.num_buckets,
            max_distance=self.max_distance,
        )  # (T, S)
        bias: Tensor = self.relative_bias(buckets)  # (T, S, h)
        return bias.permute(2, 0, 1).unsqueeze(0)  # (1, h, T, S)

    def _heads(self, x: Tensor, heads: int) -> Tensor:
        batch, length, _ = x.shape
        return x.view(batch, length, heads, self.head_dim).transpose(1, 2)  # (B, heads, T, d_head)

    def _expand_kv(self, x: Tensor) -> Tensor:
        """Repeat each K/V head for its group of query heads (GQA/MQA): (B, h_kv, S, d) -> (B, h, S, d)."""
        groups = self.num_heads // self.num_kv_heads
        if groups == 1:
            return x
        batch, heads_kv, length, dim = x.shape
        expanded = x[:, :, None].expand(batch, heads_kv, groups, length, dim)  # (B, h_kv, g, S, d_head)
        return expanded.reshape(batch, heads_kv * groups, length, dim)  # (B, h, S, d_head)

    def _project(self, x: Tensor, memory: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
        if self.cross and memory is None:
            raise ValueError("cross-attention needs the encoder output (memory)")
        q, k, v = self.qkv(x, memory if self.cross else None)  # (B, T, q_dim), (B, S, kv_dim) x2
        return (
            self._heads(q, self.num_heads),  # (B, h, T, d_head)
            self._expand_kv(self._heads(k, self.num_kv_heads)),  # (B, h, S, d_head)
            self._expand_kv(self._heads(v, self.num_kv_heads)),
        )  # (B, h, S, d_head)

    def _blocked(self, query_len: int, key_len: int, device: torch.device) -> Tensor:
        """(T, S) True where a causal query may not look: future keys, and keys a window or more back."""
        query = torch.arange(query_len, device=device)[:, None]  # (T, 1)
        key = torch.arange(key_len, device=device)[None, :]  # (1, S)
        blocked = key > query  # (T, S)
        if self.window is not None:
            blocked = blocked | (query - key >= self.window)
        return blocked

    def _core(self, q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None) -> Tensor:
        causal = self.causal and not self.cross
        query_len, key_len = q.shape[-2], k.shape[-2]
        if self.sdpa is not None:
            mask: Tensor | None = None if bias is None else bias.to(q.dtype)  # (1, h, T, S)
            if causal and (bias is not None or self.window is not None):
                blocked = self._blocked(query_len, key_len, q.device)  # (T, S)
                mask = ~blocked if mask is None else mask.masked_fill(blocked, float("-inf"))
                causal = False
            out: Tensor = self.sdpa(q, k, v, mask, causal)  # (B, h, T, d_head)
            return out
        if self.scores is None or self.context is None:
            raise RuntimeError("eager attention needs its scores and context modules")
        scores = self.scores(q, k) * (1.0 / math.sqrt(self.head_dim))  # (B, h, T, S)
        if bias is not None:
            scores = scores + bias
        if causal:
            scores = scores.masked_fill(self._blocked(query_len, key_len, q.device), float("-inf"))
        weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(v.dtype)  # (B, h, T, S)
        context: Tensor = self.context(weights, v)  # (B, h, T, d_head)
        return context

    def _attend(
        self, x: Tensor, memory: Tensor | None, bias: Tensor | None, rotary: RotaryAngles | None
    ) -> Tensor:
        batch, length, _ = x.shape
        q, k, v = self._project(x, memory)
        if rotary is not None and not self.cross:
            cos, sin = rotary
            q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        context = self._core(q, k, v, bias)  # (B, h, T, d_head)
        merged = context.transpose(1, 2).reshape(
            batch, length, self.num_heads * self.head_dim
        )  # (B, T, q_dim)
        out: Tensor = self.out(merged)  # (B, T, d)
        return out

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        bias: Tensor | None = None,
        rotary: RotaryAngles | None = None,
    ) -> Tensor:
        if self.pre_norm:
            return x + self._attend(self.norm(x), memory, bias, rotary)
        out: Tensor = self.norm(x + self._attend(x, memory, bias, rotary))
        return out


class GatedInput(nn.Module):
    """The ``gate`` and ``up`` projections of a gated FFN (LLaMA's gate_proj/up_proj, T5 v1.1's wi_0/wi_1)."""

    def __init__(self, embed_dim: int, ffn_dim: int, bias: bool) -> None:
        super().__init__()
        self.gate = nn.Linear(embed_dim, ffn_dim, bias=bias)
        self.up = nn.Linear(embed_dim, ffn_dim, bias=bias)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        return self.gate(x), self.up(x)  # (B, T, f) each


class FeedForward(nn.Module):
    """Position-wise FFN with its norm and residual (Vaswani et al. 2017, §3.3): ``in_`` -> activation -> ``out``.

    ``in_`` is the analytic ``ffn/in`` component: one embed_dim -> ffn_dim Linear, or for gated activations
    (swiglu, geglu) a :class:`GatedInput` holding the gate and up projections. ``in_`` carries PEP 8's trailing
    underscore; its breakdown key is ``ffn/in``.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        d, f, bias = config.embed_dim, config.resolved_ffn_dim, config.resolved_ffn_bias
        self.activation = config.activation
        self.pre_norm = config.resolved_norm_placement == "pre"
        self.in_: nn.Module = GatedInput(d, f, bias) if config.gated else nn.Linear(d, f, bias=bias)
        self.out = nn.Linear(f, d, bias=bias)
        self.norm = make_norm(config)

    def _transform(self, x: Tensor) -> Tensor:
        if isinstance(self.in_, GatedInput):
            gate, up = self.in_(x)  # (B, T, f) each
            hidden = activate_gated(self.activation, gate, up)  # (B, T, f)
        else:
            hidden = activate(self.activation, self.in_(x))  # (B, T, f)
        out: Tensor = self.out(hidden)  # (B, T, d)
        return out

    def forward(self, x: Tensor) -> Tensor:
        if self.pre_norm:
            return x + self._transform(self.norm(x))
        out: Tensor = self.norm(x + self._transform(x))
        return out


class Block(nn.Module):
    """One Transformer layer: self-attention, cross-attention (decoder of an encoder-decoder), FFN."""

    def __init__(
        self,
        config: ModelConfig,
        *,
        impl: AttentionImpl,
        causal: bool,
        cross_attention: bool,
        relative_bias: bool,
    ) -> None:
        super().__init__()
        self.attention = Attention(config, impl=impl, causal=causal, cross=False, relative_bias=relative_bias)
        self.cross_attention = (
            Attention(config, impl=impl, causal=causal, cross=True, relative_bias=False)
            if cross_attention
            else None
        )
        self.ffn = FeedForward(config)

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        bias: Tensor | None = None,
        rotary: RotaryAngles | None = None,
    ) -> Tensor:
        x = self.attention(x, bias=bias, rotary=rotary)  # (B, T, d)
        if self.cross_attention is not None:
            x = self.cross_attention(x, memory=memory)  # (B, T, d)
        out: Tensor = self.ffn(x)  # (B, T, d)
        return out
