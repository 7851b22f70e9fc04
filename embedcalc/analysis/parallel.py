"""Tensor, pipeline and data parallelism: validation, pipeline stage layout and per-device parameter shards.

Conventions (stated, since peers differ here):

- Tensor parallelism (Megatron-LM, Shoeybi et al. 2019, §3): Q/K/V and FFN-in are column-parallel, the attention
  output and FFN-out row-parallel (their biases replicated), the token embedding and LM head vocab-parallel;
  norms, position and segment tables, relative-position bias and pooler are replicated on every TP rank.
  ``--tp`` must divide num_heads and ffn_dim. When num_kv_heads < tp, each KV head is replicated over
  tp / num_kv_heads ranks (tp must then be a multiple of num_kv_heads), so every rank holds one KV head. The
  vocabulary is padded up to a multiple of tp (Megatron pads similarly) and the padded rows are counted.
- Pipeline parallelism (Narayanan et al. 2021): blocks are split into ``pp`` contiguous stages as evenly as
  possible (the first ``L mod pp`` stages get one more); the embeddings live on the first stage; final norms,
  pooler and LM head on the last; with a tied LM head the last stage holds its own copy of the token table
  (as Megatron does). The per-device peak is the heaviest stage.
- ZeRO (Rajbhandari et al. 2020): stage 1 divides optimizer state by dp, 2 also gradients, 3 also weights.
- Layers as data (DESIGN.md §9): multi-head latent attention's q_b, kv_b (and a full-rank q) are column-parallel, its
  out row-parallel, q_a, kv_a and their norms replicated (the compressed KV latent is the same on every rank); per-head
  q/k norms replicated, attention sinks split with the heads; full-width q/k norms (OLMo 2) replicated, each rank
  all-gathering q and k around them and keeping its own heads (vLLM's ``Olmo2Attention``; KV heads must then split
  evenly: num_kv_heads a multiple of ``--tp``). Mixture of experts: the router and the shared gate replicated, shared
  experts like a dense FFN, routed experts spread over ``--ep`` ranks (num_experts / ep each) and, inside each expert,
  split over ``--tp`` like a dense FFN (Megatron-core's default expert tensor parallelism). Sequence mixers (Mamba,
  DeltaNet, short convolutions) are replicated on every TP rank: their fused in-projections are not split. Stages split
  layer ranges of the stacks' layer plans (``StackPlan.counts``), so each stage holds the blocks of its own layers;
  with ``shared_layers`` every stage that runs a stack's layers holds the one shared block.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from math import gcd, prod

from embedcalc.analysis.params import param_tensors
from embedcalc.analysis.structure import Dims, Num, StackDims, maximum, stacks
from embedcalc.analysis.tensor import ParamTensor
from embedcalc.analysis.workload import Parallelism
from embedcalc.config.layer_plan import Block
from embedcalc.config.resolved import ResolvedShape
from embedcalc.errors import Problem


def _ffn_widths(config: ResolvedShape) -> list[tuple[str, int]]:
    """The FFN widths tensor parallelism splits, as (field name, value), over the blocks the stacks use."""
    out: list[tuple[str, int]] = []
    for stack in stacks(config):
        for block in config.stack_plan(stack.name).blocks:
            ffn = block.ffn
            if ffn is None:
                continue
            widths = [("expert_dim", ffn.expert_dim), ("shared experts' width", ffn.shared_dim)] if ffn.moe else [
                ("ffn_dim", ffn.ffn_dim)]  # fmt: skip
            out += [(name, value) for name, value in widths if value and (name, value) not in out]
    return out


def _full_qk_norm(config: ResolvedShape) -> bool:
    """Whether a block of the stacks normalises q and k over all heads (OLMo 2's qk_norm full)."""
    return any(b.attention is not None and b.attention.qk_norm == "full"
               for s in stacks(config) for b in config.stack_plan(s.name).blocks)  # fmt: skip


def _moe_problems(config: ResolvedShape, par: Parallelism) -> list[Problem]:
    if par.ep == 1:
        return []
    experts = sorted({b.ffn.num_experts for s in stacks(config) for b in config.stack_plan(s.name).blocks
                      if b.ffn is not None and b.ffn.moe})  # fmt: skip
    if not experts:
        return [Problem("--ep", f"--ep {par.ep} spreads the routed experts of mixture-of-experts layers over ranks, "
                        f"but {config.label} has none; use --ep 1", "ep_without_moe")]  # fmt: skip
    from embedcalc.config.divisors import divisors_text  # on a refusal only (start-up)

    errors = [
        Problem("--ep", f"--ep {par.ep} must divide num_experts ({e}) so each rank holds whole experts; "
                f"expert-parallel degrees that do: {divisors_text(e)}",
                "ep_experts")
        for e in experts if e % par.ep
    ]  # fmt: skip
    if par.dp % par.ep:
        errors.append(Problem("--ep", f"--ep {par.ep} takes its ranks from the data-parallel group, so --dp "
                              f"({par.dp}) must be a multiple of it; use --dp {par.ep * max(1, par.dp // par.ep)}",
                              "ep_dp"))  # fmt: skip
    return errors


def _cp_problems(config: ResolvedShape, par: Parallelism) -> list[Problem]:
    """Context parallelism (Parallelism's ``cp``) as modelled here: a decoder whose every layer is full causal
    self-attention (standard, GQA or MQA heads) passed around the ring; anything else is refused naming why."""
    if par.cp == 1:
        return []
    why = None
    if config.architecture != "decoder":
        why = f"{config.label} is an {config.architecture}: context parallelism splits a decoder's causal sequence"
    elif config.has_recurrent_state:
        why = f"{config.label} has recurrent mixers, whose scan runs over the whole sequence on one rank"
    else:
        for block in config.stack_plan("decoder").blocks:
            a = block.attention
            if a is None:
                continue
            if a.kind != "standard" or a.external or a.kv_shared or a.kv_external:
                why = (f"block {block.name!r} has {a.kind} attention; the ring exchange modelled here is of "
                       "standard attention's keys and values")  # fmt: skip
            elif a.window is not None or a.chunk is not None:
                why = f"block {block.name!r} attends within a window or chunk, which the ring layout does not balance"
            if why is not None:
                break
    if why is None:
        return []
    return [Problem("--cp", f"--cp {par.cp}: {why}; use --cp 1", "cp_model")]


def _kv_heads(config: ResolvedShape) -> list[int]:
    """The KV head counts of the stacks' standard attention layers (the flat one, and every block's own)."""
    counts = {b.attention.num_kv_heads for s in stacks(config) for b in config.stack_plan(s.name).blocks
              if b.attention is not None and b.attention.kind == "standard"}  # fmt: skip
    return sorted(counts) or [config.resolved_kv_heads]


def _kv_problems(config: ResolvedShape, tp: int, heads: int, kv: int) -> tuple[list[Problem], list[Problem]]:
    """(errors, notes) of splitting ``kv`` KV heads over ``tp`` ranks."""
    errors: list[Problem] = []
    notes: list[Problem] = []
    if kv % tp and tp % kv:
        errors.append(
            Problem(
                "--tp",
                f"--tp {tp} and num_kv_heads ({kv}): one must divide the other (KV heads "
                "are split over ranks, or replicated when there are fewer than ranks)",
                "tp_kv_heads",
            )
        )
    elif kv < tp and _full_qk_norm(config):
        from embedcalc.config.divisors import divisors_text  # on a refusal only

        fits = divisors_text(gcd(kv, heads))  # the degrees dividing both
        errors.append(
            Problem(
                "--tp",
                f"--tp {tp} with qk_norm full needs num_kv_heads ({kv}) to be a multiple of it: each rank's keys are "
                "all-gathered whole around the norm over all key heads, and KV heads replicated over ranks would "
                f"gather copies; use --tp {fits} or qk_norm head",
                "tp_full_qk_norm_kv_heads",
            )
        )
    elif kv < tp:
        notes.append(
            Problem(
                "--tp",
                f"num_kv_heads ({kv}) < --tp {tp}: each KV head is replicated on {tp // kv} ranks",
                "tp_kv_replicated",
            )
        )
    return errors, notes


def parallel_problems(config: ResolvedShape, par: Parallelism) -> tuple[list[Problem], list[Problem]]:
    """(errors, notes) of running ``config`` with ``par``; errors name the flag and the field."""
    errors: list[Problem] = []
    notes: list[Problem] = []
    tp, heads = par.tp, config.num_heads
    widths = _ffn_widths(config)
    if heads % tp:
        from embedcalc.config.divisors import divisors_text  # on a refusal only

        ok = divisors_text(gcd(heads, *(w for _, w in widths)))  # degrees dividing the heads and every width
        errors.append(
            Problem(
                "--tp",
                f"--tp {tp} must divide num_heads ({heads}) so each rank holds whole "
                f"heads; tensor-parallel degrees that divide num_heads and the FFN widths: {ok}",
                "tp_heads",
            )
        )
    else:
        for kv in _kv_heads(config):
            kv_errors, kv_notes = _kv_problems(config, tp, heads, kv)
            errors += kv_errors
            notes += kv_notes
    for name, f in widths:
        if f % tp:
            errors.append(
                Problem(
                    "--tp",
                    f"--tp {tp} must divide {name} ({f}); nearest {name} divisible by {tp}: "
                    f"{f - f % tp} or {f - f % tp + tp}",
                    "tp_ffn_dim",
                )
            )
    errors += _moe_problems(config, par) + _cp_problems(config, par)
    if config.vocab_size % tp:
        padded = -(-config.vocab_size // tp) * tp
        notes.append(
            Problem(
                "--tp",
                f"vocab_size ({config.vocab_size}) is padded to {padded} to split over --tp {tp} ranks",
                "tp_vocab_padded",
            )
        )
    layers = sum(s.num_layers for s in stacks(config))
    if par.pp > layers:
        errors.append(
            Problem(
                "--pp",
                f"--pp {par.pp} exceeds the model's {layers} blocks (num_layers"
                f"{' + num_decoder_layers' if config.architecture == 'encoder-decoder' else ''}); "
                f"use --pp {layers} or fewer",
                "pp_layers",
            )
        )
    elif layers % par.pp:
        notes.append(
            Problem(
                "--pp",
                f"{layers} blocks over --pp {par.pp} stages is uneven "
                f"({layers // par.pp + 1} on the first {layers % par.pp} stages); the heaviest stage "
                "sets the per-device peak",
                "pp_uneven",
            )
        )
    v = par.pp_virtual
    if v > 1 and par.pp == 1:
        errors.append(
            Problem(
                "--pp-virtual",
                f"--pp-virtual {v} interleaves model chunks over pipeline ranks; "
                "with --pp 1 there is none: add --pp 2 or more, or drop it",
                "pp_virtual_no_pp",
            )
        )
    elif v > 1 and layers % (par.pp * v):
        chunks = par.pp * v
        errors.append(Problem("--pp-virtual", f"--pp {par.pp} × --pp-virtual {v} = {chunks} model chunks must "
                              f"divide the model's {layers} blocks (Megatron-LM's interleaved schedule gives every "
                              f"chunk the same layers); use a --pp-virtual v with {layers} divisible by {par.pp}·v",
                              "pp_virtual_layers"))  # fmt: skip
    if par.zero and par.dp == 1:
        notes.append(
            Problem(
                "--zero",
                f"--zero {par.zero} shards over data-parallel ranks; with --dp 1 it saves nothing",
                "zero_without_dp",
            )
        )
    return errors, notes


@dataclass(frozen=True)
class Stage:
    """One pipeline stage: how many blocks of each stack it holds, and whether it is first / last."""

    index: int
    start: int  # first global block index (encoder blocks come first)
    stop: int
    layers: dict[str, int]
    first: bool
    last: bool
    blocks: dict[str, list[tuple[Block, int]]] = field(
        default_factory=dict
    )  # per stack: (block, layers here)

    @property
    def num_layers(self) -> int:
        return sum(self.layers.values())


def _spans(config: ResolvedShape) -> list[tuple[str, int, int]]:
    """(stack name, first global layer, end) for each stack, encoder layers first."""
    out, start = [], 0
    for s in stacks(config):
        out.append((s.name, start, start + s.num_layers))
        start += s.num_layers
    return out


def stage_layout(config: ResolvedShape, pp: int) -> list[Stage]:
    """Split the layers (encoder, then decoder) into ``pp`` contiguous stages, the first ones one larger.

    Arithmetic on the layer counts and the stacks' layer runs only (constant time for 10**20 layers as for 12).
    """
    spans = _spans(config)
    base, extra = divmod(spans[-1][2], pp)
    out, begin = [], 0
    for i in range(pp):
        end = begin + base + (1 if i < extra else 0)
        counts, blocks = {}, {}
        for name, lo, hi in spans:
            if min(end, hi) > max(begin, lo):
                counts[name] = min(end, hi) - max(begin, lo)
                blocks[name] = config.stack_plan(name).counts(max(begin, lo) - lo, min(end, hi) - lo)
        out.append(Stage(i, begin, end, counts, first=i == 0, last=i == pp - 1, blocks=blocks))
        begin = end
    return out


def stage_dims(config: ResolvedShape, stage: Stage, x: Dims) -> Dims:
    """``x`` restricted to the layers of ``stage`` (and its embeddings / head when it is the first / last)."""
    spans = {name: (lo, hi) for name, lo, hi in _spans(config)}
    restricted = tuple(
        StackDims(sd.stack, tuple(stage.blocks.get(sd.name, ())),
                  holds_first=stage.start <= spans[sd.name][0] < stage.stop,
                  holds_last=stage.start <= spans[sd.name][1] - 1 < stage.stop)
        for sd in x.stacks
    )  # fmt: skip
    return replace(x, stacks=restricted, first=stage.first, last=stage.last)


def sharded_shape(tensor: ParamTensor, par: Parallelism, config: ResolvedShape) -> tuple[Num, ...]:
    """Shape of one copy of ``tensor`` on one TP rank."""
    tp, shape = par.tp, tensor.shape
    if tp == 1 or tensor.split == "none":
        return shape
    if tensor.split == "vocab":
        return (-(-shape[0] // tp), *shape[1:])
    if tensor.split == "row":
        return (shape[0], shape[1] // tp)
    if tensor.split == "qkv":  # Q/K/V, KV heads replicated when fewer than ranks; the layer's own KV heads
        head_dim = config.resolved_head_dim
        kv_per_rank = maximum(1, (shape[0] - config.q_dim) // (2 * head_dim) // tp)
        return (config.q_dim // tp + 2 * head_dim * kv_per_rank, *shape[1:])
    return (shape[0] // tp, *shape[1:])  # column-parallel


def _on_stage(tensor: ParamTensor, stage: Stage, config: ResolvedShape) -> int:
    """How many copies of ``tensor`` live on ``stage`` (all experts: expert parallelism divides them later)."""
    if tensor.per_layer:
        if config.shared_layers:
            return int(tensor.copies) if stage.layers.get(tensor.stack or "") else 0
        here = sum(n for block, n in stage.blocks.get(tensor.stack or "", ()) if block.name == tensor.block)
        if tensor.shared_sets:  # a shared block's weights: once per set the stage's layers use (Zamba2)
            here = min(here, tensor.shared_sets)
        return here * tensor.per_layer_copies
    if (
        tensor.stack is not None
    ):  # final norm / relative bias of a stack: the stage holding its last / first block
        lo, hi = next((lo, hi) for name, lo, hi in _spans(config) if name == tensor.stack)
        edge = hi - 1 if tensor.key.endswith(("final_norm", "altup_unembed")) else lo
        copies = int(tensor.copies) if stage.start <= edge < stage.stop else 0
        if tensor.key == "embedding/decoder_token" and stage.last and not copies and _tied_head(config):
            copies = 1  # the tied LM head's own copy of the decoder's table (T5Gemma)
        return copies
    if tensor.key.startswith("embedding/"):
        copies = int(tensor.copies) if stage.first else 0
        tied = _tied_head(config) and not config.decoder_token_table  # else the head ties the decoder's table
        if tensor.key == "embedding/token" and stage.last and not stage.first and tied:
            copies += 1  # the tied LM head's own copy on the last stage
        return copies
    return int(tensor.copies) if stage.last else 0  # pooler, untied LM head


def _tied_head(config: ResolvedShape) -> bool:
    return config.resolved_lm_head and config.tie_embeddings


def stage_tensors(config: ResolvedShape, par: Parallelism) -> list[list[tuple[ParamTensor, int]]]:
    """Per stage: (tensor, copies on one device of that stage); routed experts divided over ``--ep`` ranks."""
    layout = stage_layout(config, par.pp)
    tensors = param_tensors(config)
    out = []
    for stage in layout:
        here = [(t, n) for t in tensors if (n := _on_stage(t, stage, config))]
        out.append([(t, n // par.ep if t.expert else n) for t, n in here])
    return out


def stage_params(config: ResolvedShape, par: Parallelism) -> list[int]:
    """Parameters held by one device of each pipeline stage."""
    return [
        sum(prod(sharded_shape(t, par, config)) * n for t, n in stage) for stage in stage_tensors(config, par)
    ]
