"""T5 (T5ForConditionalGeneration): relative position bias, RMS norms, ReLU or gated FFN, tied or
untied head; mT5 the same; UMT5 (UMT5ForConditionalGeneration; Chung et al. 2023, "UniMax", arXiv:2304.09151)
with the relative bias table in every layer's self-attention (``UMT5LayerSelfAttention`` builds ``UMT5Attention``
with ``has_relative_attention_bias=True`` in every layer, its cross-attention none), the layer model's
``relative_bias_per_layer``."""

from __future__ import annotations

from embedcalc.sources.hf import keys as hf_keys
from embedcalc.sources.hf.mappings import GATED_ACTIVATIONS, PLAIN_ACTIVATIONS, map_dropout
from embedcalc.sources.hf.reader import MISSING, Family, IgnoredKey, KeyReader, Origin


def _read_t5(r: KeyReader) -> None:
    """T5ForConditionalGeneration: no biases, T5LayerNorm (RMS, weight only), relative bias in the first block of
    each stack, ReLU (v1) or gated-GELU (v1.1) FFN."""
    for name, value in (("architecture", "encoder-decoder"), ("norm", "rmsnorm"), ("norm_placement", "pre"),
                        ("final_norm", True), ("embedding_norm", False), ("position", "relative"),
                        ("bias", False), ("lm_head", True)):  # fmt: skip
        r.fixed(name, value)
    r.copy("vocab_size", "vocab_size")
    r.copy("d_model", "embed_dim")
    r.copy("d_kv", "head_dim")
    r.copy("d_ff", "ffn_dim")
    layers = r.copy("num_layers", "num_layers")
    r.copy_or("num_decoder_layers", "num_decoder_layers", layers, "null: num_layers")
    r.copy("num_heads", "num_heads")
    r.copy("relative_attention_num_buckets", "relative_attention_num_buckets")
    r.copy("relative_attention_max_distance", "relative_attention_max_distance")
    key, positions, in_file = r.value("n_positions")
    note = "T5 has no position table; only the extrapolation warning uses it"
    if not in_file:
        note += " (T5Config has no such key: 512 is T5's pre-training context, Raffel et al. 2020, §3.1.2)"
    r.put("max_seq_len", positions, key, "file" if in_file else "default", note)
    map_dropout(r, "dropout_rate")
    _t5_ffn(r)
    _t5_head(r)
    r.expect("is_encoder_decoder", (True,), "T5ForConditionalGeneration is always an encoder-decoder")
    r.ignore("classifier_dropout", hf_keys.TASK)


def _read_umt5(r: KeyReader) -> None:
    _read_t5(r)
    r.fixed("relative_bias_per_layer", True, "UMT5Attention: a relative_attention_bias table in every layer")


def _t5_head(r: KeyReader) -> None:
    """T5's LM head is untied when tie_word_embeddings is false (files written before transformers 5, as every
    published v1.1 / Flan-T5 file is) or scale_decoder_outputs is false (files written by transformers >= 5, which
    forces tie_word_embeddings to true and keeps the v1.1 marker there). Mesh TensorFlow rescales the decoder output
    exactly when the head is tied, so the two keys say one thing. transformers >= 5 builds a fresh model tied either
    way, but from_pretrained keeps a checkpoint's separate lm_head untied, and the v1.1 checkpoints have one."""
    tie_key, tie, tie_in_file = r.value("tie_word_embeddings")
    scale_key, scale = r.lookup("scale_decoder_outputs")
    for key, value in ((tie_key, tie), (scale_key, scale)):
        if value is not MISSING and not isinstance(value, bool):
            r.problem(key, f"{key} must be true or false, got {value!r}")
            return
    untied = tie is False or scale is False
    keys = (
        ", ".join(k for k, v in ((tie_key, tie_in_file), (scale_key, scale is not MISSING)) if v) or tie_key
    )
    origin: Origin = "file" if tie_in_file or scale is not MISSING else "default"
    note = (
        "untied: the v1.1 head (transformers >= 5 ties a model built from the config alone, but from_pretrained "
        "keeps the checkpoint's separate lm_head)"
        if untied
        else "tied: the head reuses the shared token table and rescales the decoder output"
    )
    r.put("tie_embeddings", not untied, keys, origin, note)


def _t5_ffn(r: KeyReader) -> None:
    """feed_forward_proj: ``ACT`` (T5DenseActDense: wi, wo) or ``gated-ACT`` (T5DenseGatedActDense: wi_0, wi_1, wo)."""
    written, proj, from_file = r.value("feed_forward_proj")
    parts = proj.split("-") if isinstance(proj, str) else []
    gated = len(parts) == 2 and parts[0] == "gated"
    act = parts[-1] if parts and (gated or len(parts) == 1) else None
    table = GATED_ACTIVATIONS if gated else PLAIN_ACTIVATIONS
    if act not in table:
        r.problem(written, f"{written} = {proj!r}: expected ACT or gated-ACT with ACT one of "
                  f"{', '.join(sorted(GATED_ACTIVATIONS if gated else PLAIN_ACTIVATIONS))}")  # fmt: skip
        return
    r.put("activation", table[act], written, "file" if from_file else "default",
          "gated: wi_0, wi_1, wo" if gated else "wi, wo")  # fmt: skip
    for key, expected in (
        ("is_gated_act", gated),
        ("dense_act_fn", "gelu_new" if proj == "gated-gelu" else act),
    ):
        k, value = r.lookup(key)
        if value is MISSING:
            continue
        if (key == "is_gated_act" and value is not expected) or (
            key == "dense_act_fn"
            and (not isinstance(value, str) or value not in table)  # a mapping is no name
        ):
            r.problem(k, f"{k} = {value!r} contradicts {written} = {proj!r}")
        else:
            r.ignored.append(IgnoredKey(k, value, f"derived by T5Config from {written}"))


# T5Config's and MT5Config's attribute_map (the same in both)
_T5_ATTRIBUTES = {"hidden_size": "d_model", "num_attention_heads": "num_heads", "num_hidden_layers": "num_layers",
                  "head_dim": "d_kv"}  # fmt: skip

FAMILIES = (
    Family("t5", "T5Config", "T5ForConditionalGeneration (AutoModelForSeq2SeqLM)", "t5-small",
           dict(vocab_size=32128, d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_decoder_layers=None,
                num_heads=8, relative_attention_num_buckets=32, relative_attention_max_distance=128,
                dropout_rate=0.1, feed_forward_proj="relu", tie_word_embeddings=True, n_positions=512),
           _read_t5, _T5_ATTRIBUTES),
    Family("mt5", "MT5Config", "MT5ForConditionalGeneration (AutoModelForSeq2SeqLM)", "t5-small",
           dict(vocab_size=250112, d_model=512, d_kv=64, d_ff=1024, num_layers=8, num_decoder_layers=None,
                num_heads=6, relative_attention_num_buckets=32, relative_attention_max_distance=128,
                dropout_rate=0.1, feed_forward_proj="gated-gelu", tie_word_embeddings=True, n_positions=512),
           _read_t5, _T5_ATTRIBUTES),
    Family("umt5", "UMT5Config", "UMT5ForConditionalGeneration (AutoModelForSeq2SeqLM)", "t5-small",
           dict(vocab_size=250112, d_model=512, d_kv=64, d_ff=1024, num_layers=8, num_decoder_layers=None,
                num_heads=6, relative_attention_num_buckets=32, relative_attention_max_distance=128,
                dropout_rate=0.1, feed_forward_proj="gated-gelu", tie_word_embeddings=True, n_positions=512),
           _read_umt5, _T5_ATTRIBUTES),
)  # fmt: skip
