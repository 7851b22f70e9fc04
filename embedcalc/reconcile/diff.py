"""``embedcalc diff A B``: what a checkpoint of model A gives model B, tensor by tensor (DESIGN.md §12, Q3).

Every weight tensor of both torch models (:func:`embedcalc.modeling.tensors.named_tensors`), matched by name:

- **kept**: same name, same shape: loads from A's checkpoint as it is;
- **resized**: a token or position table (embedding, LM head) whose row count changed: the rows both models
  share load (what transformers' ``resize_token_embeddings`` does), the new rows are initialised;
- **reshaped**: same name (same role), another shape: must be re-initialised;
- **new**: only in B; **dropped**: only in A.

``loadable_params`` sums B's kept tensors and the shared rows of resized ones; ``params_to_initialise`` is the
rest of B. Notes explain the common changes (width, heads, depth, GQA, vocabulary, positions) with this pair's
numbers. Shape equality is the whole test: a kept tensor may still mean something else (``num_heads`` alone
keeps every shape and changes the split).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import prod
from typing import Any, Literal

from embedcalc.analysis.explain.weights import ROW_TABLES, shared_rows
from embedcalc.config.resolved import ResolvedShape
from embedcalc.modeling.tensors import NamedTensor, named_tensors

Status = Literal["kept", "resized", "reshaped", "new", "dropped"]
STATUSES: tuple[Status, ...] = ("kept", "resized", "reshaped", "new", "dropped")
# fields that change no tensor and need no note
_QUIET_FIELDS = frozenset({"name", "dropout"})


@dataclass(frozen=True)
class TensorRow:
    """One tensor name of A or B with its shape in each (None where absent)."""

    name: str
    component: str
    shape_a: tuple[int, ...] | None
    shape_b: tuple[int, ...] | None

    @property
    def status(self) -> Status:
        if self.shape_a is None:
            return "new"
        if self.shape_b is None:
            return "dropped"
        if self.shape_a == self.shape_b:
            return "kept"
        return "resized" if self.component in ROW_TABLES and self.loadable_params else "reshaped"

    @property
    def loadable_params(self) -> int:
        """B's elements of this tensor that A's checkpoint fills (the shared rows of a resized table)."""
        if self.shape_a is None or self.shape_b is None:
            return 0
        return shared_rows(self.component, self.shape_a, self.shape_b)

    @property
    def params_a(self) -> int:
        return prod(self.shape_a) if self.shape_a is not None else 0

    @property
    def params_b(self) -> int:
        return prod(self.shape_b) if self.shape_b is not None else 0

    @property
    def group(self) -> str:
        """The top-level component: embedding, encoder, decoder, pooler, head."""
        return self.component.split("/")[0]

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "component": self.component, "status": self.status,
            "shape_a": list(self.shape_a) if self.shape_a is not None else None,
            "shape_b": list(self.shape_b) if self.shape_b is not None else None,
            "params_a": self.params_a, "params_b": self.params_b,
        }  # fmt: skip


@dataclass(frozen=True)
class DiffNote:
    """An explanation of one change between A and B, with a stable code."""

    code: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


@dataclass(frozen=True)
class ModelDiff:
    """The tensor-by-tensor comparison of A and B, with totals and notes."""

    target_a: str
    target_b: str
    rows: list[TensorRow]
    notes: list[DiffNote]
    changed_fields: dict[str, tuple[Any, Any]]

    def _sum(self, attr: str, statuses: Sequence[Status]) -> int:
        return sum(getattr(r, attr) for r in self.rows if r.status in statuses)

    @property
    def params_a(self) -> int:
        return self._sum("params_a", STATUSES)

    @property
    def params_b(self) -> int:
        return self._sum("params_b", STATUSES)

    @property
    def loadable_params(self) -> int:
        """B's parameters that load from A's checkpoint (kept tensors, the shared rows of resized tables)."""
        return sum(r.loadable_params for r in self.rows)

    @property
    def params_to_initialise(self) -> int:
        return self.params_b - self.loadable_params

    @property
    def dropped_params(self) -> int:
        """A's parameters with no place in B (dropped tensors, the old shapes of reshaped ones, the rows a
        shrunk table loses)."""
        return self._sum("params_a", ("dropped", "reshaped")) + sum(
            r.params_a - r.loadable_params for r in self.rows if r.status == "resized"
        )

    def counts(self, rows: Sequence[TensorRow] | None = None) -> dict[str, int]:
        """Tensors per status."""
        rows = self.rows if rows is None else rows
        return {s: sum(1 for r in rows if r.status == s) for s in STATUSES}

    def groups(self) -> dict[str, list[TensorRow]]:
        """Rows by top-level component, in model order."""
        out: dict[str, list[TensorRow]] = {}
        for row in self.rows:
            out.setdefault(row.group, []).append(row)
        return out

    def to_json(self) -> dict[str, Any]:
        groups = {
            name: {"tensors": self.counts(rows),
                   "params_a": sum(r.params_a for r in rows), "params_b": sum(r.params_b for r in rows),
                   "loadable_params": sum(r.loadable_params for r in rows)}
            for name, rows in self.groups().items()
        }  # fmt: skip
        return {
            "a": self.target_a,
            "b": self.target_b,
            "changed_fields": {k: {"a": a, "b": b} for k, (a, b) in self.changed_fields.items()},
            "totals": {
                "params_a": self.params_a, "params_b": self.params_b,
                "loadable_params": self.loadable_params, "params_to_initialise": self.params_to_initialise,
                "dropped_params": self.dropped_params, "tensors": self.counts(),
            },
            "groups": groups,
            "tensors": [r.as_dict() for r in self.rows],
            "notes": [n.as_dict() for n in self.notes],
        }  # fmt: skip


def compare_tensors(a: Sequence[NamedTensor], b: Sequence[NamedTensor]) -> list[TensorRow]:
    """Rows for the union of names in B's order; a name only in A follows the A name it came after."""
    shapes_a = {t.name: t.shape for t in a}
    shapes_b = {t.name: t.shape for t in b}
    components = {t.name: t.component for t in a} | {t.name: t.component for t in b}
    order = {t.name: float(i) for i, t in enumerate(b)}
    previous = -1.0
    for i, t in enumerate(a):
        if t.name in order:
            previous = order[t.name]
        else:
            order[t.name] = previous + (i + 1) / (len(a) + 1)  # after its predecessor, in A's order
    names = sorted(order, key=lambda name: order[name])
    return [TensorRow(n, components[n], shapes_a.get(n), shapes_b.get(n)) for n in names]


