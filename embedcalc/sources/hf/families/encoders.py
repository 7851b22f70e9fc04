"""Encoders beyond BERT's layout, counted as their ``AutoModel``: ELECTRA (factorised embeddings, no pooler),
ALBERT (factorised embeddings, one shared layer, a pooler), ModernBERT (bias-free pre-norm, RoPE, GeGLU),
NomicBERT (post-norm, RoPE, SwiGLU, no biases) and MPNet (learned positions plus a relative bias, a pooler)."""

from __future__ import annotations

from embedcalc.sources.hf import keys as hf_keys
from embedcalc.sources.hf.families.llama_like import refuse
from embedcalc.sources.hf.mappings import (
    expect_absolute_positions,
    map_activation,
    map_dropout,
    map_offset_positions,
)
from embedcalc.sources.hf.reader import Family, KeyReader

_ENCODER = (("architecture", "encoder"), ("norm", "layernorm"), ("embedding_norm", True), ("lm_head", False))


def bert_shape(r: KeyReader, positions: bool = True) -> None:
    """BERT's size keys; ``positions`` false when the family maps max_position_embeddings itself (an offset)."""
    r.copy("vocab_size", "vocab_size")
    r.copy("hidden_size", "embed_dim")
    r.copy("num_hidden_layers", "num_layers")
    r.copy("num_attention_heads", "num_heads")
    r.copy("intermediate_size", "ffn_dim")
    if positions:
        r.copy("max_position_embeddings", "max_seq_len")
    r.ignore("tie_word_embeddings", "AutoModel builds the backbone, which has no LM head to tie")


def _factorised(r: KeyReader) -> None:
    """embedding_size wide token, position and segment tables and norm, then a biased projection to hidden_size
    (ElectraEmbeddings + embeddings_project, AlbertEmbeddings + embedding_hidden_mapping_in)."""
    e = r.value("embedding_size")[1]
    if e != r.data.get("embed_dim"):
        r.copy("embedding_size", "token_embed_dim")
        r.fixed(
            "factorized_embeddings", True, "position, segment tables and the norm are embedding_size wide"
        )
        r.fixed("embedding_projection_bias", True)
    else:
        r.ignore("embedding_size", "equals hidden_size: no projection")


def _factorised_bert(r: KeyReader) -> None:
    """ELECTRA's and ALBERT's shared keys: BERT's sizes and segments, the factorised embeddings, GELU, dropout."""
    bert_shape(r)
    r.copy("type_vocab_size", "type_vocab_size")
    _factorised(r)
    map_activation(r, "hidden_act", gated=False)
    map_dropout(r, "hidden_dropout_prob")


def _read_electra(r: KeyReader) -> None:
    """ElectraModel: BERT's blocks, factorised embeddings when embedding_size < hidden_size, no pooler."""
    for name, value in (*_ENCODER, ("norm_placement", "post"), ("position", "learned"), ("bias", True),
                                   ("pooler", False)):  # fmt: skip
        r.fixed(name, value)
    _factorised_bert(r)
    expect_absolute_positions(r)
    for key in ("summary_type", "summary_use_proj", "summary_activation", "summary_last_dropout"):
        r.ignore(key, "configures ELECTRA's sequence-summary head; ElectraModel has none")


def _read_albert(r: KeyReader) -> None:
    """AlbertModel: factorised embeddings, one layer's weights run num_hidden_layers times, a pooler."""
    for name, value in (*_ENCODER, ("norm_placement", "post"), ("position", "learned"), ("bias", True),
                                   ("pooler", True), ("shared_layers", True)):  # fmt: skip
        r.fixed(name, value)
    _factorised_bert(r)
    refuse(r, "num_hidden_groups", (1,), "ALBERT with several groups of shared layers")
    refuse(r, "inner_group_num", (1,), "ALBERT with several layers per group")
    for key in ("down_scale_factor", "gap_size", "net_structure_type", "num_memory_blocks", "layers_to_keep"):
        r.ignore(key, "a key of Google's original ALBERT release that transformers never reads")
    expect_absolute_positions(r)


def _read_modernbert(r: KeyReader) -> None:
    """ModernBertModel: bias-free LayerNorms (norm_bias), pre-norm with a final norm, RoPE, fused Wqkv, GeGLU
    (Wi is hidden -> 2 x intermediate), biases as attention_bias / mlp_bias. Layer 0's attn_norm is an Identity
    and the embeddings have a norm: counted as embedding_norm false and an attn_norm in every layer, the same
    number of norms of the same width. Local (windowed) layers mask full score matrices: the same matmuls."""
    for name, value in (*_ENCODER[:2], ("lm_head", False), ("norm_placement", "pre"), ("position", "rope"),
                                       ("bias", False), ("pooler", False)):  # fmt: skip
        r.fixed(name, value)
    r.fixed("embedding_norm", False, "layer 0's attn_norm is an Identity: its norm is the embeddings' norm")
    bert_shape(r)
    r.copy("norm_bias", "norm_bias")
    r.copy("attention_bias", "qkv_bias")
    r.copy("attention_bias", "out_bias")
    r.copy("mlp_bias", "ffn_bias")
    map_activation(r, "hidden_activation", gated=True)
    map_dropout(r, "attention_dropout")
    for key in ("global_attn_every_n_layers", "local_attention", "layer_types", "global_rope_theta",
                "local_rope_theta", "sliding_window"):  # fmt: skip
        r.ignore(key, "which layers attend locally and their RoPE bases: the same weights and matmuls (eager "
                 "attention computes the full score matrix and masks it)")  # fmt: skip
    for key in ("decoder_bias", "classifier_pooling", "classifier_bias", "classifier_activation",
                "sparse_prediction", "sparse_pred_ignore_index", "reference_compile", "repad_logits_with_grad",
                "deterministic_flash_attn", "initializer_cutoff_factor", "position_embedding_type"):  # fmt: skip
        r.ignore(key, "configures a task head or the kernel; ModernBertModel has neither")


