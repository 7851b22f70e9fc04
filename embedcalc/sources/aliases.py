"""Key aliases: names from papers, ``torch.nn`` and Hugging Face that map onto embedcalc's canonical fields.

Keys are normalised before validation so that error messages can name the key the user actually wrote.
"""

from __future__ import annotations

ALIASES: dict[str, tuple[str, ...]] = {
    "embed_dim": ("d_model", "hidden_size", "n_embd", "dim", "model_dim"),
    "num_heads": ("nhead", "num_attention_heads", "n_head", "n_heads", "heads"),
    "num_kv_heads": ("num_key_value_heads", "n_kv_heads", "kv_heads"),
    "ffn_dim": ("d_ff", "dim_feedforward", "intermediate_size", "n_inner", "ffn_hidden_size", "hidden_dim"),
    "num_layers": ("n_layer", "num_hidden_layers", "n_layers", "num_encoder_layers", "encoder_layers"),
    "num_decoder_layers": ("decoder_layers", "n_decoder_layers"),
    "max_seq_len": ("n_positions", "max_position_embeddings", "n_ctx", "context_length", "block_size"),
    "vocab_size": ("n_vocab", "ntoken", "padded_vocab_size"),
    "head_dim": ("d_kv", "d_head", "kv_channels"),
    "activation": ("hidden_act", "activation_function", "act_fn"),
    "dropout": ("hidden_dropout_prob", "resid_pdrop", "dropout_rate"),
    "tie_embeddings": ("tie_word_embeddings", "shared_embeddings"),
    "type_vocab_size": ("n_segments",),
    "relative_attention_num_buckets": ("relative_buckets",),
}

# alias -> canonical field name
ALIAS_TO_FIELD: dict[str, str] = {alias: name for name, aliases in ALIASES.items() for alias in aliases}


def canonical_key(key: str) -> str:
    """The canonical field name for ``key`` (itself if it is not an alias)."""
    return ALIAS_TO_FIELD.get(key, key)
