"""The expected-time model (DESIGN.md §14, issue 20): how far real kernels fall short of the roofline, term by term.

The roofline (:mod:`embedcalc.analysis.roofline`) is the lower bound: every component at the device's peak. The
expected time is what a well-tuned run of today's common software reaches; it keeps the roofline's FLOPs and
bytes (the same traffic, from the same layer model) and adds, each in its own function below:

- **achieved fraction of peak by kind of work and shape** (:func:`component_fractions`): a GEMM through ``r`` rows
  (tokens per layer through the matmul; decode: the batch; a routed expert: the tokens it receives) reaches
  ``gemm_fraction × r / (r + gemm_half_rows)`` of the dense peak: small matrices fill fewer tiles and fewer waves
  of the device's multiprocessors, so they reach less of it (NVIDIA, "Matrix Multiplication Background User's
  Guide", Deep Learning Performance docs, §§ tile and wave quantization, measured GEMM throughput rising with
  each dimension until it saturates). A GEMM through at most ``gemv_max_rows`` rows (batch-1 to batch-4 decode)
  is not a tiled GEMM: engines run a GEMV kernel there (TensorRT-LLM's weight-only plugin takes its CUDA GEMV
  for m < 5, ``SMALL_M_FAST_PATH``; cuBLAS's gemv), which has no tile to fill and is bound by the bytes it reads:
  its FLOPs run at ``gemm_fraction``, so halving the weight bytes (int8 -> int4) halves its time. Where the
  device's GEMV rate was measured (``gemv_bytes_per_s``: ``bench --peak`` on ``local``, through 1 to
  ``gemv_max_rows`` rows), a GEMV reads its bytes at the rate of its rows instead of ``memory_fraction`` of the
  bandwidth (never faster than the bandwidth): on a CPU a multi-threaded batch-1 matmul may reach a fraction of
  what STREAM does, and a few rows may run another kernel than one (docs/concepts/time.md). The fused
  attention cores reach ``attention_fraction`` (FlashAttention-2, Dao 2023, §4.1: 50-73% of the A100's peak in
  the forward); a decode step's cores read the KV cache at the
  memory fraction; every stream of bytes (weights, KV cache, element-wise traffic) moves at ``memory_fraction``
  of the bandwidth. A backward pass reaches ``backward_fraction`` of its forward's achieved rate.
- **dequantization** (:func:`dequant_elements`): a weight-only format (int8, int4, and FP4 weights on a device
  without FP4) is unpacked, converted and scaled in the matmul kernel before it multiplies, about
  ``dequant_ops_per_weight`` operations per weight element read at the device's fp32 (CUDA-core) peak, a cost of
  its own beside the bytes (gpt-fast's A100 table: int8 and int4 decode reach 1,069 and 863 GB/s against bf16's
  1,397: the fewer bytes are not read as fast).
- **element-wise traffic** (:func:`elementwise_bytes`): the norms, activation, residual adds and rotary embedding
  each read and write their b × n × width tensors (the roofline assumes them fused away; common kernels are not).
- **MoE token dispatch** (:func:`moe_dispatch_elements`): a routed-expert layer permutes each token to its
  experts' order, runs the grouped GEMMs on the gathered copies and combines the per-expert outputs back; that
  traffic is per (token, chosen expert, hidden element), ``moe_dispatch_bytes`` of it, and it does not shrink with
  tensor parallelism (every TP rank holds a slice of every expert, so it gathers and combines every pair) while
  the GEMMs' FLOPs do: TensorRT-LLM's measured MoE layers reach less of the peak the thinner each rank's expert
  slice (Qwen3-235B's experts on 8 H200s, fp8, 8,192 tokens: 262 TFLOPS per GPU at TP 8, 1,012 at TP 1).
- **per-kernel overhead** (:func:`kernels_per_token_step`): ``kernel_overhead_s`` × the kernels a forward
  launches (per layer from the layer model, plus embedding, final norm and head); it is what makes small models
  and batch-1 decode slower than their bytes (launch, prologue and tail of each kernel; CUDA graphs shrink, not
  remove it).
- **communication** on the critical path: :mod:`embedcalc.analysis.time.comm`.
- **the training schedule**: :mod:`embedcalc.analysis.time.schedule`.

The constants are data (:mod:`embedcalc.devices.calibration`), fitted on published runs; ``--efficiency`` replaces
the achieved fractions with given numbers and keeps the other terms.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from embedcalc.analysis.roofline.traffic import Traffic, Weights, experts_reached
from embedcalc.analysis.structure import stacks
from embedcalc.analysis.workload import Workload
from embedcalc.config.layer_plan import Block
from embedcalc.config.resolved import ResolvedShape
from embedcalc.devices.calibration import TimeConstants

Fractions = Callable[[str], tuple[float, float]]  # component key -> (compute fraction, memory fraction)


@dataclass(frozen=True)
class Override:
    """``--efficiency``: the achieved fractions of peak given by the user, for every kind of work."""

    compute: float
    memory: float


def parse_efficiency(text: str, check: Callable[[object], str | None]) -> Override:
    """``--efficiency``: one fraction for both roofs (``0.6``) or one per roof (``compute=0.55,memory=0.8``, a
    missing roof 1); ``check`` gives why a value is not a fraction. ValueError with the reason otherwise."""
    values: dict[str, float] = {}
    if "=" not in text:
        parts = [("compute", text), ("memory", text)]
    else:
        parts = [tuple(p.split("=", 1)) for p in text.split(",")]  # type: ignore[misc]
    for part in parts:
        if len(part) != 2 or part[0].strip() not in ("compute", "memory"):
            raise ValueError(f"{text!r}: give one fraction (0.6) or compute=F,memory=F")
        name, raw = part[0].strip(), part[1].strip()
        try:
            number: object = float(raw)
        except ValueError:
            number = raw
        if (why := check(number)) is not None:
            raise ValueError(f"{raw if '=' not in text else f'{name}={raw}'}: {why}")
        values[name] = float(raw)
    return Override(values.get("compute", 1.0), values.get("memory", 1.0))


def gemm_fraction(rows: float, c: TimeConstants) -> float:
    """Fraction of the dense peak a GEMM through ``rows`` rows reaches (module docstring): saturating in the rows;
    at most ``gemv_max_rows`` rows it is a GEMV, bound by the bytes it reads (no tiles to fill)."""
    rows = max(rows, 1.0)
    if rows <= c.gemv_max_rows:
        return c.gemm_fraction
    return c.gemm_fraction * rows / (rows + c.gemm_half_rows)


def component_rows(config: ResolvedShape, w: Workload, key: str, weights: Weights, decode: bool) -> float:
    """Rows of the GEMM of component ``key``: the tokens per layer through it (a routed expert: the tokens each
    reached expert receives, T·k / experts reached)."""
    last = stacks(config)[-1].name
    stack = key.split("/")[0] if key.split("/")[0] in ("encoder", "decoder") else last
    if decode:
        tokens = w.batch_size
    elif stack == "decoder" and config.architecture == "encoder-decoder":
        tokens = w.batch_size * w.decoder_len
    else:
        tokens = w.batch_size * w.seq_len
    if key in weights.experts:
        experts, top_k = weights.experts[key]
        return tokens * top_k / experts_reached(experts, top_k, tokens)
    return float(tokens)


def component_fractions(
    config: ResolvedShape,
    w: Workload,
    weights: Weights,
    decode: bool,
    c: TimeConstants,
    override: Override | None,
    gemv_memory: Callable[[float], float] | None = None,
) -> Fractions:
    """The (compute, memory) fractions of peak each component of a phase reaches (module docstring);
    ``gemv_memory``: rows -> the fraction of the bandwidth a GEMV through that many rows reads its bytes at on this
    device, measured (local's GEMV rate), in place of ``memory_fraction`` for a GEMM through at most
    ``gemv_max_rows`` rows."""

    def fractions(key: str) -> tuple[float, float]:
        if override is not None:
            return override.compute, override.memory
        if key.rsplit("/", 1)[-1] in ("scores", "context", "index_scores"):  # attention-shaped cores
            return c.attention_fraction, c.memory_fraction
        rows = component_rows(config, w, key, weights, decode)
        if gemv_memory is not None and max(rows, 1.0) <= c.gemv_max_rows:
            return gemm_fraction(rows, c), gemv_memory(rows)
        return gemm_fraction(rows, c), c.memory_fraction

    return fractions


def dequant_elements(traffic: Mapping[str, Traffic], weights: Weights, low: Callable[[str], bool]) -> float:
    """Weight elements a phase reads in a weight-only format (module docstring): each component ``low`` says is
    quantized, its weight bytes at the stored bytes per element of its key."""
    total = 0.0
    for key, t in traffic.items():
        stored = weights.stored.get(key, 0)
        if t.weight_bytes and stored and low(key):
            total += t.weight_bytes * weights.numel[key] / stored
    return total


# --- element-wise traffic and kernels ----------------------------------------------------------------------------


def _norms_per_layer(config: ResolvedShape) -> int:
    """Norm kernels per layer: 2 (pre or post), 4 (Gemma's sandwich), 1 or 2 (a parallel block's shared norms)."""
    placement = config.resolved_norm_placement
    if placement == "sandwich":
        return 4
    if placement == "parallel":
        return int(getattr(config, "parallel_norms", 1))
    return 2


def _block_widths(block: Block) -> tuple[int, int]:
    """(FFN inner width per token the activation runs on, Q + K width the rotary embedding rotates); 0 for a block
    without an FFN or without attention."""
    ffn, a = block.ffn, block.attention
    inner = 0 if ffn is None else ffn.top_k * ffn.expert_dim + ffn.shared_dim if ffn.moe else ffn.ffn_dim
    rotated = 0 if a is None else a.num_heads * (a.qk_rope_head_dim or a.head_dim) + (
        a.qk_rope_head_dim if a.latent else a.kv_dim
    )  # fmt: skip
    return inner, rotated


def elementwise_bytes(config: ResolvedShape, w: Workload, tokens: int, tp: int = 1) -> int:
    """Bytes the element-wise kernels of one forward move on one TP rank for ``tokens`` tokens per stack (all
    sequences): each norm reads and writes b·n·d, each residual add reads two and writes one (both replicated on
    every rank), the activation reads its inner tensor (two for a gated one) and writes one, the rotary embedding
    reads and writes Q and K (both split over the ``tp`` ranks; module docstring)."""
    e, d = w.activation_bytes, config.embed_dim
    rope = config.position == "rope"
    total = 0
    for stack in stacks(config):
        for block, layers in config.stack_plan(stack.name).counts():
            inner, rotated = _block_widths(block)
            gated = block.ffn is not None and block.ffn.gated
            per_token = _norms_per_layer(config) * 2 * d + 2 * 3 * d
            per_token += ((3 if gated else 2) * inner + (2 * rotated if rope else 0)) // tp
            if stack.cross_attention:
                per_token += 2 * d + 3 * d  # its norm and residual add
            total += layers * tokens * per_token * e
    return total


def moe_dispatch_elements(config: ResolvedShape, tokens: int) -> int:
    """(token, chosen expert, hidden element) triples of one forward's routed-expert layers for ``tokens`` tokens
    per stack, on one tensor-parallel rank: all of them (module docstring); an expert-parallel rank's are its own
    tokens' (balanced routing: the pairs it receives are as many as it sends). A pair is the experts' input width
    wide: the hidden size, or Nemotron-3's latent (the experts run between its latent projections)."""
    total = 0
    for stack in stacks(config):
        for block, layers in config.stack_plan(stack.name).counts():
            ffn = block.ffn
            if ffn is not None and ffn.moe:
                total += layers * tokens * ffn.top_k * (ffn.latent_dim or config.embed_dim)
    return total


def kernels_per_layer(config: ResolvedShape, block: Block, cross: bool, attention: str) -> int:
    """Kernels one layer launches in a forward, as the common fused stacks run it (gpt-fast, vLLM, TensorRT-LLM:
    fused QKV and gate/up projections, one fused attention kernel): norms and residual adds, the projections, the
    rotary embedding, the attention core (eager: two batched matmuls and a softmax), the FFN matmuls and their
    activation; MoE: router, top-k, the token permutation and its inverse, the grouped experts, the shared experts;
    a recurrent mixer (Mamba-2): its input projection, causal convolution, chunked scan, gated norm and output."""
    a, ffn = block.attention, block.ffn
    norms = _norms_per_layer(config)
    core = 3 if attention == "eager" else 1
    rope = 1 if config.position == "rope" else 0
    if a is not None:
        # MLA: q_a (+ its norm), q_b (or one q), kv_a (+ its norm), kv_b, rope, core, out; else qkv, rope, core, out
        mixer = (3 if a.q_lora_rank else 1) + 3 + rope + core + 1 if a.latent else 1 + rope + core + 1
        # a sparse layer's lightning indexer: index_q, index_k, its norm, index_weights, rope, scores, top-k
        mixer += 7 if a.indexer else 0
        # a recurrent mixer beside it (Falcon-H1): its five kernels and the add of the two outputs
        mixer += 6 if block.mixer is not None else 0
    else:
        mixer = 5 if block.mixer is not None and block.mixer.kind != "none" else 0
    dense_ffn = 3  # in (gate and up fused), activation, out
    # router, top-k, permutes, experts
    moe = 2 + 2 + 3 + (dense_ffn if ffn is not None and ffn.shared_dim else 0)
    feed = 0 if ffn is None else moe if ffn.moe else dense_ffn
    kernels = norms + 2 + mixer + feed + len(block.projections)  # a projection: one GEMM
    if cross:
        kernels += 1 + 1 + 3 + core  # norm, residual add, q / kv / out projections, core
    return kernels


@dataclass(frozen=True)
class Launches:
    """Kernels a run launches as it was counted, not as a fused stack runs it: the eager model ``bench`` runs on
    ``local`` (:mod:`embedcalc.modeling.launches`), per forward over the prompt and per decode step."""

    prefill: int
    decode: int


def kernels_per_forward(config: ResolvedShape, w: Workload, decode: bool, layer_share: float = 1.0) -> float:
    """Kernels of one forward (decode: one step, the encoder idle) on one device holding ``layer_share`` of the
    layers (1 / pp in training): every layer's, plus embedding lookup, final norm, LM head and (decode) sampling."""
    total = 0
    for stack in stacks(config):
        if decode and stack.name == "encoder":
            continue
        for block, layers in config.stack_plan(stack.name).counts():
            total += layers * kernels_per_layer(config, block, stack.cross_attention, w.attention)
        total += 2  # embedding lookup (+ positions) and final norm
    head = 1 + (2 if decode else 0) if config.resolved_lm_head else 0
    return total * layer_share + head
