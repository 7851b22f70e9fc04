"""The supported Hugging Face families: how each maps its ``config.json`` keys onto embedcalc's fields.

Every rule here was read off transformers' own ``configuration_*.py`` and ``modeling_*.py`` for the family (the
docstrings say which module does what); the defaults are those of the config classes, which
``tests/test_hf.py`` checks, as it checks every count against a model transformers builds from the same file.
"""

from __future__ import annotations

from embedcalc.config import hf_keys
from embedcalc.config.hf_reader import (
    GATED_ACTIVATIONS,
    MISSING,
    PLAIN_ACTIVATIONS,
    Family,
    IgnoredKey,
    KeyReader,
    Origin,
    map_activation,
    map_dropout,
    yaml_hint,
)


def _read_bert_like(r: KeyReader) -> None:
    """BertModel / RobertaModel: learned positions, segments, embedding LayerNorm, post-norm, pooler."""
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
    r.expect("position_embedding_type", ("absolute",), "older transformers built distance embeddings for it")
    for legacy in ("directionality", "pooler_fc_size", "pooler_num_attention_heads", "pooler_num_fc_layers",
                   "pooler_size_per_head", "pooler_type"):  # fmt: skip
        r.ignore(legacy, "a key of Google's original BERT release that transformers never reads")


def _read_bert(r: KeyReader) -> None:
    _read_bert_like(r)
    r.copy("max_position_embeddings", "max_seq_len")


def _read_roberta(r: KeyReader) -> None:
    """RobertaModel numbers positions from padding_idx + 1 (fairseq's make_positions), so its table of
    max_position_embeddings rows (514) serves max_position_embeddings - pad_token_id - 1 tokens (512)."""
    _read_bert_like(r)
    rows_key, rows, rows_in_file = r.value("max_position_embeddings")
    pad_key, pad, _ = r.value("pad_token_id")
    if not isinstance(pad, int) or isinstance(pad, bool) or pad < 0:
        r.problem(
            pad_key, f"{pad_key} = {pad!r}: RoBERTa numbers positions from pad_token_id + 1 and needs it"
        )
        return
    offset = pad + 1
    origin: Origin = "file" if rows_in_file else "default"
    if isinstance(rows, int) and not isinstance(rows, bool):
        note = f"{rows_key} {rows} - ({pad_key} {pad} + 1): the table's first {offset} rows are never used"
        r.put("max_seq_len", rows - offset, f"{rows_key}, {pad_key}", origin, note)
    else:
        r.put("max_seq_len", rows, rows_key, origin)
    r.put("position_offset", offset, pad_key, "file" if "pad_token_id" in r.raw else "default",
          f"{pad_key} + 1: the table has max_seq_len + {offset} rows")  # fmt: skip


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


def _read_gpt2(r: KeyReader) -> None:
    """GPT2LMHeadModel: learned positions, pre-norm with a final LayerNorm, biases, Conv1D projections."""
    for name, value in (("architecture", "decoder"), ("norm", "layernorm"), ("norm_placement", "pre"),
                        ("embedding_norm", False), ("position", "learned"), ("bias", True),
                        ("lm_head", True)):  # fmt: skip
        r.fixed(name, value)
    r.copy("vocab_size", "vocab_size")
    d = r.copy("n_embd", "embed_dim")
    r.copy("n_layer", "num_layers")
    r.copy("n_head", "num_heads")
    positions = r.copy("n_positions", "max_seq_len")
    r.copy_or("n_inner", "ffn_dim", 4 * d if isinstance(d, int) else None, "n_inner null: 4 * n_embd")
    map_activation(r, "activation_function", gated=False)
    map_dropout(r, "resid_pdrop")
    r.copy("tie_word_embeddings", "tie_embeddings")
    ctx_key, ctx = r.lookup("n_ctx")
    if ctx is not MISSING:
        differs = f" (differs from n_positions {positions}: transformers sizes the table by n_positions)"
        r.ignored.append(IgnoredKey(ctx_key, ctx, "a legacy key; transformers sizes the position table by "
                                    "n_positions" + (differs if ctx != positions else "")))  # fmt: skip
    for key in ("embd_pdrop", "attn_pdrop"):
        r.ignore(key, hf_keys.dropout_reason("resid_pdrop"))
    for key in ("summary_type", "summary_use_proj", "summary_activation", "summary_proj_to_labels",
                "summary_first_dropout"):  # fmt: skip
        r.ignore(key, "configures GPT2DoubleHeadsModel's multiple-choice head; GPT2LMHeadModel has none")
    for key in ("scale_attn_weights", "scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn"):
        r.ignore(key, "scales or upcasts the attention scores: element-wise work, same matmuls")


