"""``verify --checkpoint`` on a checkpoint in its family's original format: placed under the names transformers
loads it by.

Checkpoints published in a family's own layout (Mistral Large 4's ``layers.N.attention.wq`` / ``wkv_a_with_mqa`` /
``experts.E.w1``, Step-3.7's stacked ``moe.gate_proj`` / ``moe.up_proj``) are renamed, and some of their tensors
fused or split, when transformers loads them: each model class's conversion mapping
(``transformers/conversion_mapping.py``). When a first placement leaves tensors outside every component (or a
component without tensors, or a count that disagrees) and transformers has a mapping for the config's
model types (the list derived from its newest release, read without importing it; then the installed release's own
table), that mapping is applied to the header's names and shapes (:func:`embedcalc.modeling.hf_conversion.load_names`:
the model built on the meta device, the converters run on meta tensors) and the checkpoint placed again under the
loaded names; every tensor named in the result says the name it is stored under. Without transformers the unplaced
tensors say what would place them and how to install it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from embedcalc.config.resolved import ResolvedShape
from embedcalc.reconcile.checkpoint import CheckpointCheck, TensorNote, reconcile_checkpoint
from embedcalc.sources.checkpoint import Checkpoint, StoredTensor
from embedcalc.sources.hf.accept import weight_conversions

UNPLACED = "no component of the config holds it"
# the depth up to which the model is built on the meta device to read its mapping (reconcile.verify's bound)
_MAX_LAYERS = 512
_INSTALL = "pip install 'embedcalc[transformers]'"


def _unplaced(check: CheckpointCheck) -> bool:
    """Whether the stored names leave something unplaced: a tensor outside every component, a component without
    tensors, or a count that disagrees (a wrong shape alone is the checkpoint's own, named as stored)."""
    return (
        bool(check.missing)
        or any(e.reason == UNPLACED for e in check.extra)
        or not all(c.agree for c in check.components)
    )


def _left_out(check: CheckpointCheck) -> int:
    """How much a placement leaves out: missing and unplaced tensors, wrong shapes, components that disagree."""
    return (len(check.missing) + sum(e.reason == UNPLACED for e in check.extra) + len(check.shape_errors)
            + sum(not c.agree for c in check.components))  # fmt: skip


def _without_transformers(check: CheckpointCheck) -> CheckpointCheck:
    """Each unplaced tensor's reason says what would place it: transformers' conversion mapping, not installed."""
    hint = (f"{UNPLACED}; a checkpoint in its family's original format is renamed on load by transformers' "
            f"conversion mapping, which is not installed ({_INSTALL})")  # fmt: skip
    extra = [replace(e, reason=hint) if e.reason == UNPLACED else e for e in check.extra]
    if extra == check.extra:
        return check
    note = f"tensors left unplaced: {_INSTALL} to place a family's original format as transformers loads it"
    return replace(check, extra=extra, notes=[*check.notes, note])


def _converted_on_load(raw: dict[str, Any]) -> bool:
    """Whether transformers converts a checkpoint of this config on load: its model_type, a sub-config's, or its
    class has a conversion mapping (the list derived from the newest transformers, :mod:`accept
    <embedcalc.sources.hf.accept>`: read without importing transformers or torch)."""
    names = [raw.get("model_type"), *(v.get("model_type") for v in raw.values() if isinstance(v, dict))]
    classes = raw.get("architectures")
    names += classes if isinstance(classes, list) else []
    known = weight_conversions()
    return any(isinstance(n, str) and n in known for n in names)


def _stored_as(note: TensorNote, sources: dict[str, tuple[str, ...]]) -> TensorNote:
    names = sources.get(note.tensor)
    if not names or names == (note.tensor,):
        return note
    more = f" and {len(names) - 1} more" if len(names) > 1 else ""
    return replace(note, reason=f"{note.reason} (stored as {names[0]}{more})")


def _layers(config: ResolvedShape) -> int:
    from embedcalc.analysis.structure import stacks

    return sum(s.num_layers for s in stacks(config))


def place_as_loaded(
    target: str, config: ResolvedShape, checkpoint: Checkpoint, check: CheckpointCheck
) -> CheckpointCheck:
    """``check`` again under the names transformers loads ``checkpoint`` by, where the first placement left
    something out and transformers' mapping renames or converts a tensor (module docstring); ``check`` otherwise."""
    if not _unplaced(check) or not _converted_on_load(checkpoint.raw_config):
        return check
    try:
        from embedcalc.modeling.hf_classes import transformers_version
        from embedcalc.modeling.hf_conversion import has_mapping, load_names
    except ImportError:
        return _without_transformers(check)
    version = transformers_version()
    if version is None:
        return _without_transformers(check)
    raw = checkpoint.raw_config
    if not has_mapping(
        raw
    ):  # the installed transformers' own table (the shipped list is the newest release's)
        return check
    if _layers(config) > _MAX_LAYERS:
        note = (f"transformers' conversion mapping not applied: the model is built on the meta device to read it, "
                f"and at most {_MAX_LAYERS} layers are")  # fmt: skip
        return replace(check, notes=[*check.notes, note])
    try:
        loaded = load_names(raw, [(t.name, t.shape, t.dtype, t.nbytes) for t in checkpoint.tensors])
    except (
        Exception
    ) as exc:  # transformers refusing its own config: the first placement stands, with the reason
        why = " ".join(str(exc).split())[:200]
        return replace(check, notes=[*check.notes, f"transformers {version} could not build the model to apply its "
                                     f"conversion mapping ({type(exc).__name__}: {why})"])  # fmt: skip
    if not loaded.renamed and not loaded.converted:
        return check
    files = {t.name: t.file for t in checkpoint.tensors}
    tensors = tuple(
        StoredTensor(t.name, t.shape, t.dtype, t.nbytes, files[t.sources[0]]) for t in loaded.tensors
    )
    parameters = frozenset(t.name for t in loaded.tensors if t.parameter)
    again = reconcile_checkpoint(target, config, replace(checkpoint, tensors=tensors), parameters)
    if _left_out(again) >= _left_out(check):
        # the stored names are not the family's original format after all (a checkpoint transformers 5.24 saved
        # with LongCat-Flash's unused zero-expert rows): the conversion places no more, the first placement stands
        note = (f"transformers {version}'s conversion mapping for {loaded.model_class} was tried and placed no more "
                "of the checkpoint than its stored names do; placed as stored")  # fmt: skip
        return replace(check, notes=[*check.notes, note])
    sources = {t.name: t.sources for t in loaded.tensors}
    notes = [f"placed under the names transformers {version} loads them by: {loaded.model_class}'s conversion "
             f"mapping renamed {loaded.renamed} tensors and converted {loaded.converted} (merged, split or "
             f"transposed) into {loaded.produced}"]  # fmt: skip
    if loaded.failed:
        notes.append(f"{len(loaded.failed)} conversions could not run on the stored shapes, their tensors kept as "
                     f"stored: {', '.join(loaded.failed[:3])}")  # fmt: skip
    return replace(
        again,
        shape_errors=[_stored_as(n, sources) for n in again.shape_errors],
        extra=[_stored_as(n, sources) for n in again.extra],
        notes=[*again.notes, *notes],
    )
