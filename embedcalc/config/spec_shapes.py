"""What the layer model's specs mean beyond their fields, with no pydantic (issue 22, start-up): the field groups
of each kind, how a block variant's spec merges onto the default block's (:func:`merge_spec`), and the properties
of a layer run and of DeBERTa's disentangled table. The schema's models (:mod:`embedcalc.config.block_spec`,
:mod:`embedcalc.config.disentangled_spec`, :mod:`embedcalc.config.mixer_spec`) and the shipped presets' records
(:mod:`embedcalc.config.records`) share them, so both resolve a config the same way.
"""

from __future__ import annotations

from typing import Any, TypeVar

from embedcalc.config.fields import AttentionFields, DisentangledFields, LayerRunFields
from embedcalc.config.layer_plan import LATENT_KINDS
from embedcalc.config.mixer_plan import RECURRENT_KINDS
from embedcalc.config.record_base import SpecFields

DEFAULT_BLOCK = "default"
MLA_FIELDS = ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
# the fields that mean something only under one kind: set under another, they would be silently ignored (issue 24)
# (v_head_dim is MLA's and standard attention's own value width: MiMo-V2-Flash)
MLA_ONLY_FIELDS = (*(f for f in MLA_FIELDS if f != "v_head_dim"), "q_lora_rank", "qk_head_dim", "query_scale")
# what only standard attention has (its own head shape, values from keys, shared keys and values, a block indexer)
STANDARD_ONLY_FIELDS = ("num_heads", "head_dim", "values_from_keys", "kv_shared", "kv_external", "index_block_size",
                        "out_groups", "out_rank")  # fmt: skip
# what kind sparse needs beyond mla
SPARSE_FIELDS = (
    "index_heads",
    "index_head_dim",
    "index_topk",
)
SPARSE_ONLY_FIELDS = ("index_heads", "index_head_dim", "index_topk", "index_shared")
MOE_ONLY_FIELDS = ("num_experts", "top_k", "expert_dim", "num_shared_experts", "shared_expert_dim",
                   "shared_expert_gate", "router_bias", "expert_bias", "router_scale", "branch_norms",
                   "latent_dim", "zero_experts")  # fmt: skip

S = TypeVar("S", bound=SpecFields)
A = TypeVar("A", bound=AttentionFields)


def base_attention_spec(flat_window: int | None, spec: A | None, spec_type: type[A]) -> A:
    """The default block's attention spec (of ``spec_type``, the schema's or the record's): ``spec``, with the
    flat ``sliding_window`` where it sets none."""
    base = spec_type(sliding_window=flat_window) if flat_window is not None else spec_type()
    return merge_spec(base, spec)


def merge_spec(base: S, override: S | None) -> S:
    """``base`` with the fields ``override`` sets; the result is validated again (its rules span fields) when the
    specs are the schema's models."""
    if override is None or not override.model_fields_set:
        return base
    update = {name: getattr(override, name) for name in override.model_fields_set}
    spec_type: Any = type(base)
    merged = {
        name: getattr(base, name) for name in spec_type.model_fields
    }  # a spec's fields are plain values
    kind = getattr(base, "kind")  # noqa: B009 - every spec merged has a kind (attention, ffn, mixer)
    if "kind" in update and update["kind"] != kind:  # a new kind starts without the old kind's fields
        # mla <-> sparse keep MLA's
        kept = (*MLA_ONLY_FIELDS, "v_head_dim") if {kind, update["kind"]} <= LATENT_KINDS else ()
        # a mixer's gated-norm switch is mamba2's; attention beside it needs a recurrent kind (Falcon-H1's base
        # block with an attention-only variant)
        mixer_fields: tuple[str, ...] = ("gate_norm",)
        if update["kind"] not in RECURRENT_KINDS:
            mixer_fields += ("parallel_attention",)
        kind_fields: tuple[str, ...] = (*MLA_ONLY_FIELDS, "v_head_dim", *SPARSE_ONLY_FIELDS, *STANDARD_ONLY_FIELDS,
                                        *MOE_ONLY_FIELDS, "ffn_dim")  # fmt: skip
        for name in (*kind_fields, "num_kv_heads", *mixer_fields):
            if name in merged and name not in kept:
                merged[name] = spec_type.model_fields[name].default
    merged_spec: S = spec_type.model_validate({**merged, **update})
    return merged_spec


class LayerRunShape(LayerRunFields):
    """A layer run's size (the schema's :class:`~embedcalc.config.block_spec.LayerRun` and its record)."""

    @property
    def num_layers(self) -> int:
        return len(self.pattern) * self.repeat


class DisentangledShape(DisentangledFields):
    """The sizes of DeBERTa's disentangled attention (:class:`~embedcalc.config.disentangled_spec.DisentangledSpec`
    and its record)."""

    @property
    def terms(self) -> int:
        """How many position terms are added to the scores (0, 1 or 2)."""
        return int(self.c2p) + int(self.p2c)

    @property
    def projections(self) -> int:
        """Projections of the table per layer: both q and k when shared (transformers computes both), else one per
        term."""
        return 2 if self.share_keys else self.terms

    @property
    def rows(self) -> int:
        return 2 * self.span
