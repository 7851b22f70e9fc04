"""The tensor-level answers of ``embedcalc explain``: what embed_dim is in this model (every weight's shape and
share), and what a pretrained checkpoint keeps when one field changes for fine-tuning (Q3).

Both read the analytic tensor list of :func:`embedcalc.analysis.params.param_tensors`. A checkpoint tensor loads
into the new model when the same component holds a tensor of the same shape; the fused Q/K/V tensor is matched
block by block (its rows are Q, then K, then V), as a checkpoint with separate projections would be. A table
indexed by token id or position (token embedding, LM head, learned positions) that gains or loses rows keeps the
rows both models share: copying them is what transformers' ``resize_token_embeddings`` does, so only the new rows
are to initialise. The torch-side
listing of the same question, tensor by tensor and by name, is ``embedcalc diff`` (:mod:`embedcalc.reconcile.diff`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from math import prod
from typing import Any

from embedcalc.analysis.heads import divisors, nearest_valid_heads
from embedcalc.analysis.params import param_tensors
from embedcalc.analysis.tensor import ParamTensor
from embedcalc.analysis.workload import Workload
from embedcalc.config.resolved import ResolvedShape
from embedcalc.config.schema import ModelConfig

Shape = tuple[int, ...]


# --- embed-dim: the walk-through ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ComponentShape:
    """One breakdown key: the shape of each of its tensors (weight, bias), how many layers hold it, its share."""

    key: str
    shapes: list[Shape]
    copies: int
    params: int
    share: float
    width_axes: int  # axes of its largest tensor that are embed_dim wide


@dataclass(frozen=True)
class EmbedDimAnswer:
    """Where embed_dim appears in this model, tensor by tensor."""

    embed_dim: int
    num_heads: int
    head_dim: int
    q_dim: int
    kv_dim: int
    ffn_dim: int
    ffn_ratio: float
    token_embed_dim: int
    vocab_size: int
    max_seq_len: int
    position: str
    num_layers: int
    params_total: int
    components: list[ComponentShape]
    width_params: int  # params in tensors with an embed_dim-wide axis
    width_share: float
    hidden_state_shape: tuple[int, int, int]  # (B, T, d) for the workload
    hidden_state_bytes: int  # one such tensor at the workload's activation dtype


def _width_axes(shapes: list[Shape], d: int) -> int:
    largest = max(shapes, key=prod)
    return sum(1 for axis in largest if axis == d)


def explain_embed_dim(config: ResolvedShape, workload: Workload) -> EmbedDimAnswer:
    """Every component of ``config`` with its tensor shapes and share of the parameters."""
    d = config.embed_dim
    grouped: dict[str, list[ParamTensor]] = {}
    for tensor in param_tensors(config):
        grouped.setdefault(tensor.key, []).append(tensor)
    total = sum(t.numel for tensors in grouped.values() for t in tensors)
    components = []
    for key, tensors in grouped.items():
        params = sum(t.numel for t in tensors)
        shapes = [t.shape for t in tensors]
        components.append(
            ComponentShape(key, shapes, max(t.copies for t in tensors), params, round(params / total, 4),
                           _width_axes(shapes, d))
        )  # fmt: skip
    width = sum(t.numel for ts in grouped.values() for t in ts if d in t.shape)
    b, n, e = workload.batch_size, workload.seq_len, workload.activation_bytes
    return EmbedDimAnswer(
        embed_dim=d,
        num_heads=config.num_heads,
        head_dim=config.resolved_head_dim,
        q_dim=config.q_dim,
        kv_dim=config.kv_dim,
        ffn_dim=config.resolved_ffn_dim,
        ffn_ratio=round(config.resolved_ffn_dim / d, 4),
        token_embed_dim=config.resolved_token_embed_dim,
        vocab_size=config.vocab_size,
        max_seq_len=config.max_seq_len,
        position=config.position,
        num_layers=config.total_layers,
        params_total=total,
        components=components,
        width_params=width,
        width_share=round(width / total, 4),
        hidden_state_shape=(b, n, d),
        hidden_state_bytes=b * n * d * e,
    )


# --- fine-tune: what a checkpoint keeps when a field changes ------------------------------------------------


def _blocks(tensor: ParamTensor, config: ResolvedShape) -> list[Shape]:
    """The loadable blocks of one tensor: a fused Q/K/V tensor is three (Q, K, V rows), anything else one."""
    q, kv = config.q_dim, config.kv_dim
    if tensor.key.endswith("attention/qkv") and tensor.shape[0] == q + 2 * kv:
        rest = tensor.shape[1:]
        return [(q, *rest), (kv, *rest), (kv, *rest)]
    return [tensor.shape]


# tables whose rows are token ids or positions: a change of vocab_size / max_seq_len keeps the shared rows
ROW_TABLES = frozenset({"embedding/token", "embedding/position", "head/lm", "head/lm_bias"})


def shared_rows(key: str, old: Shape, new: Shape) -> int:
    """Elements of ``new`` that a checkpoint block of shape ``old`` fills: all when the shapes match, the shared
    rows of a row table whose other axes match, else none."""
    if old == new:
        return prod(new)
    if key in ROW_TABLES and len(old) == len(new) and old[1:] == new[1:]:
        return min(old[0], new[0]) * prod(new[1:])
    return 0


def _slots(config: ResolvedShape) -> dict[str, list[tuple[Shape, int]]]:
    """Breakdown key -> (block shape, copies) in model order."""
    out: dict[str, list[tuple[Shape, int]]] = {}
    for tensor in param_tensors(config):
        for shape in _blocks(tensor, config):
            out.setdefault(tensor.key, []).append((shape, tensor.copies))
    return out


@dataclass(frozen=True)
class Transfer:
    """What a checkpoint of A gives a model B: params loadable unchanged, and which components change."""

    params_b: int
    loadable_params: int
    reshaped: list[str]  # components with a block of a new shape
    grown: list[str]  # components with more copies (layers) than A had

    @property
    def params_to_initialise(self) -> int:
        return self.params_b - self.loadable_params


def transfer(a: ResolvedShape, b: ResolvedShape) -> Transfer:
    """Match B's tensors against A's, component by component and block by block (module docstring)."""
    slots_a, slots_b = _slots(a), _slots(b)
    loadable, params_b = 0, 0
    reshaped: list[str] = []
    grown: list[str] = []
    for key, blocks in slots_b.items():
        old = slots_a.get(key, [])
        for i, (shape, copies) in enumerate(blocks):
            params_b += prod(shape) * copies
            filled = shared_rows(key, old[i][0], shape) if i < len(old) else 0
            if filled:
                loadable += filled * min(copies, old[i][1])
                if copies > old[i][1] and key not in grown:
                    grown.append(key)
            if filled < prod(shape) and key not in reshaped:
                reshaped.append(key)
    return Transfer(params_b, loadable, reshaped, grown)


@dataclass(frozen=True)
class Scenario:
    """One common change made for fine-tuning, with what the pretrained checkpoint still provides."""

    field: str
    value_a: int
    value_b: int
    params_b: int
    loadable_params: int
    params_to_initialise: int
    loadable_share: float  # of B's params
    reshaped: list[str]
    grown: list[str]


@dataclass(frozen=True)
class MethodFit:
    """One fine-tuning method on one device: the memory per device of one step at the leanest activation
    recompute that fits (with recompute full when none does), the trainable parameters and the step's time
    (:mod:`embedcalc.analysis.plan.finetune`)."""

    device: str
    method: str  # full, full + offload, lora, qlora
    fits: bool
    memory_bytes: int | None  # None: not counted (reason)
    limit_bytes: int
    recompute: str | None  # None: does not fit
    trainable_params: int | None
    step_s: float | None
    reason: str | None = None  # why it does not fit, or why it was not counted


@dataclass(frozen=True)
class FineTuneAnswer:
    """Q3: can embed_dim change when fine-tuning, and what each common change costs the checkpoint; and which
    fine-tuning method fits which device (``methods``, for the workload's batch and tokens)."""

    embed_dim: int
    num_heads: int
    num_layers: int
    params_total: int
    scenarios: list[Scenario]
    methods: list[MethodFit] = dataclasses.field(default_factory=list)
    # batch, tokens and dtype of the methods' step
    method_workload: dict[str, Any] = dataclasses.field(default_factory=dict)

    def scenario(self, field: str) -> Scenario | None:
        return next((s for s in self.scenarios if s.field == field), None)


def _changed(config: ResolvedShape, **update: Any) -> ResolvedShape | None:
    """``config`` with ``update`` applied and validated; None when the change makes it invalid."""
    try:
        return ModelConfig.model_validate({**config.model_dump(), **update})
    except ValueError:  # pydantic's ValidationError
        return None


def _candidate_changes(config: ResolvedShape) -> list[tuple[str, int, dict[str, Any]]]:
    """(field, new value, update) for the common fine-tuning changes that apply to ``config``."""
    d, h, kv, layers = config.embed_dim, config.num_heads, config.resolved_kv_heads, config.num_layers
    out: list[tuple[str, int, dict[str, Any]]] = []
    wider = d + (64 if config.head_dim is not None else 8 * h)  # head_dim + 8 when it follows the width
    out.append(("embed_dim", wider, {"embed_dim": wider}))
    if config.head_dim is None and d % h == 0:
        heads = nearest_valid_heads(d, h, 1)[0]
        kv_update = {} if config.num_kv_heads is None else {"num_kv_heads": min(kv, heads)}
        out.append(("num_heads", heads, {"num_heads": heads, **kv_update}))
    deeper: dict[str, Any] = {"num_layers": 2 * layers}
    if config.num_decoder_layers is not None:
        deeper["num_decoder_layers"] = 2 * config.num_decoder_layers
    out.append(("num_layers", 2 * layers, deeper))
    fewer = [x for x in divisors(h) if x <= min(h // 4, kv // 2)]
    if fewer:
        out.append(("num_kv_heads", fewer[-1], {"num_kv_heads": fewer[-1]}))
    vocab = math.ceil(config.vocab_size * 11 / 10 / 64) * 64  # 10% more tokens, a multiple of 64
    out.append(("vocab_size", vocab, {"vocab_size": vocab}))
    if config.position == "learned":
        out.append(("max_seq_len", 2 * config.max_seq_len, {"max_seq_len": 2 * config.max_seq_len}))
    return out


def explain_fine_tune(config: ResolvedShape) -> FineTuneAnswer:
    """For each common change (wider, other head count, deeper, GQA, more vocabulary, longer positions): the
    parameters a checkpoint of ``config`` loads unchanged into the changed model and those to initialise."""
    scenarios = []
    for field, value, update in _candidate_changes(config):
        changed = _changed(config, **update)
        if changed is None:
            continue
        t = transfer(config, changed)
        scenarios.append(
            Scenario(
                field=field,
                value_a=int(getattr(config, field) if field != "num_kv_heads" else config.resolved_kv_heads),
                value_b=value,
                params_b=t.params_b,
                loadable_params=t.loadable_params,
                params_to_initialise=t.params_to_initialise,
                loadable_share=round(t.loadable_params / t.params_b, 4),
                reshaped=t.reshaped,
                grown=t.grown,
            )
        )
    total = sum(t.numel for t in param_tensors(config))
    return FineTuneAnswer(config.embed_dim, config.num_heads, config.num_layers, total, scenarios)