def _read_opt(r: KeyReader) -> None:
    """OPTForCausalLM: positions offset by 2 rows, optional project_in/out, pre- or post-norm (do_layer_norm_before)."""
    for name, value in (("architecture", "decoder"), ("norm", "layernorm"), ("embedding_norm", False),
                        ("position", "learned"), ("position_offset", 2), ("lm_head", True)):  # fmt: skip
        r.fixed(
            name, value, "OPTLearnedPositionalEmbedding has 2 extra rows" if name == "position_offset" else ""
        )
    r.copy("vocab_size", "vocab_size")
    d = r.copy("hidden_size", "embed_dim")
    r.copy("num_hidden_layers", "num_layers")
    r.copy("num_attention_heads", "num_heads")
    r.copy("ffn_dim", "ffn_dim")
    r.copy("max_position_embeddings", "max_seq_len")
    r.copy("enable_bias", "bias")
    map_activation(r, "activation_function", gated=False)
    map_dropout(r, "dropout")
    r.copy("tie_word_embeddings", "tie_embeddings")
    pre = r.copy(
        "do_layer_norm_before",
        "norm_placement",
        lambda v: "pre" if v is True else "post" if v is False else v,
    )
    remove_key, remove, remove_in_file = r.value("_remove_final_layer_norm")
    if isinstance(remove, bool) and pre in ("pre", "post"):
        keys = "do_layer_norm_before" + (", _remove_final_layer_norm" if remove_in_file else "")
        origin: Origin = "file" if remove_in_file or "do_layer_norm_before" in r.raw else "default"
        final = pre == "pre" and not remove
        r.put("final_norm", final, keys, origin, "OPTDecoder's final_layer_norm: pre-norm and not removed")
    elif remove_in_file:
        r.problem(remove_key, f"{remove_key} must be true or false, got {remove!r}")
    proj_key, proj, proj_in_file = r.value("word_embed_proj_dim")
    if proj is None:
        proj = d
    if proj is not None:
        r.put("token_embed_dim", proj, proj_key, "file" if proj_in_file else "default",
              "project_in / project_out exist when it differs from hidden_size")  # fmt: skip
    r.expect("layer_norm_elementwise_affine", (True,), "LayerNorms without weight and bias")
    for key in ("attention_dropout", "activation_dropout"):
        r.ignore(key, hf_keys.dropout_reason("dropout"))
    r.ignore(
        "layerdrop", "skips whole layers at random during training; the model holds and runs all of them"
    )
    r.ignore("scale_embedding", "a fairseq key that transformers' OPT code never reads")


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
            key == "dense_act_fn" and value not in table
        ):
            r.problem(k, f"{k} = {value!r} contradicts {written} = {proj!r}")
        else:
            r.ignored.append(IgnoredKey(k, value, f"derived by T5Config from {written}"))


def _read_llama_like(r: KeyReader, *, attention_bias: bool | None, mlp_bias: bool | None) -> None:
    """LLaMA-style decoders: RMSNorm (weight only), pre-norm, RoPE, gated MLP (gate, up, down), untied head by
    default. ``attention_bias`` / ``mlp_bias`` None: read from the file (LLaMA); a bool: fixed by the family."""
    for name, value in (("architecture", "decoder"), ("norm", "rmsnorm"), ("norm_placement", "pre"),
                        ("embedding_norm", False), ("position", "rope"), ("bias", False),
                        ("lm_head", True)):  # fmt: skip
        r.fixed(name, value)
    r.copy("vocab_size", "vocab_size")
    r.copy("hidden_size", "embed_dim")
    r.copy("intermediate_size", "ffn_dim")
    r.copy("num_hidden_layers", "num_layers")
    heads = r.copy("num_attention_heads", "num_heads")
    r.copy_or("num_key_value_heads", "num_kv_heads", heads, "null: num_attention_heads")
    if r.has("head_dim"):
        r.copy("head_dim", "head_dim")  # null keeps embedcalc's default, hidden_size / num_attention_heads
    r.copy(
        "max_position_embeddings", "max_seq_len", note="RoPE has no table; used for the extrapolation warning"
    )
    r.copy("tie_word_embeddings", "tie_embeddings")
    map_activation(r, "hidden_act", gated=True)
    map_dropout(r, "attention_dropout")
    for key, name, fixed in (("attention_bias", "qkv_bias", attention_bias), ("attention_bias", "out_bias",
                             attention_bias), ("mlp_bias", "ffn_bias", mlp_bias)):  # fmt: skip
        if fixed is None:
            r.copy(key, name)
    for key in ("rope_theta", "rope_scaling", "rope_parameters", "rope_type"):
        r.ignore(key, hf_keys.ROPE)


