"""DeepSeek-V4's compressed attention (attention kind ``compressed``): the torch reference of
:mod:`embedcalc.analysis.compressed`, written from transformers 5.24's ``DeepseekV4Attention``,
``DeepseekV4HCACompressor``, ``DeepseekV4CSACompressor``, ``DeepseekV4Indexer`` and ``DeepseekV4IndexerScorer``
(``modeling_deepseek_v4.py``; DeepSeek-V4 report §2.3).

Queries come from a query latent (``q_a``, its norm, ``q_b``, then an RMS norm per head without a weight); one key
per token (``kv``, its norm) is also the value, shared by every head. A compressor pools every ``compress_rate``
tokens into one entry: its ``proj`` gives each token a value and a gate (per series: two with overlapping windows,
an entry then pooling one window's second series with the previous window's first), the gates plus a bias per
window position are softmaxed over the window, the weighted values summed and normalised. The core attends, past
its sliding window, to the entries each query may see (those of windows closed before it); with an indexer (its
own overlapping compressor at ``index_head_dim``, queries ``index_q`` from the latent, head weights
``index_weights``) only to the ``index_topk`` best of them, scored as Σ_h w_h ReLU(q_h · k). Like transformers'
eager path, the core computes every query against every local key and entry and masks the rest. Learned sinks
join the softmax; the output projection is the attention's (grouped low-rank in DeepSeek-V4).

Rotary positions rotate the queries and the local keys (``rotary_dim`` channels); transformers also rotates the
entries at their windows' positions and the output back by the query's, element-wise steps left out here (they
change values, not sizes or FLOPs). No cache: generation with this kind is not modelled.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from embedcalc.config.layer_plan import Attention as ResolvedAttention
from embedcalc.config.resolved import ResolvedShape
from embedcalc.modeling.attention import AttentionBase, AttentionImpl, Rotary
from embedcalc.modeling.attention_parts import Context, Scores, output_projection, split_heads
from embedcalc.modeling.kv_cache import CrossCache, LayerCache
from embedcalc.modeling.norms import make_norm
from embedcalc.modeling.positions import apply_rotary


class Compressor(nn.Module):
    """Pools every ``rate`` tokens into one entry of ``width``: ``proj`` (d -> 2 series x width: values and gates),
    ``bias`` (rate, series x width) added to the gates, ``norm`` over the pooled entry."""

    def __init__(self, config: ResolvedShape, rate: int, width: int, overlap: bool) -> None:
        super().__init__()
        self.rate, self.width, self.series = rate, width, 2 if overlap else 1
        self.proj = nn.Linear(config.embed_dim, 2 * self.series * width, bias=False)
        self.bias = nn.Parameter(torch.zeros(rate, self.series * width))
        self.norm = make_norm(config, width)

    def forward(self, x: Tensor) -> Tensor:
        """(B, T, d) -> the entries of the T // rate closed windows, (B, T // rate, width)."""
        batch, length, _ = x.shape
        windows, m, w = length // self.rate, self.rate, self.width
        # every token is projected (the ones after the last closed window wait in transformers' cache)
        kv, gate = self.proj(x)[:, : windows * m].chunk(2, dim=-1)  # (B, W m, series x width) each
        if not windows:
            return x.new_zeros(batch, 0, w)
        kv = kv.reshape(batch, windows, m, self.series * w)
        gate = gate.reshape(batch, windows, m, self.series * w) + self.bias
        if self.series == 2:  # entry i pools window i's second series with window i - 1's first
            first_kv, first_gate = kv[..., :w], gate[..., :w]
            previous_kv = torch.cat([torch.zeros_like(first_kv[:, :1]), first_kv[:, :-1]], dim=1)
            previous_gate = torch.cat(
                [torch.full_like(first_gate[:, :1], float("-inf")), first_gate[:, :-1]], dim=1
            )
            kv = torch.cat([previous_kv, kv[..., w:]], dim=2)  # (B, W, 2 m, width)
            gate = torch.cat([previous_gate, gate[..., w:]], dim=2)
        weights = torch.softmax(gate, dim=2, dtype=torch.float32).to(kv.dtype)
        out: Tensor = self.norm((kv * weights).sum(dim=2))  # (B, W, width)
        return out


class IndexScores(nn.Module):
    """The indexer's query-entry dot products: (B, T, H_I, D_I) x (B, E, D_I) -> (B, T, H_I, E), a matmul."""

    def forward(self, q: Tensor, entries: Tensor) -> Tensor:
        return torch.matmul(q, entries.transpose(-1, -2).unsqueeze(1))


def _rms(x: Tensor) -> Tensor:
    """RMS normalisation over the last dimension without a weight (DeepseekV4UnweightedRMSNorm)."""
    return x * torch.rsqrt(x.float().square().mean(-1, keepdim=True) + 1e-6).to(x.dtype)


