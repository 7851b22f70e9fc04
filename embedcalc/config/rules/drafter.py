"""The rules of a drafter's parts (DESIGN.md §9): an input read from another model, the state handed back to it,
and a centroid-masked LM head (``input_projection_dim``, ``output_projection_dim``, ``head_centroids``,
``head_centroid_top_k``).

:class:`DrafterRules` is a mixin of :class:`embedcalc.config.schema.ModelConfig`, which declares the fields (hence
``check_fields=False``); each rule is a field validator on the field at fault and names the fix. The parts are those
of transformers 5.24/5.25's ``Gemma4AssistantForCausalLM`` (``pre_projection``, ``post_projection``) and
``Gemma4AssistantMaskedEmbedder`` (``modeling_gemma4_assistant.py``).
"""

from __future__ import annotations

from pydantic import ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from embedcalc.config.rules.altup import needs_decoder

# what an input of another model's vectors cannot be combined with: each reads the token ids the drafter never sees
_READS_IDS = {
    "per_layer_input_dim": "per-layer embeddings look up the token ids",
    "altup_inputs": "AltUp copies the embedded tokens",
    "token_embed_dim": "a token table of its own width projects the looked-up tokens",
    "type_vocab_size": "a segment table is added to the looked-up tokens",
}


class DrafterRules:
    @field_validator("input_projection_dim", check_fields=False)
    @classmethod
    def _input_projection_alone(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is None:
            return value
        needs_decoder(
            info, "input_projection_dim", value, "gives a decoder's positions vectors of another model"
        )
        for field, why in _READS_IDS.items():
            other = info.data.get(field)
            if other and not (field == "token_embed_dim" and other == info.data.get("embed_dim")):
                raise PydanticCustomError(
                    "input_projection_with_ids",
                    "input_projection_dim ({value}) makes the model read another model's vectors instead of token "
                    "ids, but {field} ({other}) needs the ids ({why}); remove one of them",
                    {"value": value, "field": field, "other": other, "why": why},
                )
        return value

    @field_validator("output_projection_dim", check_fields=False)
    @classmethod
    def _output_projection_needs_decoder(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is not None:
            needs_decoder(
                info, "output_projection_dim", value, "projects a decoder's last state for its target"
            )
            if info.data.get("lm_head") is False:
                raise PydanticCustomError(
                    "output_projection_needs_head",
                    "output_projection_dim ({value}) hands a drafter's state back beside its LM head's logits, but "
                    "lm_head is false; set lm_head: true or remove output_projection_dim",
                    {"value": value},
                )
        return value

    @field_validator("head_centroids", check_fields=False)
    @classmethod
    def _centroids_divide_vocab(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is None:
            return value
        head = info.data.get("lm_head")
        if head is None:
            head = info.data.get("architecture") not in (None, "encoder")
        if not head:
            raise PydanticCustomError(
                "centroids_need_head",
                "head_centroids ({value}) masks an LM head, but this config has none; set lm_head: true or remove "
                "head_centroids",
                {"value": value},
            )
        vocab = info.data.get("vocab_size")
        if isinstance(vocab, int) and vocab % value:
            raise PydanticCustomError(
                "centroids_divide_vocab",
                "head_centroids ({value}) must divide vocab_size ({vocab}): each centroid owns vocab_size / "
                "head_centroids tokens (transformers views the token ordering as centroids x tokens); use a "
                "divisor of {vocab}",
                {"value": value, "vocab": vocab},
            )
        return value

    @field_validator("head_centroid_top_k", check_fields=False)
    @classmethod
    def _top_k_within_centroids(cls, value: int | None, info: ValidationInfo) -> int | None:
        if "head_centroids" not in info.data:  # head_centroids itself failed
            return value
        centroids = info.data.get("head_centroids")
        if value is None and centroids is not None:
            raise PydanticCustomError(
                "centroids_need_top_k",
                "head_centroids ({centroids}) needs head_centroid_top_k, the clusters each position scores "
                "(Gemma 4's assistant: centroid_intermediate_top_k, 32 of 2048)",
                {"centroids": centroids},
            )
        if value is not None and centroids is None:
            raise PydanticCustomError(
                "top_k_without_centroids",
                "head_centroid_top_k ({value}) picks clusters of a centroid-masked head, but head_centroids is not "
                "set; set head_centroids or remove head_centroid_top_k",
                {"value": value},
            )
        if value is not None and centroids is not None and value > centroids:
            raise PydanticCustomError(
                "top_k_over_centroids",
                "head_centroid_top_k ({value}) exceeds head_centroids ({centroids}); use at most {centroids}",
                {"value": value, "centroids": centroids},
            )
        return value
