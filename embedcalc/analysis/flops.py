"""Forward FLOPs per component (DESIGN.md §4): 2 FLOPs per multiply-accumulate, matmuls only.

This is exactly what ``torch.utils.flop_counter.FlopCounterMode`` counts for the model ``embedcalc.modeling``
builds (mm/addmm/bmm and attention): bias adds, softmax, norms, activations and residual adds are not matmuls and
are estimated separately by :func:`elementwise_flops`. Embedding lookups count 0.

For a stack run on ``b`` sequences of ``n`` tokens (t = b * n), d = embed_dim, q = num_heads * head_dim,
kv = num_kv_heads * head_dim, f = ffn_dim, h = num_heads:

- ``attention/qkv``     2 t d (q + 2 kv)             Q, K, V projections (GQA-sized K and V)
- ``attention/out``     2 t q d
- ``attention/scores``  2 b h n n head_dim           Q·Kᵀ, the O(n²·d) term
- ``attention/context`` 2 b h n n head_dim           softmax(Q·Kᵀ)·V, the other O(n²·d) term
- ``ffn/in``            2 t d f (gated: 2 t d 2f)    up (and gate) projections
- ``ffn/out``           2 t f d
- cross-attention (decoder of an encoder-decoder, m target and n source tokens): Q and out on the m target
  tokens, K and V on the n encoder outputs, scores and context 2 b h m n head_dim each.
- ``pooler``            2 b d d                      first token only (BERT)
- ``head/lm``           2 b n d_tok vocab            every position of the last stack (d_tok = token_embed_dim)
- with token_embed_dim != embed_dim (OPT-350m): ``embedding/project_in`` 2 t d_tok d on every stack's tokens and
  ``head/project_out`` 2 b n d d_tok before the LM head.

The full n x n score matrix is counted (that is what eager attention and FlopCounterMode do); the causal count,
with only the n (n + 1) / 2 unmasked query-key pairs of self-attention in causal stacks, is reported beside it.
With a ``sliding_window`` W, query i sees min(i + 1, W) keys, so the causal count has m (m + 1) / 2 + (n - m) W
pairs, m = min(n, W) (Jiang et al. 2023, Mistral 7B, §2); the full count is unchanged (eager attention masks).
A training step is forward + backward with backward = 2 x forward for matmuls (Kaplan et al. 2020, §2.1).
"""

from __future__ import annotations

from dataclasses import dataclass

from embedcalc.analysis.breakdown import Breakdown
from embedcalc.analysis.structure import Stack, ffn_in_width, stacks
from embedcalc.analysis.workload import Workload
from embedcalc.config.schema import ModelConfig

SCORE_KEYS = ("scores", "context")


@dataclass(frozen=True)
class FlopsEstimate:
    """Forward FLOPs by component, the causal variant, and the training step."""

    breakdown: Breakdown
    causal_breakdown: Breakdown | None  # None when no stack is causal
    elementwise: Breakdown

    @property
    def forward(self) -> int:
        return self.breakdown.total

    @property
    def forward_causal(self) -> int | None:
        return None if self.causal_breakdown is None else self.causal_breakdown.total

    @property
    def training_step(self) -> int:
        return 3 * self.forward

    @property
    def attention_score_flops(self) -> int:
        """The O(n²) part: Q·Kᵀ and A·V of every attention layer."""
        return sum(v for k, v in self.breakdown.items() if k.rsplit("/", 1)[-1] in SCORE_KEYS)

    @property
    def attention_score_share(self) -> float:
        return self.attention_score_flops / self.forward if self.forward else 0.0


def _stack_lengths(config: ModelConfig, workload: Workload, stack: Stack) -> tuple[int, int]:
    """(tokens per sequence in this stack, tokens per sequence of the encoder memory it attends to)."""
    if config.architecture == "encoder-decoder" and stack.name == "decoder":
        tgt = workload.tgt_len if workload.tgt_len is not None else workload.seq_len
        return tgt, workload.seq_len
    return workload.seq_len, workload.seq_len


def _score_pairs(n: int, causal: bool, window: int | None = None) -> int:
    """Query-key pairs computed per head: n² in full, n (n + 1) / 2 with a causal mask, fewer with a window."""
    if not causal:
        return n * n
    m = n if window is None else min(n, window)
    return m * (m + 1) // 2 + (n - m) * (window or 0)