class CompressedAttention(AttentionBase):
    """DeepSeek-V4's attention sublayer (module docstring): ``q_a``, ``q_a_norm``, ``q_b``, ``kv``, ``kv_norm``,
    ``compressor``, the indexer's ``index_compressor``, ``index_q``, ``index_weights``, ``index_scores``, and the
    base's ``scores``, ``context``, ``sinks``, ``out``."""

    def __init__(
        self, config: ResolvedShape, spec: ResolvedAttention, *, impl: AttentionImpl, causal: bool
    ) -> None:
        super().__init__(
            config, spec, impl=impl, causal=causal, cross=False, relative_bias=False, qk_head_dim=spec.head_dim,
            v_head_dim=spec.head_dim,
        )  # fmt: skip
        d, h, hd, rank = config.embed_dim, spec.num_heads, spec.head_dim, spec.q_lora_rank or 0
        self.head_dim, self.value_head_dim = hd, hd
        self.scores, self.context, self.sdpa = (
            Scores(),
            Context(),
            None,
        )  # the eager core, as transformers runs it
        self.rotary_width = config.rotary_dim or hd
        self.q_a = nn.Linear(d, rank, bias=False)
        self.q_a_norm = make_norm(config, rank)
        self.q_b = nn.Linear(rank, h * hd, bias=False)
        self.kv = nn.Linear(d, hd, bias=False)
        self.kv_norm = make_norm(config, hd)
        self.rate = spec.compress_rate
        self.compressor = Compressor(config, self.rate, hd, spec.compress_overlap) if self.rate else None
        self.topk = spec.index_topk if spec.compressed_indexer else 0
        if self.topk:
            width = spec.index_head_dim
            self.index_heads, self.index_width = spec.index_heads, width
            self.index_compressor = Compressor(config, self.rate, width, True)
            self.index_q = nn.Linear(rank, spec.index_heads * width, bias=False)
            self.index_weights = nn.Linear(d, spec.index_heads, bias=False)
            self.index_scores = IndexScores()
        self.out = output_projection(h * hd, d, spec.out_groups, spec.out_rank, spec.out_bias)

    def _entry_mask(self, latent: Tensor, x: Tensor, entries: int) -> Tensor:
        """(B or 1, T, E) True where a query may not see an entry: windows not closed before it, and with an
        indexer the entries outside its top-k."""
        length = x.shape[1]
        query = torch.arange(length, device=x.device)[:, None]  # (T, 1)
        entry = torch.arange(entries, device=x.device)[None, :]  # (1, E)
        future = (entry >= (query + 1) // self.rate)[None]  # (1, T, E)
        if not self.topk:
            return future
        batch = x.shape[0]
        keys = self.index_compressor(x)  # (B, E, D_I)
        q = self.index_q(latent).view(batch, length, self.index_heads, self.index_width)
        scores = torch.relu(self.index_scores(q, keys))  # (B, T, H_I, E)
        weights = self.index_weights(x).unsqueeze(-1)  # (B, T, H_I, 1)
        scored = (scores * weights).sum(dim=2).masked_fill(future, float("-inf"))  # (B, T, E)
        chosen = scored.topk(min(self.topk, entries), dim=-1).indices  # (B, T, k)
        kept = torch.zeros_like(scored, dtype=torch.bool).scatter(-1, chosen, True)
        return future | ~kept

    def attend(
        self, x: Tensor, memory: Tensor | None, bias: Tensor | None, rotary: Rotary | None,
        cache: LayerCache | CrossCache | None = None, position: int = 0,
    ) -> Tensor:  # fmt: skip
        if cache is not None:
            raise ValueError(
                "generation with attention kind compressed (DeepSeek-V4) is not modelled: its cache of pooled "
                "entries is counted analytically only; use analyze or verify, not bench --mode generate"
            )
        batch, length, _ = x.shape
        latent = self.q_a_norm(self.q_a(x))  # (B, T, r)
        q = _rms(split_heads(self.q_b(latent), self.num_heads))  # (B, h, T, hd)
        k = split_heads(self.kv_norm(self.kv(x)), 1)  # (B, 1, T, hd): the key is also the value
        if rotary is not None:
            cos, sin = rotary[self.rotary_width]
            q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        blocked = self._blocked(length, length, x.device).expand(batch, length, length)  # (B, T, T)
        if self.compressor is not None:
            entries = self.compressor(x)  # (B, E, hd)
            k = torch.cat([k, entries.unsqueeze(1)], dim=2)  # (B, 1, T + E, hd)
            hidden = self._entry_mask(latent, x, entries.shape[1]).expand(batch, length, -1)
            blocked = torch.cat([blocked, hidden], dim=-1)  # (B, T, T + E)
        keys = k.expand(batch, self.num_heads, -1, -1)  # (B, h, T + E, hd)
        context = self._eager(q, keys, keys, bias, blocked.unsqueeze(1))  # (B, h, T, hd)
        return self._output(x, context)

    def _output(self, x: Tensor, context: Tensor) -> Tensor:
        batch, length, _ = x.shape
        out: Tensor = self.out(context.transpose(1, 2).reshape(batch, length, -1))  # (B, T, d)
        return out
