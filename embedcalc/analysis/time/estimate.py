"""Time per phase, twice: the roofline at the device's peak (the lower bound) and the expected time (the
roofline's traffic at the achieved fractions of peak, plus the terms of :mod:`embedcalc.analysis.time.model`),
for prefill and decode (exact over the generated tokens), a forward, or a training step and a whole training run.
The roofline's conventions are stated in :mod:`embedcalc.analysis.roofline`, the expected model's in
:mod:`embedcalc.analysis.time.model` and the training schedule's in :mod:`embedcalc.analysis.time.schedule`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

from embedcalc.analysis.memo import Memo
from embedcalc.analysis.memory import low_precision
from embedcalc.analysis.memory.capacity_search import kv_element_bytes
from embedcalc.analysis.roofline.estimate import (
    ComponentTime,
    Efficiency,
    Phase,
    RooflineEstimate,
    TimeModel,
    TrainingRun,
)  # fmt: skip
from embedcalc.analysis.roofline.lengths import Lengths, decode_lengths, prefill_lengths, prompt_len
from embedcalc.analysis.roofline.traffic import (
    Traffic,
    Weights,
    decode_step_flops,
    matmul_flops,
    per_device,
    phase_traffic,
    prefill_flops,
    weights_of,
)  # fmt: skip
from embedcalc.analysis.time.capability import device_roofline, kv_refusal
from embedcalc.analysis.time.expected import (
    ExpectedModel,
    device_constants,
    inference_terms,
    inference_volumes,
)
from embedcalc.analysis.time.model import Launches, Override, dequant_elements
from embedcalc.analysis.time.schedule import accumulation_steps, training_step
from embedcalc.analysis.workload import Workload, context_local
from embedcalc.config.dtypes import FP4_DTYPES, WEIGHT_ONLY_DTYPES
from embedcalc.config.limits import count_problem, efficiency_problem, price_problem
from embedcalc.config.resolved import ResolvedShape
from embedcalc.devices.calibration import Calibration, load_calibration
from embedcalc.devices.catalogue import Device
from embedcalc.errors import EmbedcalcError, ExitCode, Problem, WorkloadError

# --- the estimate -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TimeRequest:
    """What the user asked of the time model (the CLI's --hardware, --efficiency, --kv-dtype, --train-* flags)."""

    device: Device | None = None
    efficiency: Efficiency | None = None  # --efficiency: replaces the calibration's achieved fractions
    kv_dtype: str | None = None  # None: the activation dtype
    train_tokens: int | None = None
    devices: int | None = None
    price_per_hour: float | None = None
    memory_limit_bytes: int | None = None  # --max-memory (the device's memory otherwise)
    global_batch: int | None = None  # --global-batch: sequences per optimizer step over all replicas
    calibration: Calibration = field(default_factory=load_calibration)
    launches: Launches | None = None  # kernels as the run launches them (local: the eager model); None: fused

    def __post_init__(self) -> None:
        """Refuse inputs that would make a time or cost non-finite (the CLI's options check the same rules)."""
        eff = self.efficiency
        checks = [
            ("efficiency.compute (--efficiency)", eff.compute if eff else None, efficiency_problem),
            ("efficiency.memory (--efficiency)", eff.memory if eff else None, efficiency_problem),
            ("train_tokens (--train-tokens)", self.train_tokens, count_problem),
            ("devices (--devices)", self.devices, count_problem),
            ("price_per_hour (--price-per-hour)", self.price_per_hour, price_problem),
        ]
        for name, value, rule in checks:
            if value is not None and (why := rule(value)) is not None:
                shown = repr(value) if len(repr(value)) <= 40 else f"a {len(repr(value)):,}-character value"
                message = f"{name}: {shown} is {why}"
                raise WorkloadError(message, [Problem(name.split(" ")[0], message, "time_input_invalid")],
                                    "time_input_invalid")  # fmt: skip


def _traffic(config: ResolvedShape, w: Workload, flops: Mapping[str, int], lengths: Lengths, decode: bool,
             kv_bytes: int | Fraction, weights: Weights, divisor: int) -> dict[str, Traffic]:  # fmt: skip
    raw = phase_traffic(config, w, flops, lengths, decode, kv_bytes, weights)
    return per_device(config, w, raw, weights, divisor)


def _decode_total(step: Any, first: int, last: int, kinks: list[int]) -> float:
    """Σ over KV lengths first..last of the decode step time, exact for per-component times that are the max of
    two affine functions of the length between kinks (every layer's window or chunk caps its cache there)."""
    segments, lo = [], first
    for kink in sorted(k for k in set(kinks) if first <= k < last):
        segments.append((lo, kink))
        lo = kink + 1
    segments.append((lo, last))
    total = 0.0
    for lo, hi in segments:
        a, z = step(lo), step(hi)
        for key, ca in a.items():
            cz = z.get(key, ca)
            total += _sum_max_affine(hi - lo, (ca.compute_s, cz.compute_s), (ca.memory_s, cz.memory_s))
    return total


def _sum_max_affine(span: int, f: tuple[float, float], g: tuple[float, float]) -> float:
    """Σ_{x=0..span} max(f(x), g(x)) for f, g affine with the given values at x = 0 and x = span."""

    def line_sum(v: tuple[float, float], lo: int, hi: int) -> float:  # Σ_{x=lo..hi} of the line through v
        if hi < lo:
            return 0.0
        at = (lambda x: v[0]) if span == 0 else (lambda x: v[0] + (v[1] - v[0]) * x / span)
        return (hi - lo + 1) * (at(lo) + at(hi)) / 2

    d0, d1 = f[0] - g[0], f[1] - g[1]
    if d0 >= 0 and d1 >= 0:
        return line_sum(f, 0, span)
    if d0 <= 0 and d1 <= 0:
        return line_sum(g, 0, span)
    cross = math.floor(span * d0 / (d0 - d1))  # last integer x on the side of x = 0
    first, second = (f, g) if d0 > 0 else (g, f)
    return line_sum(first, 0, cross) + line_sum(second, cross + 1, span)


def estimate_time(
    config: ResolvedShape, w: Workload, request: TimeRequest, optimizer_bytes: int = 0, *, lower_bound: bool = True,
    memo: Memo | None = None,
) -> RooflineEstimate:  # fmt: skip
    """The expected times of ``config`` on ``w`` for ``request.device``, with the roofline at peak beside them
    (``lower_bound``; ``lower_bound=False`` leaves it None for a caller that reads only the expected times, as
    ``plan``'s search does: half the work); ``optimizer_bytes`` is the per-device weights + gradients + optimizer
    state a training step reads and writes once. ``memo``: the device-independent traffic kept between calls
    (:mod:`embedcalc.analysis.memo`; the same numbers)."""
    device = request.device
    refused = kv_refusal(config, device, request.kv_dtype)
    if refused is not None:
        raise refused
    if device is None:
        return RooflineEstimate(
            None, None, request.kv_dtype, None, None, Efficiency(), batch_size=w.batch_size
        )
    if request.global_batch is not None and w.mode != "training":
        message = (
            "--global-batch applies to --mode training (sequences per optimizer step); drop it or add --mode "
            "training"
        )
        problem = Problem("--global-batch", message, "global_batch_inference")
        raise EmbedcalcError(message, ExitCode.USAGE, [problem], "global_batch_inference")
    cal = request.calibration
    eff = request.efficiency
    override = None if eff is None else Override(eff.compute, eff.memory)
    bound = _estimate(config, w, request, optimizer_bytes, None, memo) if lower_bound else None
    model_on = ExpectedModel(device_constants(cal.constants, device, w.mode == "inference"), device, override)
    expected = _estimate(config, w, request, optimizer_bytes, model_on, memo)
    model = TimeModel(cal.name, cal.fitted_on, cal.held_out, cal.held_out_median_error, cal.held_out_max_ratio,
                      None if eff is None else eff.source)  # fmt: skip
    label = Efficiency(1.0, 1.0, f"calibration {cal.name}: achieved fractions by kind of work and shape")
    return replace(expected, lower_bound=bound, model=model, efficiency=eff or label)


def _estimate(config: ResolvedShape, w: Workload, request: TimeRequest, optimizer_bytes: int,
              model: ExpectedModel | None, memo: Memo | None) -> RooflineEstimate:  # fmt: skip
    """The roofline at peak (``model`` None) or the expected times (module docstring)."""
    device = request.device
    assert device is not None
    roof = device_roofline(device, w, Efficiency(), config.quantized)
    kv_bytes = kv_element_bytes(w, request.kv_dtype)

    def kept(key: tuple[Any, ...], compute: Callable[[], Any]) -> Any:  # device-independent: the memo's
        return compute() if memo is None else memo.get(config, (w, request.kv_dtype, *key), compute)

    weights: Weights = kept(("weights",), lambda: weights_of(config, w))
    par = w.parallel
    causal = w.attention == "sdpa"
    phases: dict[str, Phase] = {}
    base = RooflineEstimate(device.name, roof.peak_dtype, request.kv_dtype, roof.peak_flops_per_s,
                            roof.bandwidth_bytes_per_s, Efficiency(), batch_size=w.batch_size)  # fmt: skip
    prefill: dict[str, Traffic] = kept(("prefill",), lambda: _traffic(
        config, w, prefill_flops(config, w, causal), prefill_lengths(config, w), False, kv_bytes, weights,
        par.tp if w.mode == "inference" else par.tp * par.pp))  # fmt: skip
    if w.mode == "training":
        if par.cp > 1:
            prefill = _context_rank(config, w, prefill, kv_bytes, weights, causal)
        m = accumulation_steps(w, request.global_batch)
        step, schedule = training_step(config, w, (roof.peak, roof.bandwidth_bytes_per_s), prefill, weights, m,
                                       optimizer_bytes, model)  # fmt: skip
        phases["training_step"] = step
        run = _training_run(config, w, request, step, m)
        return replace(base, phases=phases, training=run, schedule=schedule)

    # dequantized before the multiply: int8/int4, and FP4 weights where the GEMMs run at bf16 (no FP4 tensor cores);
    # on FP4 tensor cores (NVFP4's W4A4, MXFP4's W4A8 at the FP8 peak) the MMA applies the block scales itself
    weight_only = w.dtype in WEIGHT_ONLY_DTYPES or (
        w.dtype in FP4_DTYPES and roof.peak_dtype not in ("fp4", "fp8")
    )

    def quantized(key: str) -> bool:
        return low_precision(key, key in weights.shape, config.quantized)

    def phase(name: str, traffic: Mapping[str, Traffic], decode: bool) -> Phase:
        if model is None:
            return roof.phase(name, traffic)
        launches = request.launches
        volumes = kept(("volumes", decode, launches), lambda: inference_volumes(config, w, decode, launches))
        terms = inference_terms(config, w, model, decode, launches, volumes)
        if weight_only:
            terms += (("dequantization", model.dequant_s(dequant_elements(traffic, weights, quantized))),)
        return roof.phase(name, traffic, model.fractions(config, w, weights, decode), terms)

    if config.architecture == "encoder":
        phases["forward"] = phase("forward", prefill, False)
        return replace(base, phases=phases)
    phases["prefill"] = phase("prefill", prefill, False)
    prompt = prompt_len(config, w)
    steps = max(w.gen_tokens, 1)
    steps_at: dict[int, Phase] = {}  # by KV length: the last is both the decode phase and a segment's end

    def step_at(n: int) -> Phase:
        if n not in steps_at:
            traffic = kept(("decode", n), lambda: _traffic(
                config, w, decode_step_flops(config, w, n), decode_lengths(config, w, n, kv_bytes), True, kv_bytes,
                weights, par.tp))  # fmt: skip
            steps_at[n] = phase("decode", traffic, True)
        return steps_at[n]

    phases["decode"] = step_at(prompt + steps)
    total = None
    if w.gen_tokens:
        attentions = [b.attention for b in config.named_blocks.values() if b.attention is not None]
        caps = [a.cache_limit for a in attentions] + [a.index_topk for a in attentions if a.kind == "sparse"]
        kinks = [c for c in caps if c is not None]  # where a step's cost stops growing: windows, sparse top-k
        per_step = sum(v for _, v in phases["decode"].extra)

        def components_at(n: int) -> dict[str, ComponentTime]:
            return {c.key: c for c in step_at(n).components}

        total = (
            _decode_total(components_at, prompt + 1, prompt + w.gen_tokens, kinks) + w.gen_tokens * per_step
        )
    return replace(
        base, phases=phases, decode_kv_len=prompt + steps, decode_steps=steps, decode_total_s=total
    )


# The fewest tokens per optimizer step of a published pre-training run: BERT-base's phase 1, 256 sequences of 128
# tokens (Devlin et al. 2019, appendix A.2); GPT-3 used 0.5M-3.2M (Brown et al. 2020, table 2.1), nanoGPT's GPT-2
# 0.49M, Llama 2 4M. A run planned far below it is usually a workload nobody chose (analyze's default 1 x 128).
SMALLEST_PUBLISHED_STEP_TOKENS = 256 * 128


def small_step_warning(run: TrainingRun) -> Problem | None:
    """A warning when a training run's tokens per step are below any published pre-training run's: its wall time
    is that of a step size nobody trains at, most often analyze's default batch 1 x seq_len 128."""
    if run.tokens_per_step >= SMALLEST_PUBLISHED_STEP_TOKENS:
        return None
    message = (
        f"{run.tokens_per_step:,} tokens per optimizer step is far below any published "
        f"pre-training run's (BERT-base's 256 x 128 = {SMALLEST_PUBLISHED_STEP_TOKENS:,} is the smallest; GPT-3's "
        "0.5M-3.2M); the run's time is that of this step size: give the run's own --seq-len and --global-batch "
        "(e.g. --seq-len 2048 --global-batch 512)"
    )
    return Problem("--global-batch", message, "small_training_step")


def _context_rank(config: ResolvedShape, w: Workload, full: Mapping[str, Traffic], kv_bytes: int | Fraction,
                  weights: Weights, causal: bool) -> dict[str, Traffic]:  # fmt: skip
    """One context-parallel rank's forward traffic (Parallelism's ``cp``): every component's at seq_len / cp tokens
    (:func:`context_local`), except the attention cores, whose queries meet every key of the causal sequence: 1 / cp
    of the full sequence's (the 2·cp-chunk layout balances them)."""
    local = context_local(w)
    par = w.parallel
    out = _traffic(config, local, matmul_flops(config, local, causal), prefill_lengths(config, local), False,
                   kv_bytes, weights, par.tp * par.pp)  # fmt: skip
    for key, t in full.items():
        if key.rsplit("/", 1)[-1] in ("scores", "context"):
            out[key] = t.divided(par.cp, 0)
    return out


def _training_run(
    config: ResolvedShape, w: Workload, request: TimeRequest, step: Phase, micro_batches: int
) -> TrainingRun | None:
    """Wall time, device-hours and cost of ``request.train_tokens`` tokens on ``request.devices`` devices, one step
    taking ``micro_batches`` micro-batches per replica."""
    if request.train_tokens is None:
        return None
    par = w.parallel
    devices = request.devices or par.devices
    replicas = max(
        1, devices // (par.tp * par.cp * par.pp)
    )  # each replica: one sequence's tp × cp × pp ranks
    tokens_per_step = micro_batches * w.batch_size * _tokens_per_sequence(config, w) * replicas
    wall = request.train_tokens / tokens_per_step * step.time_s
    return TrainingRun(request.train_tokens, devices, tokens_per_step, wall, wall * devices / 3600,
                       request.price_per_hour)  # fmt: skip


def _tokens_per_sequence(config: ResolvedShape, w: Workload) -> int:
    """Training tokens in one sequence: seq_len, plus the target's tgt_len for an encoder-decoder."""
    return w.seq_len + (prompt_len(config, w) if config.architecture == "encoder-decoder" else 0)