def _read_nomic_bert(r: KeyReader) -> None:
    """NomicBertModel: BERT embeddings (tokens, segments, LayerNorm; RoPE, no position table), post-norm, q/k/v/o
    and the SwiGLU MLP without biases, no pooler."""
    for name, value in (*_ENCODER, ("norm_placement", "post"), ("position", "rope"), ("bias", False),
                                   ("pooler", False)):  # fmt: skip
        r.fixed(name, value)
    bert_shape(r)
    r.copy("type_vocab_size", "type_vocab_size")
    if r.has("head_dim"):
        r.copy("head_dim", "head_dim")
    map_activation(r, "hidden_act", gated=True)
    map_dropout(r, "hidden_dropout_prob")
    r.ignore("rotary_emb_fraction", hf_keys.ROPE)


def _read_mpnet(r: KeyReader) -> None:
    """MPNetModel (Song et al. 2020, "MPNet"): BERT's post-norm blocks with q/k/v/o biased, token and position
    tables with an embedding LayerNorm and no segment table, one relative_attention_bias table (buckets x heads)
    in MPNetEncoder whose bias every layer adds to its scores, and MPNetPooler. MPNetEmbeddings fixes padding_idx
    at 1 and numbers positions from 2 (create_position_ids_from_input_ids), so the max_position_embeddings rows
    serve max_position_embeddings - 2 tokens whatever pad_token_id says. compute_position_bias buckets distances
    with T5's bidirectional rule at 32 buckets and max_distance 128 (literals in transformers' code); the table has
    relative_attention_num_buckets rows, which is what is counted."""
    for name, value in (*_ENCODER, ("norm_placement", "post"), ("position", "learned"), ("type_vocab_size", 0),
                        ("bias", True), ("pooler", True), ("relative_attention_bias", True)):  # fmt: skip
        r.fixed(name, value)
    bert_shape(r, positions=False)
    map_offset_positions(r, 2, "model_type", "(MPNetEmbeddings' padding_idx 1 + 1)")
    r.copy("relative_attention_num_buckets", "relative_attention_num_buckets")
    r.fixed("relative_attention_max_distance", 128, "MPNetEncoder.relative_position_bucket's max_distance")
    map_activation(r, "hidden_act", gated=False)
    map_dropout(r, "hidden_dropout_prob")
    r.ignore("attention_probs_dropout_prob", hf_keys.dropout_reason("hidden_dropout_prob"))


_BERT = dict(
    vocab_size=30522,
    hidden_size=768,
    num_hidden_layers=12,
    num_attention_heads=12,
    intermediate_size=3072,
    hidden_act="gelu",
    hidden_dropout_prob=0.1,
    max_position_embeddings=512,
    type_vocab_size=2,
)

FAMILIES = (
    Family("electra", "ElectraConfig", "ElectraModel (AutoModel, no pooler)", "bert-base",
           _BERT | dict(embedding_size=128, hidden_size=256, num_attention_heads=4, intermediate_size=1024),
           _read_electra),
    Family("albert", "AlbertConfig", "AlbertModel (AutoModel, with pooler)", "bert-base",
           _BERT | dict(vocab_size=30000, embedding_size=128, hidden_size=4096, num_attention_heads=64,
                        intermediate_size=16384, hidden_act="gelu_new", hidden_dropout_prob=0.0), _read_albert),
    Family("modernbert", "ModernBertConfig", "ModernBertModel (AutoModel, no pooler)", "bert-base",
           dict(vocab_size=50368, hidden_size=768, intermediate_size=1152, num_hidden_layers=22,
                num_attention_heads=12, hidden_activation="gelu", max_position_embeddings=8192, norm_bias=False,
                attention_bias=False, mlp_bias=False, attention_dropout=0.0), _read_modernbert),
    Family("nomic_bert", "NomicBertConfig", "NomicBertModel (AutoModel, no pooler)", "bert-base",
           _BERT | dict(vocab_size=30528, hidden_act="silu", hidden_dropout_prob=0.0, max_position_embeddings=2048),
           _read_nomic_bert),
    Family("mpnet", "MPNetConfig", "MPNetModel (AutoModel, with pooler)", "mpnet-base",
           dict(vocab_size=30527, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                intermediate_size=3072, hidden_act="gelu", hidden_dropout_prob=0.1, max_position_embeddings=512,
                relative_attention_num_buckets=32), _read_mpnet),
)  # fmt: skip
