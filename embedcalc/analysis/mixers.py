"""The recurrent token mixers' terms (DESIGN.md §16; config/mixer_spec.py): parameters, FLOPs of the chunked form and of
one decode step, and the recurrent state per sequence. Every function takes a
:class:`~embedcalc.analysis.structure.Dims`, so the sweep grid calls these same formulas on numpy arrays.

Conventions (the ones of analysis/flops.py: 2 FLOPs per multiply-accumulate, what ``FlopCounterMode`` counts on the
torch model of ``modeling/ssm.py``), for a Mamba-2 layer (Dao & Gu 2024, "Transformers are SSMs", §6 and Listing 1)
with d embed_dim, H heads of P channels (inner I = H P), G groups, state N, conv kernel K, chunk Q, on b sequences of
n tokens (t = b n), the sequence padded to L = ceil(n / Q) Q tokens as the chunked scan pads it:

| key | tensors | forward FLOPs |
| --- | --- | --- |
| ``mixer/in`` | Linear(d, 2 I + 2 G N + H) (z, x, B, C, dt), bias when ``bias`` | 2 t d (2 I + 2 G N + H) |
| ``mixer/conv`` | depthwise Conv1d, conv_dim = I + 2 G N channels, K taps, bias when ``conv_bias`` | 2 t conv_dim K |
| ``mixer/ssm`` | A_log, D, dt_bias: H each | 2 b H L (Q N + Q P + 2 P N) |
| ``mixer/gate_norm`` | the gated RMSNorm over I (I weights; none without ``gate_norm``) | 0 |
| ``mixer/out`` | Linear(I, d), bias when ``out_bias`` (default ``bias``) | 2 t I d |
| ``mixer/norm`` | the sublayer's norms (as ``attention/norm``; none beside attention) | 0 |

A mixer that runs **in parallel with the block's attention** (Falcon-H1) has every term above but ``mixer/norm``:
it reads the output of ``attention/norm``, so the block's parameters, FLOPs, KV cache and state are exactly those of
its attention plus those of its mixer (the sum of the two outputs is one element-wise add).

The scan's four matmuls per chunk are the SSD algorithm's: C Bᵀ within the chunk (Q x Q x N), its product with X
(Q x Q x P), the chunk's final state Bᵀ X (P x Q x N) and the state's contribution C h (Q x N x P). The state is
passed from chunk to chunk by a scan (a multiply-add per state element per chunk, element-wise, like the fused
kernels' state passing); transformers' CPU path (``torch_forward``) does that step as a (c + 1) x (c + 1) matrix
product instead, 2 b H (c + 1)² P N more FLOPs with c = ceil(n / Q) chunks, and pads its convolution on both sides,
2 b conv_dim K (K - 1) more: tests/sources/hf/test_mixers_hf.py checks transformers' count equals ours plus exactly
those two.
Cost is linear in n (up to the last chunk's padding), where attention's scores grow as n².

A Mamba-1 layer (Gu & Dao 2023, Algorithm 2; transformers' ``JambaMambaMixer``), inner I, state N, rank R, scanned
token by token: ``in`` Linear(d, 2 I), ``conv`` over I channels, ``x_proj`` Linear(I, R + 2 N), ``dt_proj``
Linear(R, I) with bias, ``ssm`` A_log (I x N) and D (I), ``bc_norm`` (Jamba) RMSNorms of R, N, N, ``out`` Linear(I, d);
the scan 2 t I N (the state read out by C each token), the same per token in a decode step. State: I K + I N.

A gated DeltaNet layer (Yang, Kautz & Hatamizadeh 2025, §3; transformers' ``torch_chunk_gated_delta_rule``), with
Hv value heads of dv, Hk query/key heads of dk (key_dim = Hk dk, q and k repeated to Hv heads), chunk C: ``in``
Linear(d, 2 key_dim + 2 Hv dv + 2 Hv) (q, k, v, z, beta, a), ``conv`` over 2 key_dim + Hv dv channels (no bias),
``ssm`` A_log and dt_bias (Hv each), ``gate_norm`` one RMSNorm weight of dv shared by the heads, ``out``
Linear(Hv dv, d); the scan 2 b Hv L (2 C dk + C dv + 3 dk dv): (β K) Kᵀ and Q Kᵀ within each chunk, the intra-chunk
output, and per chunk the state read twice (by the decayed keys and by Q) and updated once (Kᵀ V). The two
unit-triangular solves of the UT transform (C² (dk + dv) / 2 multiply-adds per chunk and head) are not matmuls:
``FlopCounterMode`` counts none, and neither does this count. State: conv_dim x K + Hv x dk x dv; a decode step's
scan is 2 b Hv dv 2 dk (the state read by k and by q).

A Kimi Delta Attention layer (Kimi Linear, arXiv:2510.26692 §3; transformers' ``chunk_kimi_delta_attention``), H
heads of h (inner I = H h), chunk C: ``in`` Linear(d, 3 I + H) (q, k, v, beta; transformers' q/k/v/b_proj),
``conv`` over 3 I channels (no bias), ``gate`` the two low-rank gates f_a Linear(d, h) -> f_b Linear(h, I) (the
per-channel decay) and g_a -> g_b (the output gate), ``ssm`` A_log (H) and dt_bias (I), ``gate_norm`` one RMSNorm
weight of h, ``out`` Linear(I, d); the scan 2 b H L (3 C h + 3 h²): T (β V) and T (β K e^g) with the chunk's
inverted unit-triangular T (C² h each), the intra-chunk output (C² h), the state read by Q and by the decayed keys
and updated by Kᵀ V (C h² each). With a decay per channel the intra-chunk scores are element-wise sums, not matmuls,
and the triangular solve is a loop: ``FlopCounterMode`` counts neither, nor does this count. State: 3 I x K + H x h
x h; a decode step's scan is 2 b H h 2 h.

A short convolution (LFM2; transformers' ``Lfm2ShortConv``), inner I, kernel K: ``in`` Linear(d, 3 I) (B, C, x),
``conv`` over I channels of B * x, ``out`` Linear(I, d), the biases of all three when ``conv_bias``; no scan (the
gates B * x and C * y are element-wise). FLOPs 2 t d 3 I + 2 t I K + 2 t I d, the same per token in a decode step;
transformers' convolution pads both sides, 2 b I K (K - 1) more. State: I K (transformers' conv-state layout).

A lightning-attention layer (MiniMax; Qin et al. 2024, "Lightning Attention-2", arXiv:2401.04658, Algorithm 1;
transformers' ``MiniMaxLightningAttention``), H heads of width h (inner I = H h), block B: ``in`` Linear(d, 4 I)
(qkv_proj d -> 3 I and output_gate d -> I, one key: both read the layer's input), ``gate_norm`` the RMSNorm over I
before the sigmoid gate (I weights), ``out`` Linear(I, d); no convolution and no scan parameters (the decay rate
of each head is computed from the head and layer index). Per head and block of c tokens the block form does four
matmuls: Q Kᵀ within the block (c x c x h) and its masked product with V (c x c x h), counted over the whole c x c
block as the kernel and transformers compute it (the mask is element-wise), then Q times the carried state (c x h x
h) and the block's Kᵀ V (h x c x h) that updates it (the state's decay is element-wise):
``ssm`` = 2 b H (2 h (⌊n / B⌋ B² + (n mod B)²) + 2 n h²) — per token 4 H h (B + h) on whole blocks, linear in n;
the last block runs at its own length (transformers does not pad). A decode step (the recurrent form) is
2 b H 2 h² (the new token's kᵀ v and q times the state). State: H x h x h per sequence (transformers'
``MiniMaxCache.linear_cache``), no convolution window.

One **decode step** runs the recurrence instead: ``in`` and ``out`` on one token, ``conv`` 2 b conv_dim K (the
window of K inputs against the kernel), ``ssm`` 2 b H P N (the state read out by C; its update is element-wise).

**State** per sequence and layer, constant in the context: conv_dim x K (the last K inputs of the convolution,
transformers' and mamba_ssm's layout) + H x P x N (the SSM state), in the activation dtype; a Mamba-2 mixer with
``ssm_state_dtype`` keeps its SSM state in that dtype (Nemotron-H's ``mamba_ssm_cache_dtype``, float32 by default:
transformers 5.24 never reads the key, and its torch path keeps the SSM state in float32 whatever the model's
dtype; vLLM allocates the SSM state, not the convolution window, in it).
"""

