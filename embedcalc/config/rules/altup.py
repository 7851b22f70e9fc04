"""The rules of Gemma 3n's two residual-stream parts (``altup_inputs``, ``laurel_rank``; DESIGN.md §9).

:class:`AltUpRules` is a mixin of :class:`embedcalc.config.schema.ModelConfig`, which declares the fields (hence
``check_fields=False``); each rule is a field validator on the field at fault and names the fix. Both parts are
those of transformers 5.24's ``Gemma3nTextAltUp`` and ``Gemma3nTextLaurelBlock`` (``modeling_gemma3n.py``): AltUp
wraps every layer of the decoder, Laurel sits beside the self-attention of every layer that has attention and an
FFN (:func:`embedcalc.config.altup.has_laurel`).
"""

from __future__ import annotations

from pydantic import ValidationInfo, field_validator
from pydantic_core import PydanticCustomError


class AltUpRules:
    @field_validator("altup_inputs", check_fields=False)
    @classmethod
    def _altup_needs_decoder(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is not None:
            needs_decoder(
                info, "altup_inputs", value, "keeps a decoder's residual stream as parallel copies (Gemma 3n)"
            )
        return value

    @field_validator("laurel_rank", check_fields=False)
    @classmethod
    def _laurel_needs_pre_norm_decoder(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is None:
            return value
        needs_decoder(
            info, "laurel_rank", value, "adds a low-rank residual beside a decoder's attention (Gemma 3n)"
        )
        placement = info.data.get("norm_placement")
        if placement in ("post", "parallel"):
            raise PydanticCustomError(
                "laurel_needs_pre_norm",
                "laurel_rank ({value}) reads the attention's normalised input, which norm_placement {placement} "
                "does not give it; use norm_placement pre or sandwich (Gemma 3n), or remove laurel_rank",
                {"value": value, "placement": placement},
            )
        return value

    @field_validator("hyper_connections", check_fields=False)
    @classmethod
    def _hyper_needs_pre_norm_decoder(cls, value: int | None, info: ValidationInfo) -> int | None:
        """DeepSeek-V4's hyper-connections replace a pre-norm decoder's residual adds (``DeepseekV4DecoderLayer``);
        AltUp keeps copies of the stream its own way, so the two are not combined."""
        if value is None:
            return value
        needs_decoder(info, "hyper_connections", value, "keeps a decoder's residual stream as parallel streams "
                                                         "(DeepSeek-V4)")  # fmt: skip
        placement = info.data.get("norm_placement")
        if placement is not None and placement != "pre":
            raise PydanticCustomError(
                "hyper_needs_pre_norm",
                "hyper_connections ({value}) feeds each sublayer's norm the collapsed streams, as a pre-norm block "
                "does; norm_placement {placement} does not. Use norm_placement pre or remove hyper_connections",
                {"value": value, "placement": placement},
            )
        if info.data.get("altup_inputs") is not None:
            raise PydanticCustomError(
                "hyper_with_altup",
                "hyper_connections ({value}) and altup_inputs both keep copies of the residual stream; a model has "
                "one or the other. Remove one of them",
                {"value": value},
            )
        shared = [name for name, block in (info.data.get("blocks") or {}).items() if block.shared is not None]
        if shared:  # a shared block's output joins its mixer's input, not a residual that streams could carry
            raise PydanticCustomError(
                "hyper_with_shared",
                "hyper_connections ({value}) wraps each sublayer's residual, but blocks.{name}.shared feeds a "
                "shared block into its mixer's input (Zamba2), which no model combines with them; remove one of them",
                {"value": value, "name": shared[0]},
            )
        return value


def needs_decoder(info: ValidationInfo, field: str, value: int, what: str) -> None:
    """Refuse ``field`` (a part of a decoder's residual stream, doing ``what``) on an encoder or encoder-decoder."""
    arch = info.data.get("architecture")
    if arch is not None and arch != "decoder":
        raise PydanticCustomError(
            f"{field.split('_')[0]}_needs_decoder",
            "{field} ({value}) {what}; architecture {arch} has none. Remove {field} or use architecture decoder",
            {"field": field, "value": value, "what": what, "arch": arch},
        )
