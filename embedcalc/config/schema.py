"""The config schema (DESIGN.md §3): one frozen pydantic model for encoders, decoders and encoder-decoders.

This module owns the fields, each with its bounds and description. Rules that span fields are field validators on
the field at fault, so the error path names it; they live in two mixins, :mod:`embedcalc.config.rules.shape` (the
flat fields) and :mod:`embedcalc.config.rules.layers` (attention, ffn, blocks, layers). Fields are declared in the
order those validators need (a validator sees only fields declared before its own). Defaults that depend on the
architecture are ``None`` here and resolved by the ``resolved_*`` properties (:mod:`embedcalc.config.resolved`),
so a config round-trips exactly as written.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError

from embedcalc.config.block_spec import AttentionSpec, BlockSpec, LayerRun
from embedcalc.config.bounded import NonNegativeInt, PositiveInt
from embedcalc.config.disentangled_spec import DisentangledSpec
from embedcalc.config.dtypes import Dtype, DtypeError, canonical_dtype
from embedcalc.config.ffn_spec import FFNSpec
from embedcalc.config.kinds import Activation, Architecture, Norm, NormPlacement, Position, Quantized
from embedcalc.config.mixer_spec import MixerSpec
from embedcalc.config.resolved import ResolvedShape
from embedcalc.config.rules.altup import AltUpRules
from embedcalc.config.rules.drafter import DrafterRules
from embedcalc.config.rules.layers import LayerRules
from embedcalc.config.rules.shape import ShapeRules


# ResolvedShape declares (for mypy) the part of model_dump / model_copy that the records implement too; pydantic's
# own signatures are wider, which mypy reports as incompatible definitions in the bases
class ModelConfig(ShapeRules, LayerRules, AltUpRules, DrafterRules, ResolvedShape, BaseModel):  # type: ignore[misc]
    """A Transformer's shape: everything that decides its parameters, FLOPs and memory."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    spec_types: ClassVar[tuple[type[AttentionSpec], type[FFNSpec], type[MixerSpec]]] = (AttentionSpec, FFNSpec,
                                                                                         MixerSpec)  # fmt: skip

    @field_validator("dtype", mode="before")
    @classmethod
    def _dtype_name(cls, value: object) -> object:
        """A short name or an alias (``bfloat16``) -> the short name (embedcalc.config.dtypes)."""
        if value is None:
            return None
        try:
            return canonical_dtype(value)
        except DtypeError as exc:
            raise PydanticCustomError("unknown_dtype", str(exc)) from None

    name: str | None = Field(default=None, description="A label for tables and JSON output.")
    family: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9_.-]+$",
        description=(
            "The transformers model_type this config mirrors (llama, gpt2, bert, t5, ...): it names the linear "
            "modules adapters attach to (peft's target_modules and its per-family defaults, docs/concepts/"
            "fine-tuning.md). A Hugging Face config.json gives its own; None: LLaMA's module names."
        ),
    )
    dtype: Dtype | None = Field(
        default=None,
        description=(
            "The model's own dtype (fp32, bf16, fp16, fp8, mxfp4, nvfp4, int8, int4; float32, bfloat16 and "
            "float16 accepted): the format its published weights are in, used when no --dtype is given (a Hugging "
            "Face config's torch_dtype or dtype, or its quantization_config). None: fp32."
        ),
    )
    quantized: Quantized | None = Field(
        default=None,
        description=(
            "Which weight matrices a low-precision dtype (fp8, mxfp4, nvfp4, int8, int4) stores in it: layers "
            "(every linear layer's inside the layers; embeddings, LM head, router and norms stay in the "
            "activation dtype) or experts (only the routed experts' matrices, as gpt-oss ships MXFP4: its "
            "quantization_config's modules_to_not_convert leaves attention, router, embeddings and head in bf16). "
            "None: layers."
        ),
    )
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
    per_layer_input_dim: PositiveInt | None = Field(
        default=None,
        description=(
            "Per-layer embeddings (Gemma 3n / Gemma 4 hidden_size_per_layer_input, decoders): a second token "
            "table of per_layer_vocab_size x (num_layers x per_layer_input_dim) and a projection embed_dim -> "
            "num_layers x per_layer_input_dim with an RMSNorm of per_layer_input_dim give each layer its own "
            "input; every layer gates it (embed_dim -> per_layer_input_dim), projects it back "
            "(per_layer_input_dim -> embed_dim) and normalises it (embed_dim) into the residual. Default none."
        ),
    )
    per_layer_vocab_size: PositiveInt | None = Field(
        default=None,
        description="Rows of the per-layer token table (vocab_size_per_layer_input); default vocab_size.",
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
    activation: Activation = Field(
        default="gelu",
        description=(
            "FFN activation; swiglu and geglu are gated. xielu (Huang 2024, arXiv 2411.13010; Apertus) is plain and "
            "learns two scalars per FFN (alpha_p, alpha_n); dense FFNs only."
        ),
    )
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
    ffn_out_bias: bool | None = Field(
        default=None,
        description=(
            "Bias on a dense FFN's output projection (down) alone; default ffn_bias. GTE's GteMLP: gate and up "
            "without bias, down_proj with one (ffn_bias: false, ffn_out_bias: true)."
        ),
    )
    tie_embeddings: bool = Field(
        default=True,
        description=(
            "The LM head reuses the token embedding (no extra parameters); with decoder_token_table, the "
            "decoder's table."
        ),
    )
    decoder_token_table: bool = Field(
        default=False,
        description=(
            "An encoder-decoder's decoder has a token table of its own (T5Gemma: encoder.embed_tokens and "
            "decoder.embed_tokens, embedding/decoder_token), which a tied LM head reuses. Default false: one table "
            "shared by both stacks (T5, BART; Vaswani et al. 2017, §3.4)."
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
    relative_attention_bias: bool | None = Field(
        default=None,
        description=(
            "A bucketed relative position bias table (relative_attention_num_buckets x num_heads, T5's) in each "
            "stack, added to the scores of every layer. Default true when position=relative, else false; MPNet "
            "sets it with position=learned (absolute table plus relative bias)."
        ),
    )
    relative_bias_per_layer: bool = Field(
        default=False,
        description=(
            "The relative position bias table is in every layer's self-attention, each layer its own (UMT5's "
            "UMT5Attention, has_relative_attention_bias in every layer), instead of once per stack (T5): "
            "num_layers x relative_attention_num_buckets x num_heads per stack. Needs the relative bias."
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
    rope_scale: bool = Field(
        default=False,
        description=(
            "A learned log-scale per rotary frequency (Mistral Large 4's LeRoPE, MistralLarge4TextRotaryEmbedding."
            "alpha): widest rotary width / 2 parameters for the decoder, no matmul. Needs position rope, a decoder."
        ),
    )
    attention: AttentionSpec | None = Field(
        default=None,
        description=(
            "The default block's attention beyond the flat head counts: kind (standard, mla, sparse), q/k norms, "
            "sinks, window, chunk. Default: standard attention with the flat fields."
        ),
    )
    ffn: FFNSpec | None = Field(
        default=None,
        description="The default block's FFN: dense (the flat ffn_dim) or a mixture of experts. Default dense.",
    )
    mixer: MixerSpec | None = Field(
        default=None,
        description=(
            "The default block's token mixer: attention (the default), mamba2 (a state-space layer with a "
            "constant recurrent state) or none. Hybrid stacks set it per block variant in blocks."
        ),
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
        validate_default=True,
        description=(
            "The layers of the stack (the encoder of an encoder-decoder) as runs of block names, "
            "[{pattern: [local, global], repeat: 4}]; they must add up to num_layers. Default: every layer is "
            "the default block."
        ),
    )
    decoder_layout: list[LayerRun] | None = Field(
        default=None,
        description=(
            "An encoder-decoder's decoder layers as runs of block names, as layers is for the encoder (T5Gemma's "
            "decoder: sliding and global layers); they must add up to num_decoder_layers. Default: every decoder "
            "layer is the default block."
        ),
    )
    shared_layers: bool = Field(
        default=False,
        description=(
            "One set of layer weights shared across the depth of each stack (ALBERT): parameters counted once, "
            "FLOPs and activations per layer."
        ),
    )
    disentangled: DisentangledSpec | None = Field(
        default=None,
        description=(
            "DeBERTa's disentangled attention (encoders): one relative-position table per stack that every layer "
            "projects into content-to-position and position-to-content score terms. Default none."
        ),
    )
    context_tokens: PositiveInt | None = Field(
        default=None,
        validate_default=True,
        description=(
            "Tokens per sequence of the external sequence that cross-attention blocks (attention.cross) attend "
            "to: Llama-3.2-Vision's vision tokens, ((image_size / patch_size)^2 + 1) per tile x max_num_tiles "
            "per image (6404 for one 560-pixel image in 4 tiles of 14-pixel patches). Their K and V are projected "
            "once per sequence and cached; the text length does not change them. Required with cross blocks, "
            "refused without."
        ),
    )
    extra_token_rows: NonNegativeInt = Field(
        default=0,
        description=(
            "Rows of the token table beyond vocab_size that the LM head does not predict (MllamaTextModel builds "
            "vocab_size + 8 rows for its image token and reserved ids; its head has vocab_size). Default 0."
        ),
    )
    altup_inputs: int | None = Field(
        default=None,
        ge=2,
        description=(
            "AltUp (Baykal et al. 2023; Gemma 3n altup_num_inputs, decoders): the residual stream is kept as this "
            "many parallel copies of embed_dim. altup_inputs - 1 projections embed_dim x embed_dim make the extra "
            "copies after the embeddings (embedding/altup_project) and as many fold them back before the final "
            "norm (<stack>/altup_unembed); every layer predicts all copies from a router (embed_dim -> n, its "
            "RMSNorm) and n x n^2 coefficients, runs on one, and corrects them (n x n coefficients, an embed_dim "
            "output scale). Default none."
        ),
    )
    laurel_rank: PositiveInt | None = Field(
        default=None,
        description=(
            "Laurel (Gemma 3n's learned augmented residual, decoders): beside every layer's attention, its "
            "normalised input goes through embed_dim -> laurel_rank -> embed_dim and an RMSNorm, added to the "
            "attention residual (laurel/left, laurel/right, laurel/norm). Default none."
        ),
    )
    hyper_connections: PositiveInt | None = Field(
        default=None,
        description=(
            "Manifold-constrained hyper-connections (DeepSeek-V4's hc_mult, decoders, pre-norm): the residual "
            "stream is kept as this many streams of embed_dim; around each sublayer a projection of the n "
            "normalised streams (n embed_dim -> (2 + n) n, a bias and 3 scales: <stack>/hyper/attention, "
            "<stack>/hyper/ffn) gives the weights that collapse them into the sublayer's input, spread its output "
            "back and mix them (n x n); before the final norm one more (n embed_dim -> n, n + 1) collapses them "
            "(<stack>/hyper_head). Default none: one stream."
        ),
    )
    input_projection_dim: PositiveInt | None = Field(
        default=None,
        description=(
            "A drafter's input (decoders): every position reads a vector of this width from the model it drafts "
            "for instead of a token id (Gemma 4's assistant: the target's token embedding and last hidden state, "
            "2 x backbone_hidden_size), projected to embed_dim without bias (embedding/input_projection); the "
            "token table is then only the tied LM head's. Default none: token ids."
        ),
    )
    output_projection_dim: PositiveInt | None = Field(
        default=None,
        description=(
            "A bias-free projection embed_dim -> this width of every position after the final norm, the state a "
            "drafter hands back to its target beside the logits (Gemma 4's assistant's post_projection, "
            "head/output_projection). Decoders. Default none."
        ),
    )
    head_centroids: PositiveInt | None = Field(
        default=None,
        description=(
            "A centroid-masked LM head (Gemma 4's assistant with use_ordered_embeddings): head/centroids scores "
            "this many clusters of vocab_size / head_centroids tokens (embed_dim -> head_centroids, no bias) and "
            "head/lm computes the logits of the tokens of the head_centroid_top_k best clusters only, the rest "
            "masked. Must divide vocab_size; needs an LM head. Default none: every token's logit."
        ),
    )
    head_centroid_top_k: PositiveInt | None = Field(
        default=None,
        validate_default=True,
        description="With head_centroids: the clusters whose tokens each position scores (at most head_centroids).",
    )
    dropout: float = Field(default=0.1, ge=0.0, lt=1.0, description="Dropout probability; no effect on cost.")