from __future__ import annotations

from fractions import Fraction

from embedcalc.analysis.structure import Dims, Num
from embedcalc.analysis.tensor import ParamTensor, linear
from embedcalc.config.dtypes import DTYPE_BYTES
from embedcalc.config.layer_plan import Block
from embedcalc.config.mixer_plan import Mixer
from embedcalc.config.resolved import ResolvedShape

MIXER_KEYS = ("in", "conv", "gate", "ssm", "gate_norm", "out")


def mixer_tensors(m: Mixer, x: Dims, prefix: str = "mixer") -> list[ParamTensor]:
    """The tensors of one recurrent mixer (keys ``prefix/...``, module docstring); replicated under tensor
    parallelism (not modelled as sharded)."""
    d = x.d
    out = linear(f"{prefix}/in", d, m.in_width, m.bias, "none")
    if m.lightning:  # MiniMax: qkv_proj + output_gate, the RMSNorm over the heads' output, out_proj
        return [
            *out,
            ParamTensor(f"{prefix}/gate_norm", (m.inner,)),
            *linear(f"{prefix}/out", m.inner, d, m.out_proj_bias, "none"),
        ]
    out.append(ParamTensor(f"{prefix}/conv", (m.conv_dim, 1, m.conv_kernel)))
    if m.conv_bias:
        out.append(ParamTensor(f"{prefix}/conv", (m.conv_dim,)))
    if m.short_conv:  # LFM2: in_proj, the conv and out_proj only
        return out + linear(f"{prefix}/out", m.inner, d, m.out_proj_bias, "none")
    if m.kda:  # Kimi Linear: f_a/f_b (decay) and g_a/g_b (output gate), dt_bias per channel, A_log per head
        for _ in range(2):
            out += linear(f"{prefix}/gate", d, m.head_dim, False, "none")
            out += linear(f"{prefix}/gate", m.head_dim, m.inner, False, "none")
        out += [ParamTensor(f"{prefix}/ssm", (m.num_heads,)), ParamTensor(f"{prefix}/ssm", (m.inner,))]
        out.append(ParamTensor(f"{prefix}/gate_norm", (m.head_dim,)))
        return out + linear(f"{prefix}/out", m.inner, d, m.out_proj_bias, "none")
    if m.mamba1:  # Gu & Dao 2023: x_proj -> (dt, B, C), dt_proj (biased), A_log (I x N), D (I)
        out += linear(f"{prefix}/x_proj", m.inner, m.dt_rank + 2 * m.state_size, False, "none")
        out += linear(f"{prefix}/dt_proj", m.dt_rank, m.inner, True, "none")
        out += [
            ParamTensor(f"{prefix}/ssm", (m.inner, m.state_size)),
            ParamTensor(f"{prefix}/ssm", (m.inner,)),
        ]
        if m.bc_norms:
            out += [ParamTensor(f"{prefix}/bc_norm", (w,)) for w in (m.dt_rank, m.state_size, m.state_size)]
        return out + linear(f"{prefix}/out", m.inner, d, m.out_proj_bias, "none")
    per_head = ("A_log", "dt_bias") if m.deltanet else ("A_log", "D", "dt_bias")
    out += [ParamTensor(f"{prefix}/ssm", (m.num_heads,)) for _ in per_head]
    if m.gate_norm:  # Falcon-H1 with mamba_rms_norm false gates by silu(z) alone
        out.append(ParamTensor(f"{prefix}/gate_norm", (m.head_dim if m.deltanet else m.inner,)))
    out += linear(f"{prefix}/out", m.inner, d, m.out_proj_bias, "none")
    return out


