"""OPT (OPTForCausalLM): positions offset by 2 rows, optional project_in/out, pre- or post-norm."""

from __future__ import annotations

from embedcalc.sources.hf import keys as hf_keys
from embedcalc.sources.hf.mappings import map_activation, map_dropout
from embedcalc.sources.hf.reader import Family, KeyReader, Origin


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


FAMILIES = (
    Family("opt", "OPTConfig", "OPTForCausalLM (AutoModelForCausalLM)", "gpt2",
           dict(vocab_size=50272, hidden_size=768, num_hidden_layers=12, ffn_dim=3072,
                max_position_embeddings=2048, do_layer_norm_before=True, _remove_final_layer_norm=False,
                word_embed_proj_dim=None, dropout=0.1, num_attention_heads=12, activation_function="relu",
                enable_bias=True, tie_word_embeddings=True), _read_opt),
)  # fmt: skip