def changed_fields(a: ResolvedShape, b: ResolvedShape) -> dict[str, tuple[Any, Any]]:
    """Fields whose resolved meaning differs between A and B (defaults resolved, e.g. num_kv_heads)."""
    dump_a, dump_b = a.model_dump(), b.model_dump()
    out = {
        k: (dump_a[k], dump_b.get(k)) for k in dump_a if dump_a[k] != dump_b.get(k) and k not in _QUIET_FIELDS
    }
    for field, value_a, value_b in (
        ("num_kv_heads", a.resolved_kv_heads, b.resolved_kv_heads),
        ("ffn_dim", a.resolved_ffn_dim, b.resolved_ffn_dim),
        ("num_decoder_layers", a.resolved_decoder_layers, b.resolved_decoder_layers),
    ):
        if value_a != value_b:
            out[field] = (value_a, value_b)
        else:
            out.pop(field, None)
    return out


def _params(rows: Sequence[TensorRow], *statuses: Status, side: str = "b") -> int:
    return sum(r.params_b if side == "b" else r.params_a for r in rows if r.status in statuses)


def notes_for(notes: Sequence[DiffNote]) -> set[str]:
    """The fields the notes so far explain (``embed_dim`` subsumes heads, K/V heads and FFN width)."""
    return {n.code.removesuffix("_changed") for n in notes}


def _layer_note(rows: list[TensorRow], stack: str, a: int, b: int, wider: bool) -> DiffNote:
    if b > a:
        new = _params([r for r in rows if r.group == stack], "new")
        old = "exist in both but reshape with the width" if wider else "load unchanged"
        return DiffNote(
            "layers_added",
            f"{stack}: layers 0-{a - 1} {old}; layers {a}-{b - 1} are new ({new:,} params): initialise "
            "them, e.g. by copying pretrained layers (progressive stacking, Gong et al. 2019)",
        )
    dropped = _params([r for r in rows if r.group == stack], "dropped", side="a")
    return DiffNote(
        "layers_removed",
        f"{stack}: layers {b}-{a - 1} of A are dropped ({dropped:,} params)"
        + ("" if wider else "; the others load unchanged"),
    )


