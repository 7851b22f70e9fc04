"""Checks of one attention spec that span its fields (config/block_spec.py's ``AttentionSpec`` runs them in its own
validator): a block indexer complete, and one source of keys and values. Typed against the spec's field base, so
this module and block_spec.py each stay one seam (the fields there, the cross-field checks here)."""

from __future__ import annotations

from pydantic_core import PydanticCustomError

from embedcalc.config.fields import AttentionFields
from embedcalc.config.spec_base import refuse_other_kind


def check_external_kv(spec: AttentionFields) -> None:
    """Keys and values from another model (kv_external) are neither an earlier layer's (kv_shared) nor projected
    from an external sequence (cross)."""
    if spec.kv_external and (spec.kv_shared or spec.cross):
        raise PydanticCustomError(
            "kv_external_with_other_source",
            "attention.kv_external takes the keys and values from another model, but {other} gives them another "
            "source; keep one of the two",
            {"other": "kv_shared" if spec.kv_shared else "cross"},
        )


_BLOCK_INDEXER = ("index_heads", "index_head_dim", "index_topk", "index_block_size")


def check_block_indexer(spec: AttentionFields) -> None:
    """Standard attention with a block indexer (MiniMax-M3's sparse attention) needs all of its fields, and has no
    selection of an earlier layer to share (index_shared is GLM-5's, of kind sparse)."""
    missing = [name for name in _BLOCK_INDEXER if getattr(spec, name) is None]
    if missing:
        raise PydanticCustomError(
            "block_indexer_incomplete",
            "attention.index_block_size makes standard attention block-sparse, which also needs {fields} "
            "(MiniMax-M3: index_heads 4, index_head_dim 128, index_topk 16, index_block_size 128)",
            {"fields": ", ".join(missing)},
        )
    refuse_other_kind(spec, ("index_shared",), "attention", "sparse")