def _stack_flops(config: ModelConfig, workload: Workload, stack: Stack, out: Breakdown, causal: bool) -> None:
    b, L = workload.batch_size, stack.num_layers
    n, n_mem = _stack_lengths(config, workload, stack)
    d, q, kv, f = config.embed_dim, config.q_dim, config.kv_dim, config.resolved_ffn_dim
    hd, h = config.resolved_head_dim, config.num_heads
    t = b * n
    pairs = _score_pairs(n, causal and stack.causal, config.sliding_window)
    s = stack.name
    out.add(f"{s}/attention/qkv", L * 2 * t * d * (q + 2 * kv))
    out.add(f"{s}/attention/scores", L * 2 * b * h * pairs * hd)
    out.add(f"{s}/attention/context", L * 2 * b * h * pairs * hd)
    out.add(f"{s}/attention/out", L * 2 * t * q * d)
    if stack.cross_attention:
        out.add(f"{s}/cross_attention/qkv", L * (2 * t * d * q + 2 * b * n_mem * d * 2 * kv))
        out.add(f"{s}/cross_attention/scores", L * 2 * b * h * n * n_mem * hd)
        out.add(f"{s}/cross_attention/context", L * 2 * b * h * n * n_mem * hd)
        out.add(f"{s}/cross_attention/out", L * 2 * t * q * d)
    out.add(f"{s}/ffn/in", L * 2 * t * d * ffn_in_width(config))
    out.add(f"{s}/ffn/out", L * 2 * t * f * d)


def _forward(config: ModelConfig, workload: Workload, causal: bool) -> Breakdown:
    out = Breakdown()
    all_stacks = stacks(config)
    b, d, d_tok = workload.batch_size, config.embed_dim, config.resolved_token_embed_dim
    if config.embedding_projection:
        tokens = sum(b * _stack_lengths(config, workload, stack)[0] for stack in all_stacks)
        out.add("embedding/project_in", 2 * tokens * d_tok * d)
    for stack in all_stacks:
        _stack_flops(config, workload, stack, out, causal)
    if config.resolved_pooler:
        out.add("pooler", 2 * b * d * d)
    if config.resolved_lm_head:
        n_last, _ = _stack_lengths(config, workload, all_stacks[-1])
        if config.embedding_projection:
            out.add("head/project_out", 2 * b * n_last * d * d_tok)
        out.add("head/lm", 2 * b * n_last * d_tok * config.vocab_size)
    return out


# Element-wise FLOPs per element, an estimate: softmax = max, subtract, exp, sum, divide (+1 for the 1/sqrt(d)
# scale); LayerNorm = mean, subtract, square, mean, rsqrt-multiply, scale, shift; RMSNorm drops mean/subtract/shift;
# activations count their arithmetic roughly (erf/tanh ~ 8), gated adds the product.
_SOFTMAX_PER_SCORE = 6
_NORM_PER_ELEMENT = {"layernorm": 7, "rmsnorm": 4}
_ACTIVATION_PER_ELEMENT = {"relu": 1, "gelu": 8, "gelu_tanh": 8, "silu": 4, "swiglu": 5, "geglu": 9}


def elementwise_flops(config: ModelConfig, workload: Workload) -> Breakdown:
    """An estimate of the non-matmul work (softmax, norms, activations, residual adds); never in the matmul total."""
    out = Breakdown()
    b, d, h, f = workload.batch_size, config.embed_dim, config.num_heads, config.resolved_ffn_dim
    per_norm = _NORM_PER_ELEMENT[config.norm]
    for stack in stacks(config):
        n, n_mem = _stack_lengths(config, workload, stack)
        L, t = stack.num_layers, b * n
        sublayers = 3 if stack.cross_attention else 2
        scores = h * n * n + (h * n * n_mem if stack.cross_attention else 0)
        out.add(f"{stack.name}/softmax", L * b * scores * _SOFTMAX_PER_SCORE)
        out.add(f"{stack.name}/norms", L * sublayers * t * d * per_norm)
        out.add(f"{stack.name}/activation", L * t * f * _ACTIVATION_PER_ELEMENT[config.activation])
        out.add(f"{stack.name}/residual", L * sublayers * t * d)
    return out


def forward_flops(config: ModelConfig, workload: Workload) -> FlopsEstimate:
    """Forward-pass matmul FLOPs of ``config`` on ``workload``, by component, with causal and element-wise views."""
    has_causal = any(s.causal for s in stacks(config))
    return FlopsEstimate(
        breakdown=_forward(config, workload, causal=False),
        causal_breakdown=_forward(config, workload, causal=True) if has_causal else None,
        elementwise=elementwise_flops(config, workload),
    )
