"""The layer model's rules (DESIGN.md §9): the ``attention``, ``ffn``, ``blocks``, ``layers`` and
``shared_layers`` fields, whose specs come from :mod:`embedcalc.config.block_spec`, checked against the flat shape, and
those specs dumped as written.

:class:`LayerRules` is a mixin of :class:`embedcalc.config.schema.ModelConfig`, which declares the fields (hence
``check_fields=False``); like the flat rules (:mod:`embedcalc.config.rules.shape`) each is a field validator on the
field at fault. The checks of one spec against the flat shape are :mod:`embedcalc.config.rules.spec_checks`; the rules
here are those across the fields and across layers (blocks resolve, layers cover the stack, KV and index sharing).
"""

from __future__ import annotations

import difflib
from typing import Any

from pydantic import SerializationInfo, ValidationError, ValidationInfo, field_serializer, field_validator
from pydantic_core import PydanticCustomError

from embedcalc.config.block_spec import AttentionSpec, BlockSpec, LayerRun
from embedcalc.config.ffn_spec import FFNSpec, moe_missing
from embedcalc.config.mixer_spec import MixerSpec
from embedcalc.config.rules.shape import written_key
from embedcalc.config.rules.spec_checks import (
    check_attention,
    check_ffn_activation,
    check_mixer,
    check_shared,
)
from embedcalc.config.spec_shapes import DEFAULT_BLOCK, base_attention_spec, merge_spec