def padded_tokens(n: Num, chunk: int) -> Num:
    """Tokens per sequence once padded to whole chunks: ceil(n / chunk) x chunk."""
    return (n + chunk - 1) // chunk * chunk


def mixer_flops(
    m: Mixer, x: Dims, layers: Num, n: Num, prefix: str = "mixer", pad: bool = True
) -> list[tuple[str, Num]]:
    """Forward FLOPs of ``layers`` Mamba-2 layers on ``x.b`` sequences of ``n`` tokens (chunked form); ``pad``
    false: the scan per token, without the last chunk's padding."""
    b, d = x.b, x.d
    t = b * n
    if m.mamba1:
        return _mamba1_terms(m, x, layers, t, prefix)
    if m.short_conv:
        return _short_conv_terms(m, x, layers, t, prefix)
    if m.lightning:
        return _lightning_terms(m, x, layers, n, prefix, pad)
    if m.kda:
        return _kda_terms(m, x, layers, n, prefix, pad)
    q, heads, p, state = m.chunk_size, m.num_heads, m.head_dim, m.state_size
    scanned = padded_tokens(n, q) if pad else n
    # per head and token; DeltaNet: Q Kᵀ and (β K) Kᵀ (2 Q dk), the intra-chunk output (Q dv), the state 3 dk dv
    delta = q * 2 * m.head_k_dim + q * p + 3 * m.head_k_dim * p
    per_token = delta if m.deltanet else q * state + q * p + 2 * p * state
    scan = (b * scanned) * (layers * 2 * heads * per_token)
    return [
        (f"{prefix}/in", t * (layers * 2 * d * m.in_width)),
        (f"{prefix}/conv", t * (layers * 2 * m.conv_dim * m.conv_kernel)),
        (f"{prefix}/ssm", scan),
        (f"{prefix}/out", t * (layers * 2 * m.inner * d)),
    ]


