"""BART-style encoder-decoders, counted as their ``AutoModelForSeq2SeqLM``: BART (post-norm, learned positions
offset by 2, an embedding norm per stack), mBART (the same, pre-norm with a final norm per stack), Marian
(post-norm, sinusoidal positions, no embedding norm) and Pegasus (pre-norm, sinusoidal). One token table shared by
encoder, decoder and the tied LM head; final_logits_bias is a buffer, not a parameter. Marian's and Pegasus'
sinusoidal tables are frozen nn.Embedding weights (requires_grad false): fixed tables, not parameters
(DESIGN §4)."""

from __future__ import annotations

from typing import Any

from embedcalc.sources.hf.mappings import map_activation, map_dropout
from embedcalc.sources.hf.reader import MISSING, Family, KeyReader


def _stacks(r: KeyReader) -> None:
    """Both stacks must have the same shape: embedcalc's encoder-decoder has one width, heads and FFN."""
    r.copy("vocab_size", "vocab_size")
    r.copy("d_model", "embed_dim")
    r.copy("encoder_layers", "num_layers")
    r.copy("decoder_layers", "num_decoder_layers")
    r.copy("encoder_attention_heads", "num_heads")
    r.copy("encoder_ffn_dim", "ffn_dim")
    r.copy("max_position_embeddings", "max_seq_len")
    for enc, dec in (
        ("encoder_attention_heads", "decoder_attention_heads"),
        ("encoder_ffn_dim", "decoder_ffn_dim"),
    ):
        _, a, _ = r.value(enc)
        key, b, _ = r.value(dec)
        if a != b:
            r.problem(key, f"{key} ({b}) differs from {enc} ({a}): embedcalc's encoder-decoder has one shape")
        else:
            r.ignore(key, f"equals {enc}")
    map_activation(r, "activation_function", gated=False)
    map_dropout(r, "dropout")
    r.copy("tie_word_embeddings", "tie_embeddings")
    r.ignore("scale_embedding", "multiplies embeddings by sqrt(d_model): no parameters")
    r.ignore("normalize_before", "mapped as norm_placement by the family")
    r.ignore("add_final_layer_norm", "mapped as final_norm by the family")
    r.ignore("normalize_embedding", "mapped as embedding_norm by the family")
    r.ignore("static_position_embeddings", "mapped as position by the family")
    r.ignore("add_bias_logits", "final_logits_bias is a buffer, not a parameter")
    r.expect("is_encoder_decoder", (True,), "the family is always an encoder-decoder")
    key, n = r.lookup("num_hidden_layers")
    if n is not MISSING and n != r.data.get("num_layers"):
        r.problem(key, f"{key} ({n}) differs from encoder_layers ({r.data.get('num_layers')}); keep one")
    r.ignore("num_hidden_layers", "transformers' alias of encoder_layers")
    r.ignore("extra_pos_embeddings", "a key of older files that transformers no longer reads")
    r.ignore("classif_dropout", "a dropout probability of a task head")
    r.ignore("force_bos_token_to_be_generated", "a generate() setting of older files")


def _common(r: KeyReader, placement: str, position: str, embedding_norm: bool, offset: int) -> None:
    fixed: tuple[tuple[str, Any], ...] = (
        ("architecture", "encoder-decoder"), ("norm", "layernorm"), ("norm_placement", placement),
        ("final_norm", placement == "pre"), ("embedding_norm", embedding_norm), ("position", position),
        ("bias", True), ("lm_head", True),
    )  # fmt: skip
    for name, value in fixed:
        r.fixed(name, value)
    if offset:
        r.fixed("position_offset", offset, "BartLearnedPositionalEmbedding has 2 extra rows")
    _stacks(r)


def _read_bart(r: KeyReader) -> None:
    _common(r, "post", "learned", True, 2)


def _read_mbart(r: KeyReader) -> None:
    _common(r, "pre", "learned", True, 2)


def _read_marian(r: KeyReader) -> None:
    """MarianMTModel: decoder_vocab_size must equal vocab_size and the embeddings be shared (one table)."""
    _common(r, "post", "sinusoidal", False, 0)
    key, dec_vocab, _ = r.value("decoder_vocab_size")
    if dec_vocab not in (None, r.data.get("vocab_size")):
        r.problem(
            key, f"{key} ({dec_vocab}) differs from vocab_size: a separate decoder table is not modelled"
        )
    else:
        r.ignore(key, "null or vocab_size: one table")
    r.expect("share_encoder_decoder_embeddings", (True,), "separate encoder and decoder token tables")


def _read_pegasus(r: KeyReader) -> None:
    _common(r, "pre", "sinusoidal", False, 0)


def _defaults(**extra: Any) -> dict[str, Any]:
    return dict(vocab_size=50265, max_position_embeddings=1024, encoder_layers=12, encoder_ffn_dim=4096,
                encoder_attention_heads=16, decoder_layers=12, decoder_ffn_dim=4096, decoder_attention_heads=16,
                activation_function="gelu", d_model=1024, dropout=0.1, tie_word_embeddings=True) | extra  # fmt: skip


_ALIASES = {"num_attention_heads": "encoder_attention_heads", "hidden_size": "d_model"}

FAMILIES = (
    Family("bart", "BartConfig", "BartForConditionalGeneration (AutoModelForSeq2SeqLM)", "t5-small",
           _defaults(), _read_bart, _ALIASES),
    Family("mbart", "MBartConfig", "MBartForConditionalGeneration (AutoModelForSeq2SeqLM)", "t5-small",
           _defaults(), _read_mbart, _ALIASES),
    Family("marian", "MarianConfig", "MarianMTModel (AutoModelForSeq2SeqLM)", "transformer-base",
           _defaults(vocab_size=58101, decoder_vocab_size=None), _read_marian, _ALIASES),
    Family("pegasus", "PegasusConfig", "PegasusForConditionalGeneration (AutoModelForSeq2SeqLM)", "t5-small",
           _defaults(), _read_pegasus, _ALIASES),
)  # fmt: skip
