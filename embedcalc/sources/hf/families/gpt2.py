"""GPT-2 (GPT2LMHeadModel): learned positions, pre-norm, biases, Conv1D projections."""

from __future__ import annotations

from embedcalc.sources.hf import keys as hf_keys
from embedcalc.sources.hf.mappings import map_activation, map_dropout
from embedcalc.sources.hf.reader import MISSING, Family, IgnoredKey, KeyReader


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


FAMILIES = (
    Family("gpt2", "GPT2Config", "GPT2LMHeadModel (AutoModelForCausalLM)", "gpt2",
           dict(vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12, n_head=12, n_inner=None,
                activation_function="gelu_new", resid_pdrop=0.1, tie_word_embeddings=True), _read_gpt2,
           {"hidden_size": "n_embd", "max_position_embeddings": "n_positions", "num_attention_heads": "n_head",
            "num_hidden_layers": "n_layer"}),
)  # fmt: skip
