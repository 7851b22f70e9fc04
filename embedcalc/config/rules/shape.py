"""The cross-field rules of the flat shape fields (DESIGN.md §3): architecture and depth, positions, heads,
embeddings, norms and the LM head.

:class:`ShapeRules` is a mixin of :class:`embedcalc.config.schema.ModelConfig`, which declares the fields (hence
``check_fields=False``). Each rule is a field validator on the field at fault, so the error path names it, and it
sees only the fields declared before its own. Messages name the key the user wrote (:func:`written_key`) and give
both values. The rules of the layer model (attention, ffn, blocks, layers) are in
:mod:`embedcalc.config.rules.layers`.
"""

from __future__ import annotations

from pydantic import ValidationInfo, field_validator
from pydantic_core import PydanticCustomError


def written_key(info: ValidationInfo, field: str) -> str:
    """The key the user wrote for ``field`` (an alias such as ``n_head``), from the validation context."""
    keys = (info.context or {}).get("keys", {})
    return str(keys.get(field, field))


def _options(key: str, values: list[int]) -> str:
    """Alternatives the user can paste: ``--set num_heads=8 or --set num_heads=12`` for an override, else
    ``num_heads 8 or 12``."""
    if key.startswith("--set "):
        return " or ".join(f"{key}={v}" for v in values)
    return f"{key} {_fmt_list(values)}"


def _fmt_list(values: list[int]) -> str:
    return " or ".join(str(v) for v in values)


