"""The training schedule of one optimizer step on one device (issue 20), for the lower bound and the expected time.

Conventions, stated because peers differ:

- **Global batch** (``--global-batch``): sequences per optimizer step over all data-parallel replicas;
  ``--batch-size`` is the micro-batch per replica, so each replica runs global / (micro-batch × dp) micro-batches
  per step, the **accumulation steps** (which must be a whole number: the flag is refused otherwise). Memory is
  the micro-batch's. Without it a step is one micro-batch per replica (``pp`` of them with pipelining: a 1F1B
  schedule needs at least ``pp``, Narayanan et al. 2021 §2.2).
- **Passes**: a micro-batch's forward, then its backward at twice the forward's FLOPs and bytes (Kaplan et al.
  2020 §2.1) reaching ``backward_fraction`` of the forward's achieved rate; ``--recompute full`` runs every
  component's forward a second time before its backward, ``selective`` only the attention cores' (Korthikanti et
  al. 2022 §5: the softmax and score work that selective recomputation recomputes). The lower bound counts the
  same passes at peak.
- **Pipeline** (1F1B, Narayanan et al. 2021 §2.2): a step takes (m + p − 1) micro-batch times of one stage: the
  bubble is (p − 1) of them, a share (p − 1) / (m + p − 1) of the pipeline time; each micro-batch sends its
  activations forward and their gradient back across a stage boundary on the critical path. The interleaved
  schedule (``--pp-virtual v``, §2.2.2: each rank holds v chunks of L / (p · v) layers) shrinks the bubble to
  (p − 1) / v micro-batch times, Megatron's bubble time fraction (p − 1) / (v · m) of the ideal step, at the cost
  of v times the sends (a micro-batch crosses a boundary at each of a rank's v chunks, forward and back); it needs
  m a multiple of p (Megatron-LM asserts it).
- **Communication**: TP all-reduces and EP all-to-alls per micro-batch on the critical path (the recomputed
  forward repeats the forward ones). DP / ZeRO (:mod:`embedcalc.analysis.comm.volumes`'s bytes): with a pipeline
  the gradients are reduced after the pipeline flush (Megatron-LM: no overlap, all exposed); without one, DDP's
  bucketed all-reduce and ZeRO-1/2's reduce-scatter overlap with the last micro-batch's backward (only the excess
  is exposed; Li et al. 2020, PyTorch DDP §3.2.3), ZeRO-1/2's all-gather of the updated weights follows the
  optimizer (exposed), and FSDP / ZeRO-3 gathers and reduce-scatters every micro-batch, prefetched behind that
  micro-batch's compute (the excess exposed).
- **Context parallelism** (``--cp``): a rank runs its seq_len / cp tokens (the attention cores 1 / cp of the whole
  sequence's work); the ring's key/value sends (:mod:`embedcalc.analysis.comm.volumes`) overlap with the attention
  cores (TransformerEngine's ``AttnFuncWithCPAndKVP2P`` sends the next chunk while attending to the current one),
  only their excess exposed; the gradients are reduced over dp × cp ranks like the DP ones.
- **Optimizer step**: memory-bound, reading and writing the weights, gradients and optimizer state the device
  holds once per step.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from embedcalc.analysis.comm.volumes import Collective, communication
from embedcalc.analysis.roofline import ComponentTime, Phase, Schedule
from embedcalc.analysis.roofline.traffic import Traffic, Weights
from embedcalc.analysis.time.expected import ExpectedModel
from embedcalc.analysis.time.model import elementwise_bytes, kernels_per_forward, moe_dispatch_elements
from embedcalc.analysis.workload import Workload, context_local
from embedcalc.config.resolved import ResolvedShape
from embedcalc.errors import EmbedcalcError, ExitCode, Problem

_CORE = ("scores", "context")


def accumulation_steps(w: Workload, global_batch: int | None) -> int:
    """Micro-batches per replica per optimizer step (module docstring); a global batch that is not a whole number
    of micro-batches × dp replicas is a bad flag value (exit 2)."""
    micro, dp, pp = w.batch_size, w.parallel.dp, w.parallel.pp
    if global_batch is None:
        return pp
    per_round = micro * dp
    group = per_round * pp  # the interleaved schedule's micro-batches come in groups of pp
    if w.parallel.pp_virtual > 1 and global_batch % group:
        lo = max(group, global_batch - global_batch % group)
        message = (
            f"--global-batch {global_batch} with --pp-virtual: the interleaved schedule runs micro-batches in "
            f"groups of --pp {pp}, so it must be a multiple of --batch-size {micro} × --dp {dp} × --pp {pp} = "
            f"{group}; use --global-batch {lo} or {lo + group}"
        )
        raise EmbedcalcError(message, ExitCode.USAGE, [Problem("--global-batch", message, "global_batch")],
                             "global_batch")  # fmt: skip
    if global_batch % per_round:
        lo = max(per_round, global_batch - global_batch % per_round)
        message = (
            f"--global-batch {global_batch} must be a multiple of --batch-size {micro} × --dp {dp} = {per_round} "
            f"(each replica runs whole micro-batches); use --global-batch {lo} or {lo + per_round}"
        )
        raise EmbedcalcError(message, ExitCode.USAGE, [Problem("--global-batch", message, "global_batch")],
                             "global_batch")  # fmt: skip
    return global_batch // per_round


def bubble_fraction(pp: int, micro_batches: int, virtual: int = 1) -> float:
    """The pipeline bubble's share of the pipeline time: (p − 1) / (m + p − 1) for 1F1B (Narayanan et al. 2021,
    §2.2); ((p − 1) / v) / (m + (p − 1) / v) interleaved over v chunks per rank (§2.2.2)."""
    bubble = (pp - 1) / virtual
    return bubble / (micro_batches + bubble)


def recompute_passes(w: Workload, key: str) -> int:
    """Extra forward passes of component ``key`` in a step: 1 with full recomputation, 1 for the attention cores
    with selective recomputation, else 0 (module docstring)."""
    if w.recompute == "full":
        return 1
    if w.recompute == "selective" and key.rsplit("/", 1)[-1] in _CORE:
        return 1
    return 0


def training_step(
    config: ResolvedShape, w: Workload, peak: tuple[Callable[[str], float], float], traffic: Mapping[str, Traffic],
    weights: Weights, m: int, optimizer_bytes: int, model: ExpectedModel | None,
) -> tuple[Phase, Schedule]:  # fmt: skip
    """One optimizer step of ``m`` micro-batches on one device: its components (every pass of every micro-batch
    and the optimizer), and with ``model`` the expected terms (module docstring). ``peak`` is (the FLOP/s of a
    component by key, B/s)."""
    flops_per_s, bytes_per_s = peak
    local = context_local(w)  # one context-parallel rank's tokens (w itself without --cp)
    fractions = (
        model.fractions(config, local, weights, False) if model is not None else (lambda key: (1.0, 1.0))
    )
    calibrated = model is not None and model.override is None  # --efficiency replaces every achieved fraction
    backward = 2 / model.constants.backward_fraction if model is not None and calibrated else 2.0
    components, forward_mb = [], 0.0
    for key, t in traffic.items():
        fc, fm = fractions(key)
        compute, memory = t.flops / (flops_per_s(key) * fc), t.bytes / (bytes_per_s * fm)
        passes = 1 + recompute_passes(w, key) + backward
        forward_mb += max(compute, memory)
        scaled = t.scaled((3 + recompute_passes(w, key)) * m)
        components.append(ComponentTime(key, scaled, m * passes * compute, m * passes * memory))
    memory_fraction = model.memory_fraction if model is not None else 1.0
    optimizer = Traffic(weight_bytes=2 * optimizer_bytes)
    components.append(
        ComponentTime("optimizer", optimizer, 0.0, optimizer.bytes / (bytes_per_s * memory_fraction))
    )
    pp = w.parallel.pp
    v = w.parallel.pp_virtual
    schedule = Schedule(m, m * w.batch_size * w.parallel.dp, bubble_fraction(pp, m, v))
    if model is None:
        return Phase("training_step", tuple(components)), schedule
    compute_mb = sum(c.time_s for c in components[:-1]) / m
    cores_mb = sum(c.time_s for c in components[:-1] if c.key.rsplit("/", 1)[-1] in _CORE) / m
    extra = _micro_batch_terms(config, w, model, cores_mb)
    per_mb = compute_mb + sum(v for _, v in extra)
    terms = [(name, m * value) for name, value in extra]
    terms.append(("pipeline bubble", (pp - 1) / v * per_mb))
    terms.append(("data-parallel communication (exposed)", _dp_exposed(config, w, model, m, compute_mb,
                                                                       forward_mb * backward)))  # fmt: skip
    return Phase("training_step", tuple(components), tuple(terms)), schedule


def _micro_batch_terms(
    config: ResolvedShape, w: Workload, model: ExpectedModel, cores_s: float = 0.0
) -> list[tuple[str, float]]:
    """Per micro-batch on one device: element-wise traffic and kernel overhead of every pass, TP/EP collectives
    (the recomputed forward repeats the forward ones), the stage boundary sends, and with context parallelism the
    ring's key/value sends beyond the attention cores' ``cores_s`` they overlap with (TransformerEngine sends the
    next chunk while the current one is attended to)."""
    par = w.parallel
    local = context_local(w)
    full = 1 if w.recompute == "full" else 0
    passes = 1 + full + 2  # forward, recomputed forward, backward (about twice a forward's kernels and bytes)
    tokens = local.batch_size * local.seq_len
    elementwise = elementwise_bytes(config, local, tokens, par.tp) / par.pp
    dispatch = moe_dispatch_elements(config, tokens) / par.pp
    kernels = kernels_per_forward(config, local, False, 1 / par.pp)
    collectives = communication(config, w).collectives
    critical = [c for c in collectives if c.group in ("tp", "ep")]
    again = [c for c in critical if c.phase == "forward"] * full
    ring = [c for c in collectives if c.group == "cp"]
    ring += [c for c in ring if c.phase == "forward"] * full
    sends: list[Collective] = []
    if par.pp > 1:
        payload = local.batch_size * local.seq_len * config.embed_dim * local.activation_bytes
        v = par.pp_virtual  # a boundary at each of the rank's chunks
        sends = [
            Collective("send", "pp", par.pp, "activations forward, gradients back", 2 * v, 2 * v * payload)
        ]
    return [
        ("element-wise traffic", passes * model.stream_s(elementwise)),
        *([("MoE token dispatch", passes * model.dispatch_s(dispatch))] if dispatch else []),
        ("kernel overhead", passes * model.kernels_s(kernels)),
        ("tensor/expert-parallel communication", model.comm_s(critical + again, w)),
        ("pipeline sends", model.comm_s(sends, w)),
        *([("context-parallel ring (exposed)", max(0.0, model.comm_s(ring, w) - cores_s))] if ring else []),
    ]


def _dp_exposed(config: ResolvedShape, w: Workload, model: ExpectedModel, m: int, compute_mb: float,
                backward_mb: float) -> float:  # fmt: skip
    """Seconds of the step's data-parallel / ZeRO collectives not hidden behind compute (module docstring)."""
    par = w.parallel
    dp = [c for c in communication(config, w).collectives if c.group == "dp"]
    if not dp:
        return 0.0
    if par.zero == 3:
        per_mb = model.comm_s(dp, w)
        return m * per_mb if par.pp > 1 else m * max(0.0, per_mb - compute_mb)
    if par.pp > 1:
        return model.comm_s(dp, w)
    overlapped = model.comm_s([c for c in dp if c.kind in ("all-reduce", "reduce-scatter")], w)
    after = model.comm_s([c for c in dp if c.kind == "all-gather"], w)
    return max(0.0, overlapped - backward_mb) + after