def change_notes(config_a: ResolvedShape, config_b: ResolvedShape, rows: list[TensorRow]) -> list[DiffNote]:
    """One note per common change between A and B, with this pair's numbers."""
    changed = changed_fields(config_a, config_b)
    notes: list[DiffNote] = []
    reshaped = _params(rows, "reshaped")
    if not changed:
        return [DiffNote("identical", "the two configs build the same tensors: every weight loads")]
    if "embed_dim" in changed:
        a, b = changed.pop("embed_dim")
        kept = [r for r in rows if r.status == "kept"]
        notes.append(DiffNote(
            "embed_dim_changed",
            f"embed_dim {a} -> {b}: every tensor with an embed_dim-wide axis reshapes; only {len(kept)} "
            f"shape-independent tensors ({_params(kept, 'kept'):,} params) load. In practice a new model: "
            "distil or grow it (Net2Net, bert2BERT) rather than load it",
        ))  # fmt: skip
    if "num_heads" in changed and "embed_dim" not in notes_for(notes):
        a, b = changed.pop("num_heads")
        if config_a.num_kv_heads is None and config_b.num_kv_heads is None:
            changed.pop("num_kv_heads", None)  # K/V heads follow num_heads: part of this change
        hd_a, hd_b = config_a.resolved_head_dim, config_b.resolved_head_dim
        attention = [r for r in rows if "attention" in r.component]
        if all(r.status == "kept" for r in attention):
            detail = "every attention tensor keeps its shape, so the weights load, but head_dim goes"
        else:
            detail = f"{_params(attention, 'reshaped'):,} attention params reshape, and head_dim goes"
        notes.append(DiffNote(
            "num_heads_changed",
            f"num_heads {a} -> {b}: {detail} {hd_a} -> {hd_b}: each head reads a different slice of Q, K and V, "
            "so the loaded attention no longer computes what it learnt; fine-tune it",
        ))  # fmt: skip
    for field, stack in (("num_layers", "encoder" if config_a.architecture != "decoder" else "decoder"),
                         ("num_decoder_layers", "decoder")):  # fmt: skip
        if field in changed:
            a, b = changed.pop(field)
            if a and b:
                notes.append(_layer_note(rows, stack, a, b, "embed_dim" in notes_for(notes)))
    if "num_kv_heads" in changed and "embed_dim" not in notes_for(notes):
        a, b = changed.pop("num_kv_heads")
        kv = _params([r for r in rows if r.name.endswith((".k.weight", ".v.weight", ".k.bias", ".v.bias"))],
                     "reshaped")  # fmt: skip
        notes.append(DiffNote(
            "kv_heads_changed",
            f"num_kv_heads {a} -> {b}: only the K and V projections reshape ({kv:,} params to initialise); a "
            "multi-head checkpoint converts by mean-pooling the K/V heads of each group, then uptraining "
            "(Ainslie et al. 2023, GQA, §2.1)",
        ))  # fmt: skip
    if "vocab_size" in changed:
        a, b = changed.pop("vocab_size")
        notes.append(DiffNote(
            "vocab_changed",
            f"vocab_size {a} -> {b}: only the token table and an untied LM head are resized; their "
            f"{min(a, b):,} shared rows load and the {max(b - a, 0):,} new rows are initialised (transformers' "
            "resize_token_embeddings)",
        ))  # fmt: skip
    if "max_seq_len" in changed and config_a.position == "learned" == config_b.position:
        a, b = changed.pop("max_seq_len")
        notes.append(DiffNote(
            "positions_changed",
            f"max_seq_len {a} -> {b}: the learned position table is resized; its {min(a, b):,} trained rows load"
            + (" and initialise (or interpolate) the rest" if b > a else ""),
        ))  # fmt: skip
    if "ffn_dim" in changed and "embed_dim" not in notes_for(notes):
        a, b = changed.pop("ffn_dim")
        notes.append(DiffNote("ffn_changed", f"ffn_dim {a} -> {b}: the FFN projections reshape"))
    if changed:
        listed = ", ".join(f"{k} {a} -> {b}" for k, (a, b) in changed.items())
        notes.append(
            DiffNote("other_changes", f"also changed: {listed} ({reshaped:,} params reshape in all)")
        )
    return notes


def diff_models(target_a: str, config_a: ResolvedShape, target_b: str, config_b: ResolvedShape) -> ModelDiff:
    """Build both torch models on the meta device and compare every tensor."""
    from embedcalc.reconcile.verify import check_buildable

    check_buildable(config_a, target_a, "diff")
    check_buildable(config_b, target_b, "diff")
    rows = compare_tensors(named_tensors(config_a), named_tensors(config_b))
    return ModelDiff(target_a, target_b, rows, change_notes(config_a, config_b, rows),
                     changed_fields(config_a, config_b))  # fmt: skip