class ShapeRules:
    """Validators of ``ModelConfig``'s flat fields that span fields, each on the field at fault."""

    @field_validator("num_decoder_layers", check_fields=False)
    @classmethod
    def _decoder_layers_need_encoder_decoder(cls, value: int | None, info: ValidationInfo) -> int | None:
        arch = info.data.get("architecture")
        if value is not None and arch is not None and arch != "encoder-decoder":
            raise PydanticCustomError(
                "decoder_layers_need_encoder_decoder",
                "{key} ({value}) only applies to architecture encoder-decoder, not {arch}; use {layers} instead",
                {
                    "key": written_key(info, "num_decoder_layers"),
                    "value": value,
                    "arch": arch,
                    "layers": written_key(info, "num_layers"),
                },
            )
        return value

    @field_validator("per_layer_input_dim", check_fields=False)
    @classmethod
    def _per_layer_needs_decoder(cls, value: int | None, info: ValidationInfo) -> int | None:
        arch = info.data.get("architecture")
        if value is not None and arch != "decoder":
            raise PydanticCustomError(
                "per_layer_needs_decoder",
                "per_layer_input_dim ({value}) gives each layer of a decoder its own input (Gemma 3n / Gemma 4); "
                "architecture {arch} has none. Remove per_layer_input_dim or use architecture decoder",
                {"value": value, "arch": arch},
            )
        return value

    @field_validator("per_layer_vocab_size", check_fields=False)
    @classmethod
    def _per_layer_vocab_needs_inputs(cls, value: int | None, info: ValidationInfo) -> int | None:
        if (
            value is not None
            and info.data.get("per_layer_input_dim") is None
            and "per_layer_input_dim" in info.data
        ):
            raise PydanticCustomError(
                "per_layer_vocab_without_inputs",
                "per_layer_vocab_size ({value}) sizes the per-layer token table, but per_layer_input_dim is not "
                "set, so there is none; set per_layer_input_dim (Gemma 4 E2B: 256) or remove per_layer_vocab_size",
                {"value": value},
            )
        return value

    @field_validator("position_offset", check_fields=False)
    @classmethod
    def _offset_needs_learned(cls, value: int, info: ValidationInfo) -> int:
        position = info.data.get("position")
        if value and position is not None and position != "learned":
            raise PydanticCustomError(
                "offset_needs_learned",
                "{key} ({value}) shifts rows of a learned position table, but position is {position}; "
                "set {key}: 0 or position: learned",
                {"key": written_key(info, "position_offset"), "value": value, "position": position},
            )
        return value

    @field_validator("relative_attention_bias", check_fields=False)
    @classmethod
    def _relative_needs_its_bias(cls, value: bool | None, info: ValidationInfo) -> bool | None:
        if value is False and info.data.get("position") == "relative":
            raise PydanticCustomError(
                "relative_needs_bias",
                "{key} (false) removes the only position information of position relative; set {key}: true, or "
                "position: none for a model without positions",
                {"key": written_key(info, "relative_attention_bias")},
            )
        return value

    @field_validator("relative_bias_per_layer", check_fields=False)
    @classmethod
    def _per_layer_bias_needs_the_bias(cls, value: bool, info: ValidationInfo) -> bool:
        explicit, position = info.data.get("relative_attention_bias"), info.data.get("position")
        has_bias = explicit if explicit is not None else position == "relative"
        if value and not has_bias:
            raise PydanticCustomError(
                "per_layer_bias_without_bias",
                "{key} (true) puts the relative position bias table in every layer, but the model has none "
                "(position {position}, relative_attention_bias {explicit}); set position: relative (T5, UMT5) or "
                "remove {key}",
                {
                    "key": written_key(info, "relative_bias_per_layer"),
                    "position": position,
                    "explicit": explicit,
                },
            )
        return value

    @field_validator("disentangled", check_fields=False)
    @classmethod
    def _disentangled_needs_encoder(cls, value: object, info: ValidationInfo) -> object:
        arch, kv, heads = (
            info.data.get("architecture"),
            info.data.get("num_kv_heads"),
            info.data.get("num_heads"),
        )
        spec = info.data.get("attention")
        reason = None
        if arch is not None and arch != "encoder":
            reason = f"it is modelled for encoders (DeBERTa), not {arch}"
        elif kv is not None and heads is not None and kv != heads:
            reason = f"its position keys have a head per query head: num_kv_heads ({kv}) must be num_heads ({heads})"
        elif spec is not None and getattr(spec, "kind", "standard") != "standard":
            reason = "it extends standard attention, not latent attention"
        elif info.data.get("blocks"):
            reason = "every layer must be the default block (no blocks)"
        if value is not None and reason is not None:
            raise PydanticCustomError(
                "disentangled_unsupported",
                "{key}: disentangled attention cannot be used here: {reason}; remove {key} or change the model",
                {"key": written_key(info, "disentangled"), "reason": reason},
            )
        return value

    @field_validator("head_dim", check_fields=False)
    @classmethod
    def _head_dim_even_for_rope(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is not None and value % 2 and info.data.get("position") == "rope":
            raise PydanticCustomError(
                "rope_head_dim_odd",
                "{key} ({value}) must be even for position rope, which rotates channel pairs; use {lo} or {hi}",
                {"key": written_key(info, "head_dim"), "value": value, "lo": value - 1, "hi": value + 1},
            )
        return value

    @field_validator("num_heads", check_fields=False)
    @classmethod
    def _heads_divide_embed_dim(cls, value: int, info: ValidationInfo) -> int:
        embed_dim = info.data.get("embed_dim")
        if embed_dim is None or "head_dim" not in info.data:
            return value  # embed_dim or head_dim is itself invalid and reported on its own
        if info.data["head_dim"] is not None:
            return value
        if embed_dim % value:
            from embedcalc.config.divisors import (  # on a refusal (start-up)
                nearest_divisible,
                nearest_valid_heads,
            )

            below, above = nearest_divisible(embed_dim, value)
            dims = [d for d in (below, above) if d > 0]
            heads = nearest_valid_heads(embed_dim, value)
            raise PydanticCustomError(
                "heads_indivisible",
                "{key} ({value}) must divide {dim_key} ({dim}): head_dim would be {hd}. Use {use_heads} "
                "(head_dim {hds}), or {use_dims} to keep {value} heads, or set head_dim explicitly",
                {
                    "key": written_key(info, "num_heads"),
                    "value": value,
                    "dim_key": written_key(info, "embed_dim"),
                    "dim": embed_dim,
                    "hd": f"{embed_dim / value:.2f}",
                    "heads": _fmt_list(heads),
                    "hds": _fmt_list([embed_dim // h for h in heads]),
                    "dims": _fmt_list(dims),
                    "use_heads": _options(written_key(info, "num_heads"), heads),
                    "use_dims": _options(written_key(info, "embed_dim"), dims),
                    "nearest_heads": heads,
                    "nearest_embed_dims": dims,
                },
            )
        head_dim = embed_dim // value
        if head_dim % 2 and info.data.get("position") == "rope":
            raise PydanticCustomError(
                "rope_head_dim_odd",
                "head_dim = {dim_key} / {key} = {dim} / {value} = {hd} must be even for position rope, which "
                "rotates channel pairs; choose {key} so that the quotient is even, or set head_dim explicitly",
                {
                    "key": written_key(info, "num_heads"),
                    "value": value,
                    "dim_key": written_key(info, "embed_dim"),
                    "dim": embed_dim,
                    "hd": head_dim,
                },
            )
        return value

    @field_validator("num_kv_heads", check_fields=False)
    @classmethod
    def _kv_heads_divide_heads(cls, value: int | None, info: ValidationInfo) -> int | None:
        heads = info.data.get("num_heads")
        if value is None or heads is None:
            return value
        if heads % value:
            from embedcalc.config.divisors import divisors, nearest_divisors  # on a refusal only (start-up)

            nearest = nearest_divisors(heads, value)
            valid = ", ".join(map(str, divisors(heads))) if heads <= 10**6 else "any divisor"
            raise PydanticCustomError(
                "kv_heads_indivisible",
                "{key} ({value}) must divide {heads_key} ({heads}) so that each key/value head serves a whole "
                "group of query heads; use {use} (valid: {valid})",
                {
                    "key": written_key(info, "num_kv_heads"),
                    "value": value,
                    "heads_key": written_key(info, "num_heads"),
                    "heads": heads,
                    "nearest": _fmt_list(nearest),
                    "use": _options(written_key(info, "num_kv_heads"), nearest),
                    "valid": valid,
                },
            )
        return value

    @field_validator("pooler", check_fields=False)
    @classmethod
    def _pooler_needs_encoder(cls, value: bool | None, info: ValidationInfo) -> bool | None:
        arch = info.data.get("architecture")
        if value and arch is not None and arch != "encoder":
            raise PydanticCustomError(
                "pooler_needs_encoder",
                "{key} is only built for architecture encoder (BERT), not {arch}; set {key}: false",
                {"key": written_key(info, "pooler"), "arch": arch},
            )
        return value

    @field_validator("sliding_window", check_fields=False)
    @classmethod
    def _window_needs_causal_stack(cls, value: int | None, info: ValidationInfo) -> int | None:
        arch = info.data.get("architecture")
        if value is not None and arch == "encoder":
            raise PydanticCustomError(
                "window_needs_decoder",
                "{key} ({value}) limits causal self-attention and its KV cache; architecture encoder has none. "
                "Remove {key}",
                {"key": written_key(info, "sliding_window"), "value": value},
            )
        return value

    @field_validator("factorized_embeddings", check_fields=False)
    @classmethod
    def _factorized_needs_width(cls, value: bool, info: ValidationInfo) -> bool:
        if value and info.data.get("token_embed_dim") is None:
            raise PydanticCustomError(
                "factorized_needs_token_embed_dim",
                "{key} needs token_embed_dim, the narrow width of the embedding tables (ALBERT: 128); add "
                "token_embed_dim or set {key}: false",
                {"key": written_key(info, "factorized_embeddings")},
            )
        return value

    @field_validator("parallel_norms", check_fields=False)
    @classmethod
    def _parallel_norms_need_parallel(cls, value: int, info: ValidationInfo) -> int:
        placement = info.data.get("norm_placement")
        if value != 1 and placement != "parallel":
            raise PydanticCustomError(
                "parallel_norms_need_parallel",
                "{key} ({value}) only applies to norm_placement parallel, not {placement}; set norm_placement: "
                "parallel or remove {key}",
                {
                    "key": written_key(info, "parallel_norms"),
                    "value": value,
                    "placement": placement or "the default",
                },
            )
        return value

    @field_validator("lm_head_bias", check_fields=False)
    @classmethod
    def _bias_needs_head(cls, value: bool, info: ValidationInfo) -> bool:
        head = info.data.get("lm_head")
        if head is None:
            head = info.data.get("architecture") not in (None, "encoder")
        if value and not head:
            raise PydanticCustomError(
                "lm_head_bias_needs_head",
                "{key} adds a bias to an LM head, but this config has none; set lm_head: true or {key}: false",
                {"key": written_key(info, "lm_head_bias")},
            )
        return value

    @field_validator("rope_scale", check_fields=False)
    @classmethod
    def _rope_scale_needs_rope(cls, value: bool, info: ValidationInfo) -> bool:
        if value and (info.data.get("position") != "rope" or info.data.get("architecture") != "decoder"):
            raise PydanticCustomError(
                "rope_scale_needs_rope",
                "{key} scales a decoder's rotary frequencies, but position is {position} and architecture "
                "{arch}; use position: rope in a decoder, or remove {key}",
                {
                    "key": written_key(info, "rope_scale"),
                    "position": info.data.get("position"),
                    "arch": info.data.get("architecture"),
                },
            )
        return value

    @field_validator("rotary_dim", check_fields=False)
    @classmethod
    def _rotary_dim_fits(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is None:
            return value
        key = written_key(info, "rotary_dim")
        if info.data.get("position") != "rope":
            raise PydanticCustomError(
                "rotary_dim_needs_rope",
                "{key} ({value}) sets partial rotary positions, but position is {position}; set position: rope "
                "or remove {key}",
                {"key": key, "value": value, "position": info.data.get("position")},
            )
        head_dim = _head_dim(info)
        if value % 2 or (head_dim is not None and value > head_dim):
            raise PydanticCustomError(
                "rotary_dim_invalid",
                "{key} ({value}) must be even and at most head_dim ({head_dim}), rotary positions rotate channel "
                "pairs of each head; use {fix}",
                {
                    "key": key,
                    "value": value,
                    "head_dim": head_dim,
                    "fix": min(value - value % 2, head_dim - head_dim % 2) if head_dim else value - value % 2,
                },
            )
        return value


def _head_dim(info: ValidationInfo) -> int | None:
    """head_dim as the config will resolve it, from the fields validated so far (None if they are invalid)."""
    if info.data.get("head_dim") is not None:
        return int(info.data["head_dim"])
    embed_dim, heads = info.data.get("embed_dim"), info.data.get("num_heads")
    if embed_dim is None or heads is None or embed_dim % heads:
        return None
    return int(embed_dim // heads)