class LayerRules:
    """Validators of ``ModelConfig``'s layer-model fields and the serializer of its specs."""

    @field_serializer("attention", "ffn", "mixer", "blocks", check_fields=False)
    def _only_fields_set(self, value: Any, info: SerializationInfo) -> Any:
        """Specs are dumped with the fields they set only: a block variant overrides exactly those (merge_spec),
        so dumping its defaults too would change what a config means when it is read back."""
        if value is None:
            return None
        if isinstance(value, dict):
            return {name: spec.model_dump(mode=info.mode, exclude_unset=True) for name, spec in value.items()}
        return value.model_dump(mode=info.mode, exclude_unset=True)

    @field_validator("attention", check_fields=False)
    @classmethod
    def _attention_fits(cls, value: AttentionSpec | None, info: ValidationInfo) -> AttentionSpec | None:
        if value is not None:
            check_attention(value, info, "attention")
        return value

    @field_validator("ffn", check_fields=False)
    @classmethod
    def _ffn_fits(cls, value: FFNSpec | None, info: ValidationInfo) -> FFNSpec | None:
        if value is not None:
            check_ffn_activation(value, info, "ffn")
        return value

    @field_validator("mixer", check_fields=False)
    @classmethod
    def _mixer_fits(cls, value: MixerSpec | None, info: ValidationInfo) -> MixerSpec | None:
        if value is not None:
            check_mixer(value, info, "mixer")
        return value

    @field_validator("blocks", check_fields=False)
    @classmethod
    def _blocks_resolve(cls, value: dict[str, BlockSpec], info: ValidationInfo) -> dict[str, BlockSpec]:
        base_attention = base_attention_spec(
            info.data.get("sliding_window"), info.data.get("attention"), AttentionSpec
        )
        base_ffn = info.data.get("ffn") or FFNSpec()
        base_mixer = info.data.get("mixer") or MixerSpec()
        for name, block in value.items():
            if name == DEFAULT_BLOCK:
                raise PydanticCustomError(
                    "block_name_reserved",
                    "blocks.{name}: the name {name} means the flat fields' block; give the variant another name, or "
                    "change the default block through attention / ffn",
                    {"name": name},
                )
            try:
                attention = merge_spec(base_attention, block.attention)
                ffn = merge_spec(base_ffn, block.ffn)
                mixer = merge_spec(base_mixer, block.mixer)
            except ValidationError as exc:
                raise PydanticCustomError(
                    "block_invalid",
                    "blocks.{name}: {error}",
                    {"name": name, "error": exc.errors()[0]["msg"]},
                ) from None
            check_attention(attention, info, f"blocks.{name}.attention")
            check_mixer(mixer, info, f"blocks.{name}.mixer")
            check_ffn_activation(ffn, info, f"blocks.{name}.ffn")
            if block.shared is not None:
                check_shared(attention, ffn, mixer, info, f"blocks.{name}")
            missing = moe_missing(ffn)
            if missing:
                raise PydanticCustomError(
                    "moe_incomplete",
                    "blocks.{name}.ffn: kind moe needs {field}; add {field}:",
                    {"name": name, "field": missing},
                )
        return value

    @field_validator("layers", check_fields=False)
    @classmethod
    def _layers_cover_stack(cls, value: list[LayerRun] | None, info: ValidationInfo) -> list[LayerRun] | None:
        if value is None or "blocks" not in info.data or info.data.get("num_layers") is None:
            return value
        _runs_cover(value, info, "layers", info.data["num_layers"], written_key(info, "num_layers"))
        return value

    @field_validator("decoder_layout", check_fields=False)
    @classmethod
    def _decoder_layout_covers_decoder(
        cls, value: list[LayerRun] | None, info: ValidationInfo
    ) -> list[LayerRun] | None:
        """An encoder-decoder's decoder runs: known blocks adding up to num_decoder_layers (default num_layers),
        with the same KV- and index-sharing rules as ``layers``."""
        if (
            value is None
            or not {"blocks", "num_layers", "attention", "mixer", "sliding_window"} <= info.data.keys()
        ):
            return value
        if info.data.get("architecture") != "encoder-decoder":
            raise PydanticCustomError(
                "decoder_layout_needs_decoder_stack",
                "decoder_layout lays out an encoder-decoder's decoder layers, but architecture is {arch}; use "
                "layers for the stack or set architecture: encoder-decoder",
                {"arch": info.data.get("architecture")},
            )
        count = info.data.get("num_decoder_layers")
        key = (
            written_key(info, "num_decoder_layers") if count is not None else written_key(info, "num_layers")
        )
        _runs_cover(
            value, info, "decoder_layout", count if count is not None else info.data["num_layers"], key
        )
        names = [name for run in value for name in run.pattern]
        _check_index_sharing(names, info)
        _check_kv_sharing(names, info)
        return value

    @field_validator("layers", check_fields=False)
    @classmethod
    def _first_sparse_layer_indexes(
        cls, value: list[LayerRun] | None, info: ValidationInfo
    ) -> list[LayerRun] | None:
        """The first sparse layer of a stack must run its own indexer: ``index_shared`` reuses the selection of an
        earlier sparse layer with one (transformers' GLM-MoE-DSA passes ``prev_topk_indices`` down the stack), and
        the torch model has none to link to (``link_shared_selections``). Runs with the default ``layers`` too
        (the field has ``validate_default``): then every layer is the default block."""
        if not {"attention", "mixer", "blocks", "sliding_window", "num_layers"} <= info.data.keys():
            return value  # a field it reads failed already and was reported
        names = [name for run in value for name in run.pattern] if value is not None else [DEFAULT_BLOCK]
        stacks = [names]
        if (
            info.data.get("architecture") == "encoder-decoder"
        ):  # decoder_layout's runs are checked by its own rule
            stacks.append([DEFAULT_BLOCK])
        for stack in stacks:
            _check_index_sharing(stack, info)
            _check_kv_sharing(stack, info)
        return value

    @field_validator("context_tokens", check_fields=False)
    @classmethod
    def _context_read_by_cross(cls, value: int | None, info: ValidationInfo) -> int | None:
        """``context_tokens`` and cross-attention blocks come together: cross layers need the external sequence's
        length, and a length no layer reads would change no number."""
        if not {"attention", "blocks", "sliding_window"} <= info.data.keys():
            return value  # a field it reads failed already and was reported
        cross = _cross_blocks(info)
        if cross and value is None:
            raise PydanticCustomError(
                "context_tokens_missing",
                "{where}.cross attends to an external sequence, but context_tokens is not set; set "
                "context_tokens: its tokens per sequence (Llama-3.2-Vision: 6404 for one 560-pixel image in 4 "
                "tiles, ((560 / 14)^2 + 1) x 4)",
                {"where": cross[0]},
            )
        if not cross and value is not None:
            raise PydanticCustomError(
                "context_tokens_unused",
                "context_tokens ({value}) is the length of the sequence cross-attention blocks attend to, but no "
                "block sets attention.cross, so it would change nothing; remove context_tokens or add a block "
                "with attention: {{cross: true}}",
                {"value": value},
            )
        return value

    @field_validator("extra_token_rows", check_fields=False)
    @classmethod
    def _extra_rows_untied(cls, value: int, info: ValidationInfo) -> int:
        """A tied head would predict the extra rows too; MllamaForCausalLM's separate head has vocab_size rows."""
        if value and info.data.get("tie_embeddings"):
            raise PydanticCustomError(
                "extra_rows_tied",
                "extra_token_rows ({value}) are token-table rows the LM head does not predict, but "
                "tie_embeddings is true, so the head would be that table; set tie_embeddings: false or "
                "extra_token_rows: 0",
                {"value": value},
            )
        return value

    @field_validator("decoder_token_table", check_fields=False)
    @classmethod
    def _decoder_table_needs_decoder_stack(cls, value: bool, info: ValidationInfo) -> bool:
        if value and info.data.get("architecture") != "encoder-decoder":
            raise PydanticCustomError(
                "decoder_table_needs_decoder_stack",
                "decoder_token_table gives an encoder-decoder's decoder its own token table, but architecture is "
                "{arch}; set decoder_token_table: false",
                {"arch": info.data.get("architecture")},
            )
        return value

    @field_validator("shared_layers", check_fields=False)
    @classmethod
    def _sharing_needs_one_block(cls, value: bool, info: ValidationInfo) -> bool:
        runs = info.data.get("layers") or []
        names = {name for run in runs for name in run.pattern}
        if value and len(names) > 1:
            raise PydanticCustomError(
                "shared_layers_mixed",
                "shared_layers shares one set of layer weights across depth, but layers mixes blocks {names}; "
                "use one block or set shared_layers: false",
                {"names": ", ".join(sorted(names))},
            )
        return value


