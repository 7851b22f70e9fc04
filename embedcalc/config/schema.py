"""The config schema (DESIGN.md §3): one frozen pydantic model for encoders, decoders and encoder-decoders.

Per-field bounds live on the fields; rules that span fields are field validators on the field at fault, so the
error path names it. Fields are declared in the order those validators need (a validator sees only fields declared
before its own). Defaults that depend on the architecture are ``None`` here and resolved by the ``resolved_*``
properties, so a config round-trips exactly as written.
"""

from __future__ import annotations

import difflib
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializationInfo,
    ValidationError,
    ValidationInfo,
    field_serializer,
    field_validator,
)
from pydantic_core import PydanticCustomError

from embedcalc.config.blocks import (
    DEFAULT_BLOCK,
    MLA_FIELDS,
    AttentionSpec,
    BlockSpec,
    FFNSpec,
    LayerRun,
    base_attention_spec,
    merge_spec,
    moe_missing,
)
from embedcalc.config.divisors import divisors, nearest_divisible, nearest_divisors, nearest_valid_heads
from embedcalc.config.resolved import (
    Activation,
    Architecture,
    Norm,
    NormPlacement,
    Position,
    ResolvedShape,
)  # fmt: skip

PositiveInt = Annotated[int, Field(strict=True, gt=0)]
NonNegativeInt = Annotated[int, Field(strict=True, ge=0)]


def _key(info: ValidationInfo, field: str) -> str:
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


