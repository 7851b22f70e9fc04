"""Layers as data (DESIGN.md §9): what one Transformer layer can be, and the resolved per-layer plan of a stack.

A config's flat fields describe the *default block*. Three optional fields refine it:

- ``attention`` and ``ffn`` (an :class:`AttentionSpec` and an :class:`FFNSpec`) change the default block itself:
  latent attention, q/k norms, sinks, a window; a mixture of experts;
- ``blocks`` names variants of it (``{local: {attention: {sliding_window: 4096}}, moe: {ffn: {kind: moe, ...}}}``);
  a variant overrides only the fields it sets, the rest comes from the default block;
- ``layers`` lays the variants out over depth as runs ``{pattern: [local, local, global], repeat: 8}``; the runs
  must cover ``num_layers`` exactly. ``default`` names the default block.

:func:`resolve_stack` turns this into :class:`LayerGroup` runs of fully resolved, hashable :class:`Block` values,
which both implementations (``analysis/`` and ``modeling/``) read; nothing here counts anything.

Sources for the layer kinds: multi-head latent attention, DeepSeek-V2 report (2024) §2.1; mixture of experts with
top-k routing, Shazeer et al. 2017 and Fedus et al. 2021 (Switch), shared experts DeepSeekMoE (Dai et al. 2024);
q/k norms, Dehghani et al. 2023 (ViT-22B) as used by OLMo 2 (full width) and Qwen3 / Gemma 3 (per head);
attention sinks as learned per-head logits, OpenAI gpt-oss model card (2025); sliding windows, Beltagy et al. 2020
and Jiang et al. 2023 (Mistral); chunked attention, Llama 4 (transformers' ``attention_chunk_size``).
"""

from __future__ import annotations

from pydantic import BaseModel, Field, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

from embedcalc.config.attention_checks import check_block_indexer, check_external_kv
from embedcalc.config.bounded import NonNegativeInt, PositiveInt
from embedcalc.config.ffn_spec import FFNSpec
from embedcalc.config.fields import AttentionFields, BlockFields
from embedcalc.config.kinds import AttentionKind, QKNorm
from embedcalc.config.layer_plan import LATENT_KINDS
from embedcalc.config.mixer_spec import MixerSpec
from embedcalc.config.shared_spec import SharedSpec
from embedcalc.config.spec_base import FROZEN, refuse_other_kind
from embedcalc.config.spec_shapes import (
    MLA_ONLY_FIELDS,
    SPARSE_ONLY_FIELDS,
    STANDARD_ONLY_FIELDS,
    LayerRunShape,
)


