"""DeepSeek's multi-head latent attention (MLA; DeepSeek-V2 report §2.1, transformers' ``DeepseekV3Attention``):
low-rank query and key/value projections, the rope part of the key one vector shared by every head, and, when
decoding, a cache of the compressed latent and that rope key only (docs/layers.md).

Submodules, each the breakdown key it is counted under: ``q_a``, ``q_a_norm``, ``q_b`` (or ``q`` without a query
rank), ``kv_a``, ``kv_a_norm``, ``kv_b``, ``out``; the shared core, masks and sinks come from
:class:`~embedcalc.modeling.attention.AttentionBase`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from embedcalc.config.layer_plan import Attention as ResolvedAttention
from embedcalc.config.resolved import ResolvedShape
from embedcalc.modeling.attention import AttentionBase, AttentionImpl, Rotary
from embedcalc.modeling.attention_parts import QueryScale, split_heads
from embedcalc.modeling.kv_cache import CrossCache, LayerCache
from embedcalc.modeling.norms import make_norm
from embedcalc.modeling.positions import apply_rotary


class LatentAttention(AttentionBase):
    """Multi-head latent attention (DeepSeek-V2 §2.1): queries through a low-rank ``q_a`` -> ``q_a_norm`` ->
    ``q_b`` (or one full-rank ``q``), keys and values from one compressed latent ``kv_a`` -> ``kv_a_norm`` ->
    ``kv_b``, and decoupled rotary dims: each query head has ``rope`` rotary channels, the key's ``rope`` channels
    are one vector (the last ``rope`` outputs of ``kv_a``) shared by every head. Query/key heads are
    nope + rope wide, value heads v wide; the KV cache would hold the latent and the rope key only.
    """

    def __init__(
        self,
        config: ResolvedShape,
        spec: ResolvedAttention,
        *,
        impl: AttentionImpl,
        causal: bool,
        relative_bias: bool,
    ) -> None:
        super().__init__(
            config, spec, impl=impl, causal=causal, cross=False, relative_bias=relative_bias,
            qk_head_dim=spec.head_dim, v_head_dim=spec.v_head_dim,
        )  # fmt: skip
        d, h = config.embed_dim, spec.num_heads
        self.nope, self.rope, self.v_dim = spec.qk_nope_head_dim, spec.qk_rope_head_dim, spec.v_head_dim
        self.latent_dim = spec.kv_lora_rank
        rank = spec.q_lora_rank
        self.q_a = nn.Linear(d, rank, bias=spec.qkv_bias) if rank is not None else None
        self.q_a_norm = make_norm(config, rank) if rank is not None else None
        self.q_b = nn.Linear(rank, h * spec.head_dim, bias=False) if rank is not None else None
        self.q = nn.Linear(d, h * spec.head_dim, bias=False) if rank is None else None
        self.kv_a = nn.Linear(d, spec.kv_lora_rank + self.rope, bias=spec.qkv_bias)
        self.kv_a_norm = make_norm(config, spec.kv_lora_rank)
        self.kv_b = nn.Linear(spec.kv_lora_rank, h * (self.nope + self.v_dim), bias=False)
        self.out = nn.Linear(h * self.v_dim, d, bias=spec.out_bias)
        self.query_scale = QueryScale(h) if spec.query_scale else None  # Mistral Large 4's softmax scaling

    def _queries(self, x: Tensor) -> Tensor:
        if self.q_a is not None and self.q_a_norm is not None and self.q_b is not None:
            out: Tensor = self.q_b(self.q_a_norm(self.q_a(x)))  # (B, T, r_q) -> (B, T, h (nope + rope))
            return out
        if self.q is None:  # pragma: no cover - the constructor builds one of the two
            raise RuntimeError("latent attention has no query projection")
        full: Tensor = self.q(x)  # (B, T, h (nope + rope))
        return full

    def _absorbed(
        self, q_nope: Tensor, q_rope: Tensor, cached: Tensor, bias: Tensor | None, blocked: Tensor | None
    ) -> Tensor:
        """Decode against the compressed cache without decompressing it (DeepSeek-V2 §2.1.2, "absorb" W_UK into the
        queries and W_UV after the context): q_nope (B, h, T, nope), q_rope (B, h, T, rope), cached
        (B, S, r_kv + rope) -> context (B, h, T, v). Scores are q_nope·W_UK·latent + q_rope·k_rope, scaled by
        1 / sqrt(nope + rope) as before."""
        # (h, nope + v, r)
        weight = self.kv_b.weight.view(self.num_heads, self.nope + self.v_dim, self.latent_dim)
        w_uk, w_uv = weight[:, : self.nope], weight[:, self.nope :]  # (h, nope, r), (h, v, r)
        query = torch.cat((torch.matmul(q_nope, w_uk), q_rope), dim=-1)  # (B, h, T, r + rope)
        keys = cached.unsqueeze(1)  # (B, 1, S, r + rope): one latent key shared by every head
        values = keys[..., : self.latent_dim]  # (B, 1, S, r)
        if self.sdpa is not None:
            mask: Tensor | None = None if bias is None else bias.to(query.dtype)  # (1, h, T, S)
            if blocked is not None:
                mask = ~blocked if mask is None else mask.masked_fill(blocked, float("-inf"))
            # (B, h, T, r)
            context = F.scaled_dot_product_attention(
                query, keys, values, attn_mask=mask, scale=self.scale, enable_gqa=True
            )
        else:
            context = self._eager(query, keys, values, bias, blocked)  # (B, h, T, r)
        return torch.matmul(context, w_uv.transpose(-2, -1))  # (B, h, T, v)

    def attend(
        self, x: Tensor, memory: Tensor | None, bias: Tensor | None, rotary: Rotary | None,
        cache: LayerCache | CrossCache | None = None, position: int = 0,
    ) -> Tensor:  # fmt: skip
        batch, length, _ = x.shape
        h = self.num_heads
        q = split_heads(self._queries(x), h)  # (B, h, T, nope + rope)
        if self.query_scale is not None:
            q = self.query_scale(q, position)
        q_nope, q_rope = torch.split(q, [self.nope, self.rope], dim=-1)  # (B, h, T, nope), (B, h, T, rope)
        compressed: Tensor = self.kv_a(x)  # (B, T, r_kv + rope)
        # (B, T, r_kv), (B, T, rope)
        latent, k_rope = torch.split(compressed, [self.latent_dim, self.rope], dim=-1)
        latent = self.kv_a_norm(latent)  # (B, T, r_kv)
        k_rope = k_rope.unsqueeze(1)  # (B, 1, T, rope): one rope key shared by every head
        if rotary is not None:
            cos, sin = rotary[self.rope]
            q_rope, k_rope = apply_rotary(q_rope, cos, sin), apply_rotary(k_rope, cos, sin)
        if isinstance(cache, LayerCache):
            cache.write(torch.cat((latent, k_rope.squeeze(1)), dim=-1), None, position)  # (B, T, r_kv + rope)
            if position > 0:
                if cache.rolling and length > 1:
                    raise ValueError("a rolling cache decodes one token at a time after the prompt")
                cached, _ = cache.read(position + length)  # (B, S, r_kv + rope)
                blocked = self._cached_blocked(cache, position, length, x.device)
                context = self._absorbed(q_nope, q_rope, cached, bias, blocked)  # (B, h, T, v)
                merged = context.transpose(1, 2).reshape(batch, length, h * self.v_dim)  # (B, T, h v)
                absorbed: Tensor = self.out(merged)  # (B, T, d)
                return absorbed
        kv = split_heads(self.kv_b(latent), h)  # (B, h, T, nope + v)
        k_nope, v = torch.split(kv, [self.nope, self.v_dim], dim=-1)  # (B, h, T, nope), (B, h, T, v)
        q = torch.cat((q_nope, q_rope), dim=-1)  # (B, h, T, nope + rope)
        k = torch.cat((k_nope, k_rope.expand(batch, h, length, self.rope)), dim=-1)  # (B, h, T, nope + rope)
        context = self._core(q, k, v, bias)  # (B, h, T, v)
        merged = context.transpose(1, 2).reshape(batch, length, h * self.v_dim)  # (B, T, h v)
        out: Tensor = self.out(merged)  # (B, T, d)
        return out