def _read_llama(r: KeyReader) -> None:
    _read_llama_like(r, attention_bias=None, mlp_bias=None)
    r.ignore(
        "pretraining_tp", "how Meta split matmuls over tensor-parallel ranks in pre-training; the same FLOPs"
    )
    r.ignore("max_sequence_length", "a key of early (2023) LLaMA conversions that transformers never reads; the "
             "context is max_position_embeddings")  # fmt: skip


def _read_mistral(r: KeyReader) -> None:
    _read_llama_like(r, attention_bias=False, mlp_bias=False)
    r.fixed("qkv_bias", False, "MistralAttention builds no biases")
    r.fixed("out_bias", False)
    r.fixed("ffn_bias", False)
    r.copy("sliding_window", "sliding_window", note="caps the KV cache at this many tokens (rolling buffer)")
    for key in ("attention_bias", "mlp_bias"):
        r.ignore(key, "MistralAttention and MistralMLP build no biases whatever this says")
    r.ignore(
        "layer_types", "MistralModel masks every layer with sliding_window and does not read layer_types"
    )


def _read_qwen2(r: KeyReader) -> None:
    """Qwen2ForCausalLM: LLaMA-like with biases on q/k/v and none on o_proj or the MLP; sliding attention only on
    layers >= max_window_layers when use_sliding_window."""
    _read_llama_like(r, attention_bias=True, mlp_bias=False)
    r.fixed("qkv_bias", True, "Qwen2Attention: q_proj, k_proj, v_proj with bias")
    r.fixed("out_bias", False, "Qwen2Attention: o_proj without bias")
    r.fixed("ffn_bias", False)
    for key in ("attention_bias", "mlp_bias"):
        r.ignore(key, "Qwen2's modules fix their biases (q/k/v yes, o_proj and MLP no) whatever this says")
    _qwen2_window(r)


def _qwen2_window(r: KeyReader) -> None:
    use_key, use, _ = r.value("use_sliding_window")
    window_key, window, _ = r.value("sliding_window")
    layers_key, first_sliding, _ = r.value("max_window_layers")
    types_key, types = r.lookup("layer_types")
    layers = r.data.get("num_layers")
    if types is MISSING or types is None:
        if use is not True or window is None or not isinstance(layers, int):
            reason = "no layer uses sliding attention (use_sliding_window is not true)"
            for key in (window_key, layers_key) + ((types_key,) if types is None else ()):
                r.ignore(key, reason)
            r.ignore(use_key, "false: every layer attends to the whole context")
            return
        types = ["sliding_attention" if window is not None and i >= first_sliding else "full_attention"
                 for i in range(layers)]  # fmt: skip
    kinds = set(types) if isinstance(types, list) else {None}
    if kinds <= {"full_attention"}:
        for key in (use_key, window_key, layers_key, types_key):
            r.ignore(key, "every layer is full_attention: no sliding window")
        return
    if kinds == {"sliding_attention"} and window is not None:
        r.put("sliding_window", window, window_key, "file", "every layer is sliding_attention")
        for key in (use_key, layers_key, types_key):
            r.ignore(key, "every layer is sliding_attention")
        return
    r.problem(types_key if types_key in r.raw else use_key,
              "layers mix full and sliding-window attention, which embedcalc does not model (the KV cache differs "
              f"per layer). {yaml_hint(r.family)}")  # fmt: skip


