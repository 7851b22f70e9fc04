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
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from embedcalc.analysis.params import ParamTensor, param_tensors
from embedcalc.analysis.structure import stacks
from embedcalc.analysis.workload import Parallelism
from embedcalc.config.schema import ModelConfig
from embedcalc.errors import Problem


def parallel_problems(config: ModelConfig, par: Parallelism) -> tuple[list[Problem], list[Problem]]:
    """(errors, notes) of running ``config`` with ``par``; errors name the flag and the field."""
    errors: list[Problem] = []
    notes: list[Problem] = []
    tp, heads, kv, f = par.tp, config.num_heads, config.resolved_kv_heads, config.resolved_ffn_dim
    if heads % tp:
        ok = [t for t in range(1, heads + 1) if heads % t == 0 and f % t == 0]
        errors.append(
            Problem(
                "--tp",
                f"--tp {tp} must divide num_heads ({heads}) so each rank holds whole "
                f"heads; tensor-parallel degrees that divide num_heads and ffn_dim: "
                f"{', '.join(map(str, ok))}",
                "tp_heads",
            )
        )
    elif kv % tp and tp % kv:
        errors.append(
            Problem(
                "--tp",
                f"--tp {tp} and num_kv_heads ({kv}): one must divide the other (KV heads "
                "are split over ranks, or replicated when there are fewer than ranks)",
                "tp_kv_heads",
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
    if f % tp:
        errors.append(
            Problem(
                "--tp",
                f"--tp {tp} must divide ffn_dim ({f}); nearest ffn_dim divisible by {tp}: "
                f"{f - f % tp} or {f - f % tp + tp}",
                "tp_ffn_dim",
            )
        )
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

    @property
    def num_layers(self) -> int:
        return sum(self.layers.values())


def stage_layout(config: ModelConfig, pp: int) -> list[Stage]:
    """Split the blocks (encoder, then decoder) into ``pp`` contiguous stages, the first ones one larger.

    Arithmetic on the block counts only (constant time for 10**20 layers as for 12).
    """
    spans = []  # (stack name, first global block, end)
    start = 0
    for s in stacks(config):
        spans.append((s.name, start, start + s.num_layers))
        start += s.num_layers
    base, extra = divmod(start, pp)
    out, begin = [], 0
    for i in range(pp):
        end = begin + base + (1 if i < extra else 0)
        counts = {
            name: min(end, hi) - max(begin, lo) for name, lo, hi in spans if min(end, hi) > max(begin, lo)
        }
        out.append(Stage(i, begin, end, counts, first=i == 0, last=i == pp - 1))
        begin = end
    return out


def sharded_shape(tensor: ParamTensor, par: Parallelism, config: ModelConfig) -> tuple[int, ...]:
    """Shape of one copy of ``tensor`` on one TP rank."""
    tp, shape = par.tp, tensor.shape
    if tp == 1 or tensor.split == "none":
        return shape
    if tensor.split == "vocab":
        return (-(-shape[0] // tp), *shape[1:])
    if tensor.split == "row":
        return (shape[0], shape[1] // tp)
    # column-parallel: Q/K/V (KV heads replicated when fewer than ranks) or FFN-in
    if tensor.key.endswith("/qkv"):
        out_features = config.q_dim // tp + 2 * config.resolved_head_dim * max(
            1, config.resolved_kv_heads // tp
        )
    else:
        out_features = shape[0] // tp
    return (out_features, *shape[1:])


def _on_stage(tensor: ParamTensor, stage: Stage, config: ModelConfig) -> int:
    """How many copies of ``tensor`` live on ``stage``."""
    if tensor.per_layer:
        return stage.layers.get(tensor.stack or "", 0)
    if (
        tensor.stack is not None
    ):  # final norm / relative bias of a stack: the stage holding its last / first block
        if tensor.key.endswith("final_norm"):
            return tensor.copies if _holds_last_block(stage, tensor.stack, config) else 0
        return tensor.copies if _holds_first_block(stage, tensor.stack, config) else 0
    if tensor.key.startswith("embedding/"):
        copies = tensor.copies if stage.first else 0
        if tensor.key == "embedding/token" and stage.last and not stage.first and _tied_head(config):
            copies += 1  # the tied LM head's own copy on the last stage
        return copies
    return tensor.copies if stage.last else 0  # pooler, untied LM head


def _tied_head(config: ModelConfig) -> bool:
    return config.resolved_lm_head and config.tie_embeddings


def _stack_span(config: ModelConfig, stack: str) -> tuple[int, int]:
    """Global block indices [start, stop) of ``stack`` (encoder blocks first)."""
    start = 0
    for s in stacks(config):
        if s.name == stack:
            return start, start + s.num_layers
        start += s.num_layers
    raise KeyError(stack)


def _holds_first_block(stage: Stage, stack: str, config: ModelConfig) -> bool:
    return stage.start <= _stack_span(config, stack)[0] < stage.stop


def _holds_last_block(stage: Stage, stack: str, config: ModelConfig) -> bool:
    return stage.start <= _stack_span(config, stack)[1] - 1 < stage.stop


def stage_tensors(config: ModelConfig, par: Parallelism) -> list[list[tuple[ParamTensor, int]]]:
    """Per stage: (tensor, copies on that stage) for one TP rank."""
    layout = stage_layout(config, par.pp)
    tensors = param_tensors(config)
    return [[(t, n) for t in tensors if (n := _on_stage(t, stage, config))] for stage in layout]


def stage_params(config: ModelConfig, par: Parallelism) -> list[int]:
    """Parameters held by one TP rank of each pipeline stage."""
    return [
        sum(prod(sharded_shape(t, par, config)) * n for t, n in stage) for stage in stage_tensors(config, par)
    ]