class AttentionSpec(AttentionFields, BaseModel):
    """What the self-attention of a block is, beyond the flat head counts: kind, norms, sinks, window."""

    model_config = FROZEN

    kind: AttentionKind = Field(
        default="standard",
        description=(
            "standard: Q/K/V projections with num_heads / num_kv_heads / head_dim (MHA, GQA, MQA). mla: DeepSeek's "
            "multi-head latent attention (low-rank Q and KV projections, decoupled RoPE dims, compressed KV cache). "
            "sparse: DeepSeek Sparse Attention (DeepSeek-V3.2, GLM-5): mla whose every query attends only to the "
            "index_topk keys a lightning indexer selects. compressed: DeepSeek-V4's attention: queries from a "
            "query latent (q_lora_rank), one key per token that is also the value (kv: embed_dim -> head_dim, "
            "its norm), a sliding window over the local keys plus the entries a compressor pools every "
            "compress_rate tokens (with compress_overlap and an indexer: the index_topk best of them)."
        ),
    )
    num_kv_heads: PositiveInt | None = Field(
        default=None,
        description=(
            "standard: this block's own key/value heads when they differ from the flat num_kv_heads (the Nemotron "
            "NAS models: num_heads / n_heads_in_group per layer); must divide num_heads. Its KV cache follows them."
        ),
    )
    q_lora_rank: PositiveInt | None = Field(
        default=None,
        description=(
            "mla: rank of the query compression (q_a: embed_dim -> q_lora_rank, a norm, q_b: -> heads x "
            "(qk_nope_head_dim + qk_rope_head_dim)). Absent: one full-rank query projection (DeepSeek-V2-Lite)."
        ),
    )
    kv_lora_rank: PositiveInt | None = Field(
        default=None,
        description=(
            "mla: rank of the joint key/value compression; kv_a projects embed_dim -> kv_lora_rank + "
            "qk_rope_head_dim, kv_b expands kv_lora_rank -> heads x (qk_nope_head_dim + v_head_dim)."
        ),
    )
    qk_nope_head_dim: PositiveInt | None = Field(
        default=None, description="mla: per-head query/key dims without rotary positions."
    )
    qk_rope_head_dim: NonNegativeInt | None = Field(
        default=None,
        description=(
            "mla: per-head query dims with rotary positions; the key's rotary part is one shared vector. 0: a layer "
            "without positions (Mistral Large 4's NoPE layers: every query/key channel is qk_nope_head_dim)."
        ),
    )
    v_head_dim: PositiveInt | None = Field(
        default=None,
        description=(
            "mla: per-head value dims. standard: the value heads' width when it differs from head_dim "
            "(MiMo-V2-Flash: 128 beside 192): v_proj, the context and out_proj use it, the KV cache holds keys "
            "of head_dim and values of v_head_dim."
        ),
    )
    qk_head_dim: PositiveInt | None = Field(
        default=None,
        description="mla, optional: the query/key head width, which must equal qk_nope_head_dim + qk_rope_head_dim.",
    )
    index_heads: PositiveInt | None = Field(
        default=None,
        description=(
            "sparse: heads of the lightning indexer (index_n_heads); its queries come from the query latent "
            "(q_lora_rank -> index_heads x index_head_dim), or without one from the input through a LayerNorm of "
            "embed_dim (Mistral Large 4), its one key per token from embed_dim. standard with "
            "index_block_size: the block indexer's heads, its queries from embed_dim."
        ),
    )
    index_head_dim: PositiveInt | None = Field(
        default=None,
        description="sparse, block indexer: width of the indexer's query heads and of its key, which it caches.",
    )
    index_topk: PositiveInt | None = Field(
        default=None,
        description=(
            "sparse: keys each query attends to, the indexer's top scores (index_topk). standard with "
            "index_block_size: key blocks each query attends to (MiniMax-M3's index_topk_blocks)."
        ),
    )
    index_block_size: PositiveInt | None = Field(
        default=None,
        description=(
            "standard: block-sparse attention (MiniMax-M3): an indexer of index_heads heads of "
            "index_head_dim (queries and one key per token from embed_dim, each RMS-normalised per head) scores "
            "every earlier key, max-pools the scores over blocks of index_block_size keys and keeps the "
            "index_topk best blocks per query, the query's own block always among them; the core attends to "
            "their keys only. The indexer caches its key of every token."
        ),
    )
    index_shared: bool = Field(
        default=False,
        description=(
            "sparse: reuse the previous layer's top-k selection (GLM-5's shared layers): no indexer parameters, "
            "FLOPs or cached keys in this layer."
        ),
    )
    query_scale: bool = Field(
        default=False,
        description=(
            "mla, sparse: a learned scale and bias per head multiply each query by scale x log(position + 1) + bias "
            "(Mistral Large 4's MistralLarge4TextSoftmaxScaling): 2 x num_heads parameters, and 2 x index_heads on a "
            "sparse layer's indexer queries; element-wise only."
        ),
    )
    num_heads: PositiveInt | None = Field(
        default=None,
        description=(
            "standard: this block's query heads when they differ from the flat num_heads (Laguna's "
            "num_attention_heads_per_layer); the block keeps them when a sweep varies num_heads."
        ),
    )
    head_dim: PositiveInt | None = Field(
        default=None,
        description=(
            "standard: this block's per-head width when it differs from the flat head_dim (Gemma 4's full-attention "
            "layers: global_head_dim 512 beside 256); the block then keeps it when a sweep varies head_dim."
        ),
    )
    values_from_keys: bool = Field(
        default=False,
        description=(
            "standard: the values are the key projection's output (Gemma 4's attention_k_eq_v): no value "
            "projection; the KV cache still holds keys and values (they are normalised apart)."
        ),
    )
    kv_shared: bool = Field(
        default=False,
        description=(
            "standard: reuse the keys and values of the nearest earlier layer with the same window and head shape "
            "that computes its own (Gemma 3n / Gemma 4 num_kv_shared_layers): no key/value projections or key "
            "norm, no KV cache of its own; its queries, scores and output are as usual."
        ),
    )
    kv_external: bool = Field(
        default=False,
        description=(
            "standard: the keys and values come from another model (a drafter reading its target's cache: Gemma "
            "4's assistant, shared_kv_states), one for each of the same positions: no key/value projections or key "
            "norm and no KV cache of its own; its queries, scores and output are as usual."
        ),
    )
    full_cache: bool = Field(
        default=False,
        description=(
            "With a sliding_window: the KV cache keeps every token although a query sees only the last "
            "sliding_window keys (GPT-Neo's local layers: transformers' cache holds them all and the mask does the "
            "windowing); the window still limits the causal score pairs."
        ),
    )
    qk_norm: QKNorm = Field(
        default="none",
        description=(
            "Norms on queries and keys before the scores: head (one head_dim-wide norm shared by every head: "
            "Qwen3, Gemma 3) or full (over all query / all key heads: OLMo 2); none."
        ),
    )
    output_gate: bool = Field(
        default=False,
        description=(
            "A sigmoid gate on the attention output, Linear(embed_dim, num_heads x head_dim) (Qwen3-Next's gated "
            "attention: q_proj twice as wide); biases as qkv_bias."
        ),
    )
    head_gate: bool = Field(
        default=False,
        description=(
            "A gate per head on the attention output, Linear(embed_dim, num_heads) without bias, each head's "
            "context scaled by softplus of its gate (Laguna's per-head g_proj)."
        ),
    )
    sinks: bool = Field(
        default=False,
        description="A learned sink logit per head joins the softmax (gpt-oss): num_heads parameters per layer.",
    )
    sliding_window: PositiveInt | None = Field(
        default=None,
        description=(
            "Causal self-attention sees only the last sliding_window tokens; the KV cache holds at most that many. "
            "Default: the flat sliding_window."
        ),
    )
    chunk_size: PositiveInt | None = Field(
        default=None,
        description=(
            "Chunked causal attention (Llama 4): a query sees only earlier keys of its own chunk of chunk_size "
            "tokens; the KV cache holds at most one chunk."
        ),
    )

    cross: bool = Field(
        default=False,
        description=(
            "Cross-attention over the external sequence of context_tokens tokens (Llama-3.2-Vision's "
            "cross-attention layers, MllamaTextCrossAttention): K and V are projected from those embed_dim-wide "
            "vectors (the vision tower's projected output), not from the layer's input; every query sees every "
            "one of them (no causal mask, no positions), and the layer's KV cache holds context_tokens tokens "
            "whatever the text length. The block has no self-attention. Standard attention only."
        ),
    )
    compress_rate: NonNegativeInt = Field(
        default=0,
        description=(
            "compressed: every compress_rate tokens a compressor pools one entry (head_dim wide: a softmax-gated "
            "sum of the tokens' projections, kv and gate: embed_dim -> head_dim each, a bias per position of the "
            "window, its norm) that every later query also attends to and the cache keeps (DeepSeek-V4's "
            "compress_rates: 4 for compressed sparse attention, 128 for heavily compressed). 0: the sliding "
            "window alone."
        ),
    )
    compress_overlap: bool = Field(
        default=False,
        description=(
            "compressed, with compress_rate: overlapping windows (DeepSeek-V4's compressed sparse attention): "
            "each token projects two series (kv and gate embed_dim -> 2 head_dim), an entry pools one window's "
            "second with the previous window's first; with index_heads, index_head_dim, index_topk a lightning "
            "indexer (its own overlapping compressor at index_head_dim, queries from the query latent, head "
            "weights from embed_dim) keeps the index_topk best entries per query."
        ),
    )
    out_groups: PositiveInt | None = Field(
        default=None,
        description=(
            "standard: a grouped low-rank output projection (DeepSeek-V4's o_groups): the heads' context is split "
            "into out_groups groups of whole heads, each projected on its own to out_rank values "
            "(num_heads x value width / out_groups -> out_rank), then one linear mixes the out_groups x out_rank "
            "values to embed_dim, in place of one output projection from every head. Needs out_rank; must divide "
            "the heads."
        ),
    )
    out_rank: PositiveInt | None = Field(
        default=None,
        description="standard, with out_groups: each group's output width (DeepSeek-V4's o_lora_rank).",
    )
    tanh_gates: bool = Field(
        default=False,
        description=(
            "tanh-gated residuals: one learned scalar g each scales the attention and the FFN outputs by tanh(g) "
            "before the residual add (Flamingo, Alayrac et al. 2022 §2.2; Mllama's cross_attn_attn_gate and "
            "cross_attn_mlp_gate): 1 parameter per gated sublayer."
        ),
    )

    @field_validator("qk_rope_head_dim")
    @classmethod
    def _rope_dims_even(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is not None and value % 2:
            raise PydanticCustomError(
                "rope_head_dim_odd",
                "qk_rope_head_dim ({value}) must be even, rotary positions rotate channel pairs; use {lo} or {hi}",
                {"value": value, "lo": value - 1, "hi": value + 1},
            )
        return value

    @field_validator("qk_head_dim")
    @classmethod
    def _mla_dims_add_up(cls, value: int | None, info: ValidationInfo) -> int | None:
        nope, rope = info.data.get("qk_nope_head_dim"), info.data.get("qk_rope_head_dim")
        if value is not None and nope is not None and rope is not None and value != nope + rope:
            raise PydanticCustomError(
                "mla_dims_mismatch",
                "qk_head_dim ({value}) must equal qk_nope_head_dim + qk_rope_head_dim = {nope} + {rope} = {sum}; "
                "set qk_head_dim: {sum} or remove it",
                {"value": value, "nope": nope, "rope": rope, "sum": nope + rope},
            )
        return value

    @model_validator(mode="after")
    def _mla_fields_need_mla(self) -> AttentionSpec:
        compressed = self.kind == "compressed"
        if self.kind not in LATENT_KINDS:  # compressed attention has MLA's query latent
            mla_only = tuple(f for f in MLA_ONLY_FIELDS if not (compressed and f == "q_lora_rank"))
            refuse_other_kind(self, mla_only, "attention", "mla")
        if not compressed:
            refuse_other_kind(self, ("compress_rate", "compress_overlap"), "attention", "compressed")
        check_external_kv(self)
        if self.kind == "standard" and self.index_block_size is not None:
            check_block_indexer(self)
        elif self.kind != "sparse":
            # compressed sparse attention's indexer (DeepSeek-V4): its heads, width and top-k
            kept = (
                ("index_heads", "index_head_dim", "index_topk")
                if compressed and self.compress_overlap
                else ()
            )
            refuse_other_kind(
                self, tuple(f for f in SPARSE_ONLY_FIELDS if f not in kept), "attention", "sparse"
            )
        if self.kind in LATENT_KINDS and self.num_kv_heads is not None:
            raise PydanticCustomError(
                "field_of_other_kind",
                "attention.num_kv_heads ({value}) applies to kind standard only: kind {kind} caches one compressed "
                "latent shared by every head, so it would be ignored; remove num_kv_heads or use kind standard",
                {"value": self.num_kv_heads, "kind": self.kind},
            )
        if self.kind != "standard":
            grouped = ("out_groups", "out_rank") if compressed else ()  # DeepSeek-V4's grouped output
            refuse_other_kind(self, tuple(f for f in STANDARD_ONLY_FIELDS if f not in grouped), "attention",
                              "standard")  # fmt: skip
        return self

    @field_validator("qk_norm")
    @classmethod
    def _mla_has_no_qk_norm(cls, value: str, info: ValidationInfo) -> str:
        if value != "none" and info.data.get("kind") in LATENT_KINDS:
            raise PydanticCustomError(
                "qk_norm_with_mla",
                "qk_norm ({value}) applies to standard attention; {kind} normalises its compressed q and kv "
                "instead. Set qk_norm: none",
                {"value": value, "kind": info.data.get("kind")},
            )
        return value


class BlockSpec(BlockFields, BaseModel):
    """A named variant of the default block: the mixer, attention and FFN fields it changes."""

    model_config = FROZEN

    mixer: MixerSpec | None = Field(
        default=None,
        description="The token mixer fields that differ from the default block's (kind attention, mamba2, none).",
    )
    attention: AttentionSpec | None = Field(
        default=None,
        description="The attention fields that differ from the default block's (only those set).",
    )
    ffn: FFNSpec | None = Field(
        default=None, description="The FFN fields that differ from the default block's (only those set)."
    )
    shared: SharedSpec | None = Field(
        default=None,
        description=(
            "The layer runs a shared block (its attention and FFN, whose weights several layers share) before its "
            "recurrent mixer and adds the block's projected output to the mixer's input (Zamba2's hybrid layers, "
            "docs/concepts/layer-model.md); the per-use adapters and projection are the layer's own. Needs a "
            "recurrent mixer, standard attention and a dense FFN."
        ),
    )


class LayerRun(LayerRunShape, BaseModel):
    """``repeat`` copies of a pattern of block names, laid out in order over depth."""

    model_config = FROZEN

    pattern: list[str] = Field(
        min_length=1,
        description="Block names in order (a name from blocks, or default), e.g. [local, global].",
    )
    repeat: PositiveInt = Field(default=1, description="How many times the pattern follows itself.")
