"""Mixture of experts (Shazeer et al. 2017; Fedus et al. 2021, Switch): a ``router``, ``experts`` with top-k
routing, optional ``shared`` experts every token goes through (DeepSeekMoE, Dai et al. 2024) and a sigmoid
``shared_gate`` on them (Qwen2-MoE), and a ``latent`` width the routed experts run in (Nemotron-3's latent MoE:
NemotronHMoE's ``fc1_latent_proj`` d -> L before the experts, ``fc2_latent_proj`` L -> d after them). Breakdown
keys ``moe/router``, ``moe/experts``, ``moe/shared``, ``moe/shared_gate``, ``moe/latent`` (docs/layers.md).

Experts are stacked tensors, as transformers' Mixtral, Qwen3-MoE and DeepSeek-V3 hold them: ``gate_up``
(E, 2 fe, d) for gated activations (``up`` (E, fe, d) otherwise) and ``down`` (E, d, fe), biases (E, ·) when
``expert_bias`` (gpt-oss). Each expert multiplies only its own tokens (index_select, two matmuls, a weighted
scatter-add back), so FlopCounterMode sees 2 t k (d fe_in + fe d) FLOPs whatever the routing.

Routing: ``real`` takes the softmax over the router logits, the top-k experts and their renormalised
probabilities (Mixtral, Qwen3-MoE with norm_topk_prob). ``deterministic`` sends token i to experts
(i k + j) mod E, j < k, weighted by the same renormalised probabilities: it needs no data, so it is what the meta
device uses (FlopCounterMode counts without allocating) and what verification may ask for anywhere. The families'
finer routing rules (DeepSeek-V3's group-limited sigmoid scores, gpt-oss's softmax over the top-k logits) change
which experts a token reaches, never how many, so no count depends on them. Zero experts (LongCat-Flash's
``zero_expert_num``) are identity experts the router also scores: a slot routed to one passes its token through,
weighted, while the real expert its id is clamped to runs with weight 0, so every token still runs top_k real
experts: the analytic count, the most a token of LongCat-Flash uses (deterministic routing picks real ones only).
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from embedcalc.config.layer_plan import FFN as ResolvedFFN
from embedcalc.modeling.ffn import GATED, MLP, activate, activate_gated

Routing = Literal["real", "deterministic"]


def deterministic_experts(tokens: int, top_k: int, num_experts: int) -> Tensor:
    """(tokens, top_k) expert ids on the CPU: token i -> experts (i k + j) mod E, distinct for k <= E."""
    token = torch.arange(tokens)[:, None]  # (t, 1)
    slot = torch.arange(top_k)[None, :]  # (1, k)
    return (token * top_k + slot) % num_experts  # (t, k)


class Experts(nn.Module):
    """E routed FFNs of width fe as stacked tensors; :meth:`forward` runs each on its own tokens. ``embed_dim`` is
    the width they read and write (a latent MoE's L)."""

    def __init__(self, embed_dim: int, spec: ResolvedFFN, activation: str) -> None:
        super().__init__()
        e, fe = spec.num_experts, spec.expert_dim
        self.activation, self.gated = activation, activation in GATED
        width_in = 2 * fe if self.gated else fe
        self.gate_up = nn.Parameter(torch.empty(e, width_in, embed_dim))  # (E, fe_in, d)
        self.down = nn.Parameter(torch.empty(e, embed_dim, fe))  # (E, d, fe)
        self.gate_up_bias = nn.Parameter(torch.empty(e, width_in)) if spec.expert_bias else None
        self.down_bias = nn.Parameter(torch.empty(e, embed_dim)) if spec.expert_bias else None

    def _expert(self, e: int, x: Tensor) -> Tensor:
        """Expert ``e`` on its tokens: (n_e, d) -> (n_e, d)."""
        bias_in = self.gate_up_bias[e] if self.gate_up_bias is not None else None
        bias_out = self.down_bias[e] if self.down_bias is not None else None
        hidden = F.linear(x, self.gate_up[e], bias_in)  # (n_e, fe_in)
        if self.gated:
            gate, up = hidden.chunk(2, dim=-1)  # (n_e, fe) each
            hidden = activate_gated(self.activation, gate, up)  # (n_e, fe)
        else:
            hidden = activate(self.activation, hidden)  # (n_e, fe)
        return F.linear(hidden, self.down[e], bias_out)  # (n_e, d)

    def _grouped(self, ids: list[int], x: Tensor, tokens: Tensor) -> Tensor:
        """Experts ``ids`` (G of them) with n tokens each, as two batched matmuls: x (G n, d) -> (G n, d)."""
        group = torch.tensor(ids, device=x.device)  # (G,)
        count, d = tokens.shape[0] // len(ids), x.shape[-1]
        xs = x.index_select(0, tokens).view(len(ids), count, d)  # (G, n, d)
        hidden = torch.bmm(xs, self.gate_up.index_select(0, group).transpose(1, 2))  # (G, n, fe_in)
        if self.gate_up_bias is not None:
            hidden = hidden + self.gate_up_bias.index_select(0, group)[:, None]  # (G, 1, fe_in) broadcast
        if self.gated:
            gate, up = hidden.chunk(2, dim=-1)  # (G, n, fe) each
            hidden = activate_gated(self.activation, gate, up)  # (G, n, fe)
        else:
            hidden = activate(self.activation, hidden)  # (G, n, fe)
        out = torch.bmm(hidden, self.down.index_select(0, group).transpose(1, 2))  # (G, n, d)
        if self.down_bias is not None:
            out = out + self.down_bias.index_select(0, group)[:, None]  # (G, 1, d) broadcast
        return out.reshape(len(ids) * count, d)  # (G n, d)

    def forward(self, x: Tensor, experts: Tensor, weights: Tensor, grouped: bool | None = None) -> Tensor:
        """x (t, d); experts (t, k) ids (any device: the grouping runs where they are); weights (t, k) on x's
        device. Returns sum_j weights[i, j] * expert_{experts[i, j]}(x_i), (t, d).

        ``grouped`` (default: on the meta device) runs the experts that have the same number of tokens as one
        batched matmul over their gathered weights, which costs nothing on meta (deterministic routing gives at
        most two such groups, so counting a 256-expert layer takes a few ops, not thousands) but would copy
        weights on a real device, where each expert runs on its own tokens instead. FLOPs are the same.
        """
        top_k = experts.shape[1]
        flat = experts.flatten()  # (t k,)
        order = flat.argsort(stable=True)  # assignments grouped by expert
        counts = torch.bincount(flat, minlength=self.gate_up.shape[0]).tolist()
        tokens_of = (order // top_k).to(x.device)  # (t k,): the token of each grouped assignment
        weight_of = weights.flatten().index_select(0, order.to(x.device))  # (t k,)
        starts = [sum(counts[:e]) for e in range(len(counts))]
        out = torch.zeros_like(x)  # (t, d)
        if grouped if grouped is not None else x.device.type == "meta":
            by_count: dict[int, list[int]] = {}
            for e, n in enumerate(counts):
                if n:
                    by_count.setdefault(n, []).append(e)
            for n, ids in by_count.items():
                # (G n,)
                picks = torch.cat([torch.arange(starts[e], starts[e] + n) for e in ids]).to(x.device)
                tokens = tokens_of.index_select(0, picks)  # (G n,)
                routed = self._grouped(ids, x, tokens)  # (G n, d)
                out.index_add_(0, tokens, routed * weight_of.index_select(0, picks)[:, None].to(routed.dtype))
            return out
        for e, n in enumerate(counts):
            if n == 0:
                continue
            tokens = tokens_of[starts[e] : starts[e] + n]  # (n_e,)
            routed = self._expert(e, x.index_select(0, tokens))  # (n_e, d)
            out.index_add_(0, tokens, routed * weight_of[starts[e] : starts[e] + n, None].to(routed.dtype))
        return out


class Latent(nn.Module):
    """The latent width of a latent MoE: ``in_`` d -> L before the routed experts, ``out`` L -> d after them (biased as
    the FFN; NemotronHMoE's fc1/fc2_latent_proj). One module for the key ``moe/latent``: each direction is a call."""

    def __init__(self, embed_dim: int, latent_dim: int, bias: bool) -> None:
        super().__init__()
        self.in_ = nn.Linear(embed_dim, latent_dim, bias=bias)
        self.out = nn.Linear(latent_dim, embed_dim, bias=bias)

    def forward(self, x: Tensor, back: bool = False) -> Tensor:
        """(t, d) -> (t, L), or with ``back`` (t, L) -> (t, d)."""
        projected: Tensor = self.out(x) if back else self.in_(x)
        return projected


class RouterScale(nn.Module):
    """Gemma 4's router scales (``Gemma4TextRouter.scale``, ``.per_expert_scale``): ``input`` (d) multiplies the
    router's input, ``experts`` (E) each chosen expert's weight; no matmul (key ``moe/router_scale``)."""

    def __init__(self, embed_dim: int, num_experts: int) -> None:
        super().__init__()
        self.input = nn.Parameter(torch.empty(embed_dim))
        self.experts = nn.Parameter(torch.empty(num_experts))


class BranchNorms(nn.Module):
    """Gemma 4's norms around the two branches of its MoE block (``post_feedforward_layernorm_1`` on the dense
    MLP's output, ``pre_`` / ``post_feedforward_layernorm_2`` on the experts' input and output; key
    ``moe/branch_norms``). Gemma 4 feeds the experts its un-normalised residual through ``routed_in``; here they get
    the sublayer's input like the shared branch: the same shapes, so the same counts."""

    def __init__(self, shared_out: nn.Module, routed_in: nn.Module, routed_out: nn.Module) -> None:
        super().__init__()
        self.shared_out, self.routed_in, self.routed_out = shared_out, routed_in, routed_out


class MoE(nn.Module):
    """Router, routed experts, shared experts and their gate: (B, T, d) -> (B, T, d), no norm or residual."""

    def __init__(
        self, embed_dim: int, spec: ResolvedFFN, activation: str, routing: Routing = "real",
        branch_norms: BranchNorms | None = None,
    ) -> None:  # fmt: skip
        super().__init__()
        self.top_k, self.num_experts, self.routing = spec.top_k, spec.num_experts, routing
        self.zero_experts = spec.zero_experts  # identity experts after the real ones (LongCat-Flash)
        self.router = nn.Linear(embed_dim, spec.num_experts + spec.zero_experts, bias=spec.router_bias)
        self.latent = Latent(embed_dim, spec.latent_dim, spec.bias) if spec.latent_dim else None
        self.experts = Experts(spec.latent_dim or embed_dim, spec, activation)
        self.shared = MLP(embed_dim, spec.shared_dim, spec.bias, activation) if spec.shared_dim else None
        self.shared_gate = (
            nn.Linear(embed_dim, 1, bias=False) if spec.shared_dim and spec.shared_gate else None
        )
        self.router_scale = RouterScale(embed_dim, spec.num_experts) if spec.router_scale else None
        self.branch_norms = branch_norms

    def _route(self, logits: Tensor) -> tuple[Tensor, Tensor]:
        """Expert ids (t, k) and their weights (t, k), renormalised over the chosen experts."""
        probs = torch.softmax(logits, dim=-1, dtype=torch.float32)  # (t, E)
        if self.routing == "deterministic" or logits.device.type == "meta":
            # (t, k) on the CPU
            experts = deterministic_experts(logits.shape[0], self.top_k, self.num_experts)
            weights = probs.gather(1, experts.to(logits.device))  # (t, k)
        else:
            weights, experts = probs.topk(self.top_k, dim=-1)  # (t, k) each
        return experts, weights / weights.sum(dim=-1, keepdim=True)

    def forward(self, x: Tensor) -> Tensor:
        batch, length, d = x.shape
        tokens = x.reshape(batch * length, d)  # (t, d)
        scale = self.router_scale
        experts, weights = self._route(self.router(tokens * scale.input if scale is not None else tokens))
        if scale is not None:  # (t, k): the chosen experts' own scales
            weights = weights * scale.experts.index_select(0, experts.flatten().to(x.device)).view_as(weights)
        norms = self.branch_norms
        routed_in = norms.routed_in(tokens) if norms is not None else tokens  # (t, d)
        if self.latent is not None:
            routed_in = self.latent(routed_in)  # (t, L)
        zero = None
        if (
            self.zero_experts
        ):  # a slot on an identity expert passes its token through, weighted; the real expert
            # its id is clamped to runs with weight 0, so every token runs top_k real experts (the analytic count)
            zero = experts.to(x.device) >= self.num_experts  # (t, k)
            experts = experts.clamp(max=self.num_experts - 1)
            passed = (weights * zero).sum(dim=-1, keepdim=True)  # (t, 1)
            weights = weights.masked_fill(zero, 0.0)
        out = self.experts(routed_in, experts, weights)  # (t, d), or (t, L) in the latent width
        if zero is not None:
            out = out + passed.to(out.dtype) * routed_in
        if self.latent is not None:
            out = self.latent(out, back=True)  # (t, d)
        if norms is not None:
            out = norms.routed_out(out)
        if self.shared is not None:
            shared = self.shared(tokens)  # (t, d)
            if self.shared_gate is not None:
                shared = torch.sigmoid(self.shared_gate(tokens)) * shared  # (t, 1) * (t, d)
            if norms is not None:
                shared = norms.shared_out(shared)
            out = out + shared
        merged: Tensor = out.view(batch, length, d)  # (B, T, d)
        return merged
