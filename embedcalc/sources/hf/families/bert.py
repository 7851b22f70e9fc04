"""BERT-style encoders (BertModel, RobertaModel, DistilBertModel): learned positions, an embedding
LayerNorm, post-norm blocks, the pooler where the family has one.
"""

from __future__ import annotations

from embedcalc.sources.hf import keys as hf_keys
from embedcalc.sources.hf.mappings import (
    expect_absolute_positions,
    map_activation,
    map_dropout,
    map_offset_positions,
)
from embedcalc.sources.hf.reader import Family, IgnoredKey, KeyReader


def read_bert_like(r: KeyReader, positions: bool = True) -> None:
    """BertModel / RobertaModel: learned positions, segments, embedding LayerNorm, post-norm, pooler (without
    ``positions``: the family maps its positions itself, Jina v3's rotary)."""
    for name, value in (("architecture", "encoder"), ("norm", "layernorm"), ("norm_placement", "post"),
                        ("embedding_norm", True), ("position", "learned"), ("bias", True), ("pooler", True),
                        ("lm_head", False)):  # fmt: skip
        r.fixed(name, value)
    r.copy("vocab_size", "vocab_size")
    r.copy("hidden_size", "embed_dim")
    r.copy("num_hidden_layers", "num_layers")
    r.copy("num_attention_heads", "num_heads")
    r.copy("intermediate_size", "ffn_dim")
    r.copy("type_vocab_size", "type_vocab_size")
    map_activation(r, "hidden_act", gated=False)
    map_dropout(r, "hidden_dropout_prob")
    r.ignore("attention_probs_dropout_prob", hf_keys.dropout_reason("hidden_dropout_prob"))
    r.ignore("tie_word_embeddings", "AutoModel builds the backbone, which has no LM head to tie")
    if positions:
        expect_absolute_positions(r)
    for legacy in ("directionality", "pooler_fc_size", "pooler_num_attention_heads", "pooler_num_fc_layers",
                   "pooler_size_per_head", "pooler_type"):  # fmt: skip
        r.ignore(legacy, "a key of Google's original BERT release that transformers never reads")


def _read_bert(r: KeyReader) -> None:
    read_bert_like(r)
    r.copy("max_position_embeddings", "max_seq_len")


def read_roberta(r: KeyReader) -> None:
    """RobertaModel numbers positions from padding_idx + 1 (fairseq's make_positions), so its table of
    max_position_embeddings rows (514) serves max_position_embeddings - pad_token_id - 1 tokens (512)."""
    read_bert_like(r)
    # read by map_offset_positions; consumed here when pad_token_id is bad
    r.lookup("max_position_embeddings")
    pad_key, pad, _ = r.value("pad_token_id")
    if not isinstance(pad, int) or isinstance(pad, bool) or pad < 0:
        r.problem(
            pad_key, f"{pad_key} = {pad!r}: RoBERTa numbers positions from pad_token_id + 1 and needs it"
        )
        return
    map_offset_positions(r, pad + 1, pad_key, f"({pad_key} {pad} + 1)")


def _read_distilbert(r: KeyReader) -> None:
    """DistilBertModel: like BERT without segments or pooler; sinusoidal_pos_embds still builds a table."""
    for name, value in (("architecture", "encoder"), ("norm", "layernorm"), ("norm_placement", "post"),
                        ("embedding_norm", True), ("position", "learned"), ("type_vocab_size", 0),
                        ("bias", True), ("pooler", False), ("lm_head", False)):  # fmt: skip
        r.fixed(name, value)
    r.copy("vocab_size", "vocab_size")
    r.copy("dim", "embed_dim")
    r.copy("n_layers", "num_layers")
    r.copy("n_heads", "num_heads")
    r.copy("hidden_dim", "ffn_dim")
    r.copy("max_position_embeddings", "max_seq_len")
    map_activation(r, "activation", gated=False)
    map_dropout(r, "dropout")
    written, value, from_file = r.value("sinusoidal_pos_embds")
    if from_file:
        r.ignored.append(IgnoredKey(written, value, (
            "DistilBertModel builds the same max_position_embeddings x dim nn.Embedding either way (true only "
            "initialises it with sinusoids), so it is counted as a learned table"
        )))  # fmt: skip
    for key in ("attention_dropout", "qa_dropout", "seq_classif_dropout"):
        r.ignore(key, hf_keys.dropout_reason("dropout"))
    r.ignore("tie_word_embeddings", "AutoModel builds the backbone, which has no LM head to tie")
    r.ignore("tie_weights_", "a legacy key of the masked-LM head; the backbone has no LM head")


FAMILIES = (
    Family("bert", "BertConfig", "BertModel (AutoModel, with pooler)", "bert-base",
           dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                intermediate_size=3072, hidden_act="gelu", hidden_dropout_prob=0.1, max_position_embeddings=512,
                type_vocab_size=2), _read_bert),
    Family("roberta", "RobertaConfig", "RobertaModel (AutoModel, with pooler)", "bert-base",
           dict(vocab_size=50265, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                intermediate_size=3072, hidden_act="gelu", hidden_dropout_prob=0.1, max_position_embeddings=512,
                type_vocab_size=2, pad_token_id=1), read_roberta),
    Family("xlm-roberta", "XLMRobertaConfig", "XLMRobertaModel (AutoModel, with pooler)", "bert-base",
           dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                intermediate_size=3072, hidden_act="gelu", hidden_dropout_prob=0.1, max_position_embeddings=512,
                type_vocab_size=2, pad_token_id=1), read_roberta),
    Family("camembert", "CamembertConfig", "CamembertModel (AutoModel, with pooler)", "bert-base",
           dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                intermediate_size=3072, hidden_act="gelu", hidden_dropout_prob=0.1, max_position_embeddings=512,
                type_vocab_size=2, pad_token_id=1), read_roberta),
    Family("distilbert", "DistilBertConfig", "DistilBertModel (AutoModel, no pooler)", "bert-base",
           dict(vocab_size=30522, max_position_embeddings=512, sinusoidal_pos_embds=False, n_layers=6,
                n_heads=12, dim=768, hidden_dim=3072, dropout=0.1, activation="gelu"), _read_distilbert,
           {"hidden_size": "dim", "num_attention_heads": "n_heads", "num_hidden_layers": "n_layers"}),
)  # fmt: skip