FAMILIES: dict[str, Family] = {
    f.model_type: f
    for f in (
        Family("bert", "BertConfig", "BertModel (AutoModel, with pooler)", "bert-base",
               dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                    intermediate_size=3072, hidden_act="gelu", hidden_dropout_prob=0.1, max_position_embeddings=512,
                    type_vocab_size=2), _read_bert),
        Family("roberta", "RobertaConfig", "RobertaModel (AutoModel, with pooler)", "bert-base",
               dict(vocab_size=50265, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                    intermediate_size=3072, hidden_act="gelu", hidden_dropout_prob=0.1, max_position_embeddings=512,
                    type_vocab_size=2, pad_token_id=1), _read_roberta),
        Family("distilbert", "DistilBertConfig", "DistilBertModel (AutoModel, no pooler)", "bert-base",
               dict(vocab_size=30522, max_position_embeddings=512, sinusoidal_pos_embds=False, n_layers=6,
                    n_heads=12, dim=768, hidden_dim=3072, dropout=0.1, activation="gelu"), _read_distilbert,
               {"hidden_size": "dim", "num_attention_heads": "n_heads", "num_hidden_layers": "n_layers"}),
        Family("gpt2", "GPT2Config", "GPT2LMHeadModel (AutoModelForCausalLM)", "gpt2",
               dict(vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12, n_head=12, n_inner=None,
                    activation_function="gelu_new", resid_pdrop=0.1, tie_word_embeddings=True), _read_gpt2,
               {"hidden_size": "n_embd", "max_position_embeddings": "n_positions", "num_attention_heads": "n_head",
                "num_hidden_layers": "n_layer"}),
        Family("opt", "OPTConfig", "OPTForCausalLM (AutoModelForCausalLM)", "gpt2",
               dict(vocab_size=50272, hidden_size=768, num_hidden_layers=12, ffn_dim=3072,
                    max_position_embeddings=2048, do_layer_norm_before=True, _remove_final_layer_norm=False,
                    word_embed_proj_dim=None, dropout=0.1, num_attention_heads=12, activation_function="relu",
                    enable_bias=True, tie_word_embeddings=True), _read_opt),
        Family("t5", "T5Config", "T5ForConditionalGeneration (AutoModelForSeq2SeqLM)", "t5-small",
               dict(vocab_size=32128, d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_decoder_layers=None,
                    num_heads=8, relative_attention_num_buckets=32, relative_attention_max_distance=128,
                    dropout_rate=0.1, feed_forward_proj="relu", tie_word_embeddings=True, n_positions=512),
               _read_t5, {"hidden_size": "d_model", "num_attention_heads": "num_heads",
                          "num_hidden_layers": "num_layers", "head_dim": "d_kv"}),
        Family("llama", "LlamaConfig", "LlamaForCausalLM (AutoModelForCausalLM)", "llama-2-7b",
               dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                    num_attention_heads=32, num_key_value_heads=None, hidden_act="silu", max_position_embeddings=2048,
                    tie_word_embeddings=False, attention_bias=False, attention_dropout=0.0, mlp_bias=False,
                    head_dim=None), _read_llama),
        Family("mistral", "MistralConfig", "MistralForCausalLM (AutoModelForCausalLM)", "mistral-7b",
               dict(vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                    num_attention_heads=32, num_key_value_heads=8, head_dim=None, hidden_act="silu",
                    max_position_embeddings=4096 * 32, tie_word_embeddings=False, sliding_window=4096,
                    attention_dropout=0.0), _read_mistral),
        Family("qwen2", "Qwen2Config", "Qwen2ForCausalLM (AutoModelForCausalLM)", "llama-2-7b",
               dict(vocab_size=151936, hidden_size=4096, intermediate_size=22016, num_hidden_layers=32,
                    num_attention_heads=32, num_key_value_heads=32, hidden_act="silu", max_position_embeddings=32768,
                    tie_word_embeddings=False, use_sliding_window=False, sliding_window=4096, max_window_layers=28,
                    attention_dropout=0.0), _read_qwen2),
    )
}  # fmt: skip
"""Supported families by ``model_type``; defaults are those of transformers' config classes (tests check them)."""