def _kda_terms(m: Mixer, x: Dims, layers: Num, n: Num, prefix: str, pad: bool) -> list[tuple[str, Num]]:
    """Kimi Delta Attention's chunked form on ``x.b`` sequences of ``n`` tokens (module docstring): the projections,
    the two low-rank gates, and per head and chunk of C tokens six matmuls, T (β V) and T (β K e^g) (C² h each), the
    inter-chunk reads Q S and (T β K e^g) S and the state update Kᵀ V (C h² each) and the intra-chunk output (C² h);
    the intra-chunk scores with per-channel decays and the triangular solve are element-wise (counted by no one)."""
    b, d, c, h = x.b, x.d, m.chunk_size, m.head_dim
    t = b * n
    scanned = padded_tokens(n, c) if pad else n
    return [
        (f"{prefix}/in", t * (layers * 2 * d * m.in_width)),
        (f"{prefix}/conv", t * (layers * 2 * m.conv_dim * m.conv_kernel)),
        (f"{prefix}/gate", t * (layers * 2 * 2 * (d * h + h * m.inner))),
        (f"{prefix}/ssm", (b * scanned) * (layers * 2 * m.num_heads * (3 * c * h + 3 * h * h))),
        (f"{prefix}/out", t * (layers * 2 * m.inner * d)),
    ]


def _mamba1_terms(m: Mixer, x: Dims, layers: Num, t: Num, prefix: str) -> list[tuple[str, Num]]:
    """Mamba-1 on ``t`` tokens, the same per token in a prompt and in a decode step (a sequential scan): the four
    projections and the state read out by C, 2 I N per token (the discretisation and the update are element-wise)."""
    d, inner, n_state, rank = x.d, m.inner, m.state_size, m.dt_rank
    return [
        (f"{prefix}/in", t * (layers * 2 * d * m.in_width)),
        (f"{prefix}/conv", t * (layers * 2 * m.conv_dim * m.conv_kernel)),
        (f"{prefix}/x_proj", t * (layers * 2 * inner * (rank + 2 * n_state))),
        (f"{prefix}/dt_proj", t * (layers * 2 * rank * inner)),
        (f"{prefix}/ssm", t * (layers * 2 * inner * n_state)),
        (f"{prefix}/out", t * (layers * 2 * inner * d)),
    ]


def _short_conv_terms(m: Mixer, x: Dims, layers: Num, t: Num, prefix: str) -> list[tuple[str, Num]]:
    """The short convolution on ``t`` tokens, the same per token in a prompt and in a decode step (LFM2): the two
    projections and the K-tap convolution; its gates are element-wise."""
    return [
        (f"{prefix}/in", t * (layers * 2 * x.d * m.in_width)),
        (f"{prefix}/conv", t * (layers * 2 * m.conv_dim * m.conv_kernel)),
        (f"{prefix}/out", t * (layers * 2 * m.inner * x.d)),
    ]


def _lightning_terms(m: Mixer, x: Dims, layers: Num, n: Num, prefix: str, pad: bool) -> list[tuple[str, Num]]:
    """Lightning attention's block form on ``x.b`` sequences of ``n`` tokens (module docstring): the projections and
    per head the intra-block Q Kᵀ and its product with V (c² h each per block of c tokens) and the inter-block Q S
    and Kᵀ V (c h² each); ``pad`` false: every token at the whole-block rate B² / B = B."""
    b, d, block, h = x.b, x.d, m.chunk_size, m.head_dim
    t = b * n
    squares = (
        n // block * (block * block) + (n % block) * (n % block) if pad else n * block
    )  # sum of c² over blocks
    scan = b * (layers * 2 * m.num_heads) * (2 * h * squares + 2 * h * h * n)
    return [
        (f"{prefix}/in", t * (layers * 2 * d * m.in_width)),
        (f"{prefix}/ssm", scan),
        (f"{prefix}/out", t * (layers * 2 * m.inner * d)),
    ]


