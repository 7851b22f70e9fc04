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
        arch = info.data.get("architecture")
        if value is not None and arch is not None and arch != "decoder":
            raise PydanticCustomError(
                "altup_needs_decoder",
                "altup_inputs ({value}) keeps a decoder's residual stream as parallel copies (Gemma 3n); "
                "architecture {arch} has none. Remove altup_inputs or use architecture decoder",
                {"value": value, "arch": arch},
            )
        return value

    @field_validator("laurel_rank", check_fields=False)
    @classmethod
    def _laurel_needs_pre_norm_decoder(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is None:
            return value
        arch = info.data.get("architecture")
        if arch is not None and arch != "decoder":
            raise PydanticCustomError(
                "laurel_needs_decoder",
                "laurel_rank ({value}) adds a low-rank residual beside a decoder's attention (Gemma 3n); "
                "architecture {arch} has none. Remove laurel_rank or use architecture decoder",
                {"value": value, "arch": arch},
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