def _cross_blocks(info: ValidationInfo) -> list[str]:
    """Where attention.cross is set, as error paths: ``attention`` (the default block) and ``blocks.NAME.attention``."""
    base = base_attention_spec(info.data["sliding_window"], info.data["attention"], AttentionSpec)
    out = ["attention"] if base.cross else []
    for name, block in info.data["blocks"].items():
        if merge_spec(base, block.attention).cross:
            out.append(f"blocks.{name}.attention")
    return out


def _check_index_sharing(names: list[str], info: ValidationInfo) -> None:
    """Refuse a stack (its block names in layer order) whose first sparse layer has ``index_shared``."""
    base_attention = base_attention_spec(info.data["sliding_window"], info.data["attention"], AttentionSpec)
    base_mixer = info.data["mixer"] or MixerSpec()
    blocks: dict[str, BlockSpec] = info.data["blocks"]
    for index, name in enumerate(names):
        spec = blocks.get(name)
        mixer = merge_spec(base_mixer, spec.mixer if spec is not None else None)
        attention = merge_spec(base_attention, spec.attention if spec is not None else None)
        if mixer.kind != "attention" or attention.kind != "sparse":
            continue
        if not attention.index_shared:
            return
        where = "attention" if name == DEFAULT_BLOCK else f"blocks.{name}.attention"
        raise PydanticCustomError(
            "index_shared_first",
            "{where}.index_shared: layer {index} (block {name}) is the first sparse layer of its stack, so there "
            "is no earlier indexer whose top-k selection it can reuse (GLM-5 shares a selection only after a "
            "layer that computes one); set index_shared: false there, or put a sparse block with its own indexer "
            "before it in layers",
            {"where": where, "index": index, "name": name},
        )


def _check_kv_sharing(names: list[str], info: ValidationInfo) -> None:
    """Refuse a stack (its block names in layer order) whose layer with ``kv_shared`` has no earlier layer of its
    window and head shape computing its own keys and values to reuse (Gemma 3n/4 share the last layer of the same
    layer type before the shared ones; transformers refuses a layer type with no such producer)."""
    base_attention = base_attention_spec(info.data["sliding_window"], info.data["attention"], AttentionSpec)
    base_mixer = info.data["mixer"] or MixerSpec()
    blocks: dict[str, BlockSpec] = info.data["blocks"]
    producers: set[tuple[object, ...]] = set()
    for index, name in enumerate(names):
        spec = blocks.get(name)
        mixer = merge_spec(base_mixer, spec.mixer if spec is not None else None)
        attention = merge_spec(base_attention, spec.attention if spec is not None else None)
        if mixer.kind != "attention" and not mixer.parallel_attention:
            continue
        shape = (attention.sliding_window, attention.chunk_size, attention.head_dim, attention.num_kv_heads)
        if attention.kv_external:  # another model's keys: neither a producer nor a reuser here
            continue
        if not attention.kv_shared:
            producers.add(shape)
        elif shape not in producers:
            where = "attention" if name == DEFAULT_BLOCK else f"blocks.{name}.attention"
            raise PydanticCustomError(
                "kv_shared_first",
                "{where}.kv_shared: layer {index} (block {name}) reuses the keys and values of an earlier layer "
                "with the same window and head shape, but none before it computes its own; set kv_shared: false "
                "there, or put a block of that shape without kv_shared before it in layers",
                {"where": where, "index": index, "name": name},
            )


def _runs_cover(
    value: list[LayerRun], info: ValidationInfo, field: str, expected: int, layers_key: str
) -> None:
    """``field``'s runs name known blocks and add up to ``expected`` layers (``layers_key``'s value)."""
    known = [DEFAULT_BLOCK, *info.data["blocks"]]
    for run in value:
        for name in run.pattern:
            if name not in known:
                close = difflib.get_close_matches(name, known, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise PydanticCustomError(
                    "unknown_block",
                    "{field} names block '{name}'{hint}, which blocks does not define; known: {known}",
                    {"field": field, "name": name, "hint": hint, "known": ", ".join(known)},
                )
    total = sum(run.num_layers for run in value)
    if total != expected:
        raise PydanticCustomError(
            "layers_mismatch",
            "{field} add up to {total} layers but {layers_key} is {expected}; {fix}",
            {
                "field": field,
                "total": total,
                "expected": expected,
                "layers_key": layers_key,
                "fix": (
                    f"add a run of {expected - total} more layers"
                    if total < expected
                    else f"remove {total - expected} layers from the runs"
                )
                + f" or set {layers_key}: {total}",
            },
        )