def mixer_step_flops(m: Mixer, x: Dims, layers: Num, prefix: str = "mixer") -> list[tuple[str, Num]]:
    """FLOPs of one decode step (one token per sequence) of ``layers`` recurrent layers: the recurrent form."""
    b, d = x.b, x.d
    if m.mamba1:
        return _mamba1_terms(m, x, layers, b, prefix)
    if m.short_conv:
        return _short_conv_terms(m, x, layers, b, prefix)
    if m.lightning:  # the recurrent form: S <- λ S + kᵀ v, y = q S (two h x h products per head)
        return [
            (f"{prefix}/in", b * (layers * 2 * d * m.in_width)),
            (f"{prefix}/ssm", b * (layers * 2 * m.num_heads * 2 * m.head_dim * m.head_dim)),
            (f"{prefix}/out", b * (layers * 2 * m.inner * d)),
        ]
    read = 2 * m.head_k_dim if m.deltanet else m.state_size  # DeltaNet reads the state with k and with q
    if m.kda:  # the state (h x h per head) read by k and by q; the two low-rank gates on the one token
        read = 2 * m.head_dim
    gates = (
        [(f"{prefix}/gate", b * (layers * 2 * 2 * (d * m.head_dim + m.head_dim * m.inner)))] if m.kda else []
    )
    return [
        (f"{prefix}/in", b * (layers * 2 * d * m.in_width)),
        (f"{prefix}/conv", b * (layers * 2 * m.conv_dim * m.conv_kernel)),
        *gates,
        (f"{prefix}/ssm", b * (layers * 2 * m.num_heads * m.head_dim * read)),
        (f"{prefix}/out", b * (layers * 2 * m.inner * d)),
    ]


def state_values(block: Block) -> int:
    """Values of one layer's recurrent state per sequence (0 for attention and for no mixer)."""
    return block.mixer.state_values if block.mixer is not None else 0


def ssm_state_bytes(m: Mixer, element_bytes: int | Fraction) -> int | Fraction:
    """Bytes per value of the SSM state: its own dtype where the mixer sets one (Nemotron-H's
    mamba_ssm_cache_dtype), else ``element_bytes`` (the activation or KV dtype)."""
    return int(DTYPE_BYTES[m.ssm_state_dtype]) if m.ssm_state_dtype is not None else element_bytes


def state_terms(config: ResolvedShape, x: Dims, element_bytes: int) -> Num:
    """Bytes of the recurrent state of the decoder layers in ``x`` for ``x.b`` sequences: constant in n (the
    convolution window in ``element_bytes``, the SSM state in :func:`ssm_state_bytes`)."""
    total: Num = 0
    for _, block, layers in x.decoder_blocks():
        m = block.mixer
        if m is not None:
            per_layer = m.conv_state_values * element_bytes + m.ssm_state_values * ssm_state_bytes(
                m, element_bytes
            )
            total = total + layers * per_layer
    return x.b * total


def decode_step_terms(config: ResolvedShape, x: Dims) -> dict[str, int]:
    """Decode-step FLOPs of the decoder's recurrent mixers by breakdown key (one token per sequence)."""
    out: dict[str, int] = {}
    for sd, block, layers in x.decoder_blocks():
        if block.mixer is None:
            continue
        for key, value in mixer_step_flops(block.mixer, x, layers, f"{sd.name}/mixer"):
            out[key] = out.get(key, 0) + int(value)
    return out


def chunk_score_values(m: Mixer, x: Dims, n: Num, one_block: bool = False) -> Num:
    """Values of one intra-chunk score tensor (C Bᵀ, or it masked by the decays) of ``x.b`` sequences: b L Q H (none
    for the short convolution); ``one_block``: lightning attention's block loop, which holds the c x c scores of one
    block at a time (b c² H, c = min(n, B))."""
    if m.short_conv:
        return 0
    if one_block and m.lightning:
        c = (n + m.chunk_size - abs(n - m.chunk_size)) // 2  # min(n, B), for ints and numpy arrays alike
        return x.b * c * c * m.num_heads
    return (x.b * padded_tokens(n, m.chunk_size)) * (m.chunk_size * m.num_heads)


def mixer_live_bytes(m: Mixer, x: Dims, n: Num, e: int) -> Num:
    """Activations of one Mamba-2 layer alive at once in a forward pass without autograd (an estimate): in_proj's
    output, the convolution's output, the scan's output and its two intra-chunk score tensors (lightning: those of
    one block)."""
    t = x.b * n
    return t * (e * (m.in_width + m.conv_dim + m.inner)) + chunk_score_values(m, x, n, one_block=True) * (
        2 * e
    )


def mixer_saved_bytes(m: Mixer, x: Dims, n: Num, e: int) -> Num:
    """Activations one Mamba-2 layer keeps for the backward pass (an estimate): its input, in_proj's output, the
    convolution's output, the two score tensors, the gated norm's two inputs and out_proj's input."""
    t = x.b * n
    return t * (e * (x.d + m.in_width + m.conv_dim + 3 * m.inner)) + chunk_score_values(m, x, n) * (2 * e)
