"""A checkpoint's tensor names and shapes as transformers loads them: the model class's own conversion mapping
(``transformers/conversion_mapping.py``: ``WeightRenaming``, ``WeightConverter``) applied to the header's names,
and the converters' operations run on meta tensors of the stored shapes, so a fusion (Mistral Large 4's per-expert
``w1`` / ``w3`` merged into one ``gate_up_proj``), a split (a fused ``qkv`` chunked into q, k, v) or a transpose
gives the shapes transformers' would. No tensor data is read or allocated.

The steps are transformers' own, from ``core_model_loading.convert_and_load_state_dict_in_model`` (5.24, 5.25): the
transforms of ``get_model_conversion_mapping(model)`` for the model built on the meta device (each sub-model's
mapping scoped to its module path); every key renamed by ``rename_source_key`` (all renamings, then at most one
converter, the base-model prefix added or dropped to match the model's state dict), keys in their natural order
(a merge stacks experts in index order); each converter's tensors collected per target key and converted. A key
the model does not hold keeps the name the renamings give it (transformers reports it unexpected).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from copy import deepcopy
from dataclasses import dataclass
from typing import Any

import torch

from embedcalc.modeling.hf_classes import build_meta_class, choose_class, hf_config, quiet

# safetensors' dtype names -> torch's (a dtype torch lacks is carried as bytes: only shapes matter here)
_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64",
           "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool", "F8_E4M3": "float8_e4m3fn",
           "F8_E5M2": "float8_e5m2", "F8_E8M0": "float8_e8m0fnu", "U16": "uint16", "U32": "uint32",
           "U64": "uint64", "C64": "complex64"}  # fmt: skip


@dataclass(frozen=True)
class Loaded:
    """One tensor as transformers loads it: its name, shape, the stored dtype and bytes of its sources, the
    checkpoint names it comes from (one for a renaming, several for a merge; a split's parts share theirs), and
    whether the model holds it as a parameter (not a buffer, not unexpected)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    nbytes: int
    sources: tuple[str, ...]
    parameter: bool = False


@dataclass(frozen=True)
class Conversion:
    """The header's tensors as ``model_class`` loads them, and what changed: tensors renamed, tensors converted
    (merged, split, transposed) and the tensors they became, and the converters that failed on meta tensors or
    the tensors no meta tensor can stand for (kept as stored)."""

    model_class: str
    tensors: tuple[Loaded, ...]
    renamed: int
    converted: int
    produced: int
    failed: tuple[str, ...]


def _torch_dtype(name: str) -> torch.dtype:
    found = getattr(torch, _DTYPES.get(name, "uint8"), None)
    return found if isinstance(found, torch.dtype) else torch.uint8


def _model_class(raw: Mapping[str, Any], config: Any) -> str:
    """The class a checkpoint loads into: its config's ``architectures[0]`` where transformers has that class (its
    conversion mapping may be the class's own), else the class the general reader builds for the config."""
    import transformers

    names = raw.get("architectures")
    if isinstance(names, list) and names and isinstance(names[0], str) and hasattr(transformers, names[0]):
        return names[0]
    return choose_class(config)[0]


def has_mapping(raw: Mapping[str, Any]) -> bool:
    """Whether transformers has a conversion mapping of its own (not only the legacy one every model gets) for the
    config's model_type, a sub-config's, or its architecture: without one, loading renames nothing."""
    from transformers.conversion_mapping import get_checkpoint_conversion_mapping

    keys: list[Any] = [raw.get("model_type")]
    keys += [sub.get("model_type") for sub in raw.values() if isinstance(sub, Mapping)]
    names = raw.get("architectures")
    keys += names if isinstance(names, list) else []
    found = get_checkpoint_conversion_mapping  # untyped in transformers
    return any(isinstance(k, str) and found(k) for k in keys)  # type: ignore[no-untyped-call]


def _split_bytes(total: int, shapes: Sequence[tuple[int, ...]]) -> list[int]:
    """``total`` bytes shared among tensors of ``shapes`` by their element counts (a split's parts)."""
    counts = [int(torch.Size(s).numel()) for s in shapes]
    whole = sum(counts) or 1
    parts = [total * c // whole for c in counts]
    parts[-1] += total - sum(parts)
    return parts


def load_names(raw: Mapping[str, Any], stored: Sequence[tuple[str, tuple[int, ...], str, int]]) -> Conversion:
    """The ``stored`` tensors (name, shape, safetensors dtype, bytes) of a checkpoint whose config.json is ``raw``,
    as transformers loads them (module docstring). Needs torch and transformers; raises what building the model
    raises (the caller reports it)."""
    from transformers.conversion_mapping import get_model_conversion_mapping
    from transformers.core_model_loading import (
        WeightConverter,
        WeightRenaming,
        dot_natural_key,
        rename_source_key,
    )

    with quiet():
        config = hf_config(raw)
        model_class = _model_class(raw, config)
        model: Any = build_meta_class(model_class, config)  # a PreTrainedModel
        mapping = get_model_conversion_mapping(model)
    meta = model.state_dict()
    parameters = {name for name, _ in model.named_parameters()}
    prefix = str(model.base_model_prefix)
    renamings = [t for t in mapping if isinstance(t, WeightRenaming)]
    converters = [t for t in mapping if isinstance(t, WeightConverter)]
    by_pattern = {p: c for c in converters for p in c.source_patterns}
    info = {name: (shape, dtype, nbytes) for name, shape, dtype, nbytes in stored}
    out: list[Loaded] = []
    pending: dict[str, Any] = {}  # first target key -> its converter, collecting meta tensors
    renamed, failed = 0, []
    for name in sorted(info, key=dot_natural_key):
        shape, dtype, nbytes = info[name]
        target, pattern = rename_source_key(name, renamings, converters, prefix, meta)
        if target not in meta and name in meta:  # loaded under its own name (transformers' same fallback)
            target, pattern = rename_source_key(name, [], [], prefix, meta)
        if target in meta and pattern is not None:
            try:  # a shape no tensor can have (numel past 2^63) stays as stored
                tensor = torch.empty(shape, dtype=_torch_dtype(dtype), device="meta")
            except (RuntimeError, ValueError, OverflowError):
                failed.append(f"{name}: shape {list(shape)}")
                out.append(Loaded(name, shape, dtype, nbytes, (name,)))
                continue
            if target not in pending:  # each target key gets its own converter (transformers' deepcopy)
                pending[target] = deepcopy(by_pattern[pattern])
            pending[target].add_tensor(target, name, pattern, tensor)
            continue
        renamed += target != name
        out.append(Loaded(target, shape, dtype, nbytes, (name,), target in parameters))
    converted, produced = 0, 0
    for first, converter in pending.items():
        sources = sorted(
            {s for names in converter.layer_targets.values() for s in names}, key=dot_natural_key
        )
        try:
            with quiet():
                realized = converter.convert(first, model=model, config=model.config)
        except Exception as exc:  # an operation that needs values (a dequantization): keep the sources
            failed.append(f"{first}: {type(exc).__name__}")
            out += [Loaded(s, info[s][0], info[s][1], info[s][2], (s,)) for s in sources]
            continue
        tensors = {k: (v[0] if isinstance(v, list) else v) for k, v in realized.items()}
        shapes = [tuple(int(d) for d in t.shape) for t in tensors.values()]
        parts = _split_bytes(sum(info[s][2] for s in sources), shapes)
        dtype = info[sources[0]][1]
        out += [Loaded(k, s, dtype, b, tuple(sources), k in parameters)
                for k, s, b in zip(tensors, shapes, parts, strict=True)]  # fmt: skip
        converted += len(sources)
        produced += len(tensors)
    return Conversion(model_class, tuple(out), renamed, converted, produced, tuple(failed))