class ModelConfig(ResolvedShape, BaseModel):
    """A Transformer's shape: everything that decides its parameters, FLOPs and memory."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    name: str | None = Field(default=None, description="A label for tables and JSON output.")
    architecture: Architecture = Field(
        description="encoder (BERT), decoder (GPT, causal) or encoder-decoder (the original Transformer, T5)."
    )
    vocab_size: PositiveInt = Field(
        description="Number of tokens in the vocabulary (rows of the token embedding)."
    )
    max_seq_len: PositiveInt = Field(
        description="Context the model is built for; the size of the learned position table when position=learned."
    )
    embed_dim: PositiveInt = Field(description="Width of every token vector (d_model, hidden_size, n_embd).")
    token_embed_dim: PositiveInt | None = Field(
        default=None,
        description=(
            "Width of the token embedding table when it differs from embed_dim (OPT-350m's word_embed_proj_dim): "
            "the table is vocab_size x token_embed_dim, a bias-free projection token_embed_dim -> embed_dim follows "
            "the lookup (embedding/project_in) and one embed_dim -> token_embed_dim precedes the LM head "
            "(head/project_out). Default embed_dim: no projections."
        ),
    )
    factorized_embeddings: bool = Field(
        default=False,
        description=(
            "ALBERT / ELECTRA-small factorised embeddings: the position and segment tables and the embedding "
            "norm are token_embed_dim wide too, and one projection token_embed_dim -> embed_dim follows the "
            "embedding norm (embedding/project_in). Needs token_embed_dim."
        ),
    )
    embedding_projection_bias: bool = Field(
        default=False,
        description="embedding/project_in has a bias (ALBERT, ELECTRA-small: true; OPT-350m: false).",
    )
    scale_embeddings: bool = Field(
        default=False,
        description="Token embeddings are multiplied by sqrt(embed_dim) (Gemma); no parameters, no matmul FLOPs.",
    )
    num_layers: PositiveInt = Field(
        description="Transformer blocks in the stack; for encoder-decoder, the encoder's blocks."
    )
    num_decoder_layers: PositiveInt | None = Field(
        default=None,
        description="Decoder blocks of an encoder-decoder; default num_layers. Encoder-decoder only.",
    )
    position: Position = Field(
        default="learned",
        description=(
            "Position encoding: learned table (BERT, GPT-2), fixed sinusoidal (Vaswani 2017), rope (rotary, "
            "LLaMA), relative (T5 bucketed bias, first layer of each stack), alibi (linear biases per head, "
            "BLOOM, MPT; no parameters) or none."
        ),
    )
    position_offset: NonNegativeInt = Field(
        default=0,
        description=(
            "Rows of the learned position table before position 0 (OPT: 2; RoBERTa: padding_idx + 1 = 2), so "
            "the table has max_seq_len + position_offset rows. position=learned only."
        ),
    )
    head_dim: PositiveInt | None = Field(
        default=None,
        description=(
            "Width of one attention head; default embed_dim / num_heads. When given, num_heads * head_dim may "
            "differ from embed_dim (T5-style)."
        ),
    )
    num_heads: PositiveInt = Field(
        description="Query heads per attention layer (nhead, num_attention_heads)."
    )
    num_kv_heads: PositiveInt | None = Field(
        default=None,
        description="Key/value heads; default num_heads. Fewer is grouped-query attention (GQA), 1 is multi-query.",
    )
    ffn_dim: PositiveInt | None = Field(
        default=None,
        description=(
            "Inner width of the feed-forward block; default 4 * embed_dim. Gated activations (swiglu, geglu) use "
            "three embed_dim x ffn_dim matrices."
        ),
    )
    activation: Activation = Field(default="gelu", description="FFN activation; swiglu and geglu are gated.")
    norm: Norm = Field(
        default="layernorm", description="layernorm (weight and bias) or rmsnorm (weight only)."
    )
    norm_bias: bool = Field(
        default=True,
        description=(
            "LayerNorm has a bias (shift) besides its weight; false for bias-free LayerNorm. No effect on rmsnorm."
        ),
    )
    norm_affine: bool = Field(
        default=True,
        description="Norms have a learned weight (and bias); false for parameter-free norms (OLMo 1).",
    )
    norm_placement: NormPlacement | None = Field(
        default=None,
        description=(
            "post: norm after each residual add (original Transformer, BERT). pre: norm before each sublayer and a "
            "final norm at the end of each stack (GPT-2, LLaMA). sandwich: norms before and after each sublayer "
            "(Gemma 2/3). parallel: attention and FFN read the same normalised input and add to one residual "
            "(GPT-J, GPT-NeoX, Falcon, phi-2, Cohere), see parallel_norms. Default post, pre for decoders."
        ),
    )
    parallel_norms: int = Field(
        default=1,
        strict=True,
        ge=1,
        le=2,
        description=(
            "norm_placement parallel: 1 shared input norm (GPT-J, phi-2, Falcon-7B) or 2, one per branch "
            "(GPT-NeoX, Falcon-40B's new decoder architecture)."
        ),
    )
    final_norm: bool | None = Field(
        default=None,
        description=(
            "A norm at the end of each stack. Default true for pre-norm stacks, false for post-norm (OPT "
            "checkpoints with _remove_final_layer_norm have pre-norm blocks and no final norm)."
        ),
    )
    embedding_norm: bool | None = Field(
        default=None,
        description="A norm right after the embeddings (BERT has one). Default true for encoders, else false.",
    )
    type_vocab_size: NonNegativeInt = Field(
        default=0, description="Rows of the segment (token type) embedding, BERT uses 2; 0 for none."
    )
    bias: bool = Field(default=True, description="Biases in the linear layers (attention, FFN, pooler).")
    qkv_bias: bool | None = Field(
        default=None,
        description="Biases on the query, key and value projections; default bias (Qwen2: true with bias false).",
    )
    out_bias: bool | None = Field(
        default=None, description="Bias on the attention output projection; default bias (Qwen2: false)."
    )
    ffn_bias: bool | None = Field(
        default=None,
        description="Biases on the FFN projections (up, gate, down); default bias (LLaMA's mlp_bias).",
    )
    tie_embeddings: bool = Field(
        default=True,
        description=(
            "The LM head reuses the token embedding (no extra parameters). Encoder-decoders always share one "
            "token table between encoder and decoder."
        ),
    )
    pooler: bool | None = Field(
        default=None,
        description="BERT pooler (dense + tanh on the first token). Encoder only; default true for encoders.",
    )
    lm_head: bool | None = Field(
        default=None,
        description="Output projection to the vocabulary on every position. Default false for encoders, else true.",
    )
    lm_head_bias: bool = Field(
        default=False,
        description="The LM head has a vocab_size bias (phi-2, GPT-J), counted as head/lm_bias even when tied.",
    )
    relative_attention_num_buckets: PositiveInt = Field(
        default=32,
        description="Buckets of the relative position bias (position=relative): buckets x num_heads parameters.",
    )
    relative_attention_max_distance: PositiveInt = Field(
        default=128,
        description=(
            "Distance from which relative positions share the last bucket (T5, position=relative); changes which "
            "bucket a distance falls in, never a count."
        ),
    )
    sliding_window: PositiveInt | None = Field(
        default=None,
        description=(
            "Causal self-attention sees only the last sliding_window tokens (Mistral 7B v0.1: 4096), so the KV "
            "cache holds at most that many tokens per sequence. FLOPs still count the full n x n scores that eager "
            "attention computes and masks; the causal count skips the masked pairs. Not for encoders."
        ),
    )
    rotary_dim: PositiveInt | None = Field(
        default=None,
        description=(
            "Partial rotary (GPT-J, GPT-NeoX, phi-2): rotary positions on the first rotary_dim channels of each "
            "head only; even, at most head_dim. Default: all of head_dim. No parameters."
        ),
    )
    attention: AttentionSpec | None = Field(
        default=None,
        description=(
            "The default block's attention beyond the flat head counts: kind (standard, mla), q/k norms, sinks, "
            "window, chunk. Default: standard attention with the flat fields."
        ),
    )
    ffn: FFNSpec | None = Field(
        default=None,
        description="The default block's FFN: dense (the flat ffn_dim) or a mixture of experts. Default dense.",
    )
    blocks: dict[str, BlockSpec] = Field(
        default_factory=dict,
        description=(
            "Named variants of the default block (each overrides only the attention / FFN fields it sets), "
            "laid out over depth by layers."
        ),
    )
    layers: list[LayerRun] | None = Field(
        default=None,
        description=(
            "The layers of the stack (the encoder of an encoder-decoder) as runs of block names, "
            "[{pattern: [local, global], repeat: 4}]; they must add up to num_layers. Default: every layer is "
            "the default block."
        ),
    )
    shared_layers: bool = Field(
        default=False,
        description=(
            "One set of layer weights shared across the depth of each stack (ALBERT): parameters counted once, "
            "FLOPs and activations per layer."
        ),
    )
    dropout: float = Field(default=0.1, ge=0.0, lt=1.0, description="Dropout probability; no effect on cost.")

    # --- cross-field rules, each on the field at fault ---------------------------------------------------------

    @field_validator("num_decoder_layers")
    @classmethod
    def _decoder_layers_need_encoder_decoder(cls, value: int | None, info: ValidationInfo) -> int | None:
        arch = info.data.get("architecture")
        if value is not None and arch is not None and arch != "encoder-decoder":
            raise PydanticCustomError(
                "decoder_layers_need_encoder_decoder",
                "{key} ({value}) only applies to architecture encoder-decoder, not {arch}; use {layers} instead",
                {
                    "key": _key(info, "num_decoder_layers"),
                    "value": value,
                    "arch": arch,
                    "layers": _key(info, "num_layers"),
                },
            )
        return value

    @field_validator("position_offset")
    @classmethod
    def _offset_needs_learned(cls, value: int, info: ValidationInfo) -> int:
        position = info.data.get("position")
        if value and position is not None and position != "learned":
            raise PydanticCustomError(
                "offset_needs_learned",
                "{key} ({value}) shifts rows of a learned position table, but position is {position}; "
                "set {key}: 0 or position: learned",
                {"key": _key(info, "position_offset"), "value": value, "position": position},
            )
        return value

    @field_validator("head_dim")
    @classmethod
    def _head_dim_even_for_rope(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is not None and value % 2 and info.data.get("position") == "rope":
            raise PydanticCustomError(
                "rope_head_dim_odd",
                "{key} ({value}) must be even for position rope, which rotates channel pairs; use {lo} or {hi}",
                {"key": _key(info, "head_dim"), "value": value, "lo": value - 1, "hi": value + 1},
            )
        return value

    @field_validator("num_heads")
    @classmethod
    def _heads_divide_embed_dim(cls, value: int, info: ValidationInfo) -> int:
        embed_dim = info.data.get("embed_dim")
        if embed_dim is None or "head_dim" not in info.data:
            return value  # embed_dim or head_dim is itself invalid and reported on its own
        if info.data["head_dim"] is not None:
            return value
        if embed_dim % value:
            below, above = nearest_divisible(embed_dim, value)
            dims = [d for d in (below, above) if d > 0]
            heads = nearest_valid_heads(embed_dim, value)
            raise PydanticCustomError(
                "heads_indivisible",
                "{key} ({value}) must divide {dim_key} ({dim}): head_dim would be {hd}. Use {use_heads} "
                "(head_dim {hds}), or {use_dims} to keep {value} heads, or set head_dim explicitly",
                {
                    "key": _key(info, "num_heads"),
                    "value": value,
                    "dim_key": _key(info, "embed_dim"),
                    "dim": embed_dim,
                    "hd": f"{embed_dim / value:.2f}",
                    "heads": _fmt_list(heads),
                    "hds": _fmt_list([embed_dim // h for h in heads]),
                    "dims": _fmt_list(dims),
                    "use_heads": _options(_key(info, "num_heads"), heads),
                    "use_dims": _options(_key(info, "embed_dim"), dims),
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
                    "key": _key(info, "num_heads"),
                    "value": value,
                    "dim_key": _key(info, "embed_dim"),
                    "dim": embed_dim,
                    "hd": head_dim,
                },
            )
        return value

    @field_validator("num_kv_heads")
    @classmethod
    def _kv_heads_divide_heads(cls, value: int | None, info: ValidationInfo) -> int | None:
        heads = info.data.get("num_heads")
        if value is None or heads is None:
            return value
        if heads % value:
            nearest = nearest_divisors(heads, value)
            valid = ", ".join(map(str, divisors(heads))) if heads <= 10**6 else "any divisor"
            raise PydanticCustomError(
                "kv_heads_indivisible",
                "{key} ({value}) must divide {heads_key} ({heads}) so that each key/value head serves a whole "
                "group of query heads; use {use} (valid: {valid})",
                {
                    "key": _key(info, "num_kv_heads"),
                    "value": value,
                    "heads_key": _key(info, "num_heads"),
                    "heads": heads,
                    "nearest": _fmt_list(nearest),
                    "use": _options(_key(info, "num_kv_heads"), nearest),
                    "valid": valid,
                },
            )
        return value

    @field_validator("pooler")
    @classmethod
    def _pooler_needs_encoder(cls, value: bool | None, info: ValidationInfo) -> bool | None:
        arch = info.data.get("architecture")
        if value and arch is not None and arch != "encoder":
            raise PydanticCustomError(
                "pooler_needs_encoder",
                "{key} is only built for architecture encoder (BERT), not {arch}; set {key}: false",
                {"key": _key(info, "pooler"), "arch": arch},
            )
        return value

    @field_validator("sliding_window")
    @classmethod
    def _window_needs_causal_stack(cls, value: int | None, info: ValidationInfo) -> int | None:
        arch = info.data.get("architecture")
        if value is not None and arch == "encoder":
            raise PydanticCustomError(
                "window_needs_decoder",
                "{key} ({value}) limits causal self-attention and its KV cache; architecture encoder has none. "
                "Remove {key}",
                {"key": _key(info, "sliding_window"), "value": value},
            )
        return value


    # --- layers as data (DESIGN.md §9) --------------------------------------------------------------------------

    @field_serializer("attention", "ffn", "blocks")
    def _only_fields_set(self, value: Any, info: SerializationInfo) -> Any:
        """Specs are dumped with the fields they set only: a block variant overrides exactly those (merge_spec),
        so dumping its defaults too would change what a config means when it is read back."""
        if value is None:
            return None
        if isinstance(value, dict):
            return {name: spec.model_dump(mode=info.mode, exclude_unset=True) for name, spec in value.items()}
        return value.model_dump(mode=info.mode, exclude_unset=True)

    @field_validator("factorized_embeddings")
    @classmethod
    def _factorized_needs_width(cls, value: bool, info: ValidationInfo) -> bool:
        if value and info.data.get("token_embed_dim") is None:
            raise PydanticCustomError(
                "factorized_needs_token_embed_dim",
                "{key} needs token_embed_dim, the narrow width of the embedding tables (ALBERT: 128); add "
                "token_embed_dim or set {key}: false",
                {"key": _key(info, "factorized_embeddings")},
            )
        return value

    @field_validator("parallel_norms")
    @classmethod
    def _parallel_norms_need_parallel(cls, value: int, info: ValidationInfo) -> int:
        placement = info.data.get("norm_placement")
        if value != 1 and placement != "parallel":
            raise PydanticCustomError(
                "parallel_norms_need_parallel",
                "{key} ({value}) only applies to norm_placement parallel, not {placement}; set norm_placement: "
                "parallel or remove {key}",
                {"key": _key(info, "parallel_norms"), "value": value, "placement": placement or "the default"},
            )
        return value

    @field_validator("lm_head_bias")
    @classmethod
    def _bias_needs_head(cls, value: bool, info: ValidationInfo) -> bool:
        head = info.data.get("lm_head")
        if head is None:
            head = info.data.get("architecture") not in (None, "encoder")
        if value and not head:
            raise PydanticCustomError(
                "lm_head_bias_needs_head",
                "{key} adds a bias to an LM head, but this config has none; set lm_head: true or {key}: false",
                {"key": _key(info, "lm_head_bias")},
            )
        return value

    @field_validator("rotary_dim")
    @classmethod
    def _rotary_dim_fits(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is None:
            return value
        key = _key(info, "rotary_dim")
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

    @field_validator("attention")
    @classmethod
    def _attention_fits(cls, value: AttentionSpec | None, info: ValidationInfo) -> AttentionSpec | None:
        if value is not None:
            _check_attention(value, info, "attention")
        return value

    @field_validator("blocks")
    @classmethod
    def _blocks_resolve(cls, value: dict[str, BlockSpec], info: ValidationInfo) -> dict[str, BlockSpec]:
        base_attention = base_attention_spec(info.data.get("sliding_window"), info.data.get("attention"))
        base_ffn = info.data.get("ffn") or FFNSpec()
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
            except ValidationError as exc:
                raise PydanticCustomError(
                    "block_invalid",
                    "blocks.{name}: {error}",
                    {"name": name, "error": exc.errors()[0]["msg"]},
                ) from None
            _check_attention(attention, info, f"blocks.{name}.attention")
            missing = moe_missing(ffn)
            if missing:
                raise PydanticCustomError(
                    "moe_incomplete",
                    "blocks.{name}.ffn: kind moe needs {field}; add {field}:",
                    {"name": name, "field": missing},
                )
        return value

    @field_validator("layers")
    @classmethod
    def _layers_cover_stack(cls, value: list[LayerRun] | None, info: ValidationInfo) -> list[LayerRun] | None:
        if value is None or "blocks" not in info.data or info.data.get("num_layers") is None:
            return value
        known = [DEFAULT_BLOCK, *info.data["blocks"]]
        for run in value:
            for name in run.pattern:
                if name not in known:
                    close = difflib.get_close_matches(name, known, n=1)
                    hint = f" (did you mean {close[0]!r}?)" if close else ""
                    raise PydanticCustomError(
                        "unknown_block",
                        "layers names block '{name}'{hint}, which blocks does not define; known: {known}",
                        {"name": name, "hint": hint, "known": ", ".join(known)},
                    )
        total, expected = sum(run.num_layers for run in value), info.data["num_layers"]
        if total != expected:
            layers_key = _key(info, "num_layers")
            raise PydanticCustomError(
                "layers_mismatch",
                "layers add up to {total} layers but {layers_key} is {expected}; {fix}",
                {
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
        return value

    @field_validator("shared_layers")
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


def _head_dim(info: ValidationInfo) -> int | None:
    """head_dim as the config will resolve it, from the fields validated so far (None if they are invalid)."""
    if info.data.get("head_dim") is not None:
        return int(info.data["head_dim"])
    embed_dim, heads = info.data.get("embed_dim"), info.data.get("num_heads")
    if embed_dim is None or heads is None or embed_dim % heads:
        return None
    return int(embed_dim // heads)


def _check_attention(spec: AttentionSpec, info: ValidationInfo, where: str) -> None:
    """Rules an attention spec must meet in this config: MLA complete, windows within the context, causal only."""
    if spec.kind == "mla":
        missing = [name for name in MLA_FIELDS if getattr(spec, name) is None]
        if missing:
            raise PydanticCustomError(
                "mla_incomplete",
                "{where}: kind mla needs {fields} (DeepSeek-V3: kv_lora_rank 512, qk_nope_head_dim 128, "
                "qk_rope_head_dim 64, v_head_dim 128)",
                {"where": where, "fields": ", ".join(missing)},
            )
    arch, context = info.data.get("architecture"), info.data.get("max_seq_len")
    for name in ("sliding_window", "chunk_size"):
        size = getattr(spec, name)
        if size is None:
            continue
        if arch == "encoder":
            raise PydanticCustomError(
                "window_needs_decoder",
                "{where}.{name} ({size}) limits causal self-attention and its KV cache; architecture encoder has "
                "none. Remove {name}",
                {"where": where, "name": name, "size": size},
            )
        if context is not None and size > context:
            raise PydanticCustomError(
                "window_over_context",
                "{where}.{name} ({size}) is larger than the context max_seq_len ({context}), so it limits "
                "nothing; use at most {context} or remove {name}",
                {"where": where, "name": name, "size": size, "context": context},
            )


FIELD_NAMES: tuple[str, ...] = tuple(ModelConfig.model_fields)
