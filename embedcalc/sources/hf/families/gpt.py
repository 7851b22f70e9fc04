"""GPT-style decoders other than GPT-2: GPT-BigCode (multi-query), GPT-Neo (local and global layers), and the
parallel-block families (GPT-J, GPT-NeoX, Phi, Cohere, StableLM, Falcon: attention and MLP read one normalised
input and add to one residual), and the ALiBi families (BLOOM, MPT). Each rule is read off the family's
``modeling_*.py``; partial rotary and ALiBi have no parameters.
"""

from __future__ import annotations

from typing import Any

from embedcalc.sources.hf import keys as hf_keys
from embedcalc.sources.hf.core import read_core, read_shape
from embedcalc.sources.hf.families.llama_like import refuse
from embedcalc.sources.hf.layered import put_windows
from embedcalc.sources.hf.mappings import map_activation, map_biases, map_dropout, map_partial_rotary
from embedcalc.sources.hf.reader import MISSING, Family, KeyReader

_DECODER = (("architecture", "decoder"), ("norm", "layernorm"), ("embedding_norm", False), ("lm_head", True))


def _fixed(r: KeyReader, *pairs: tuple[str, Any]) -> None:
    for name, value in (dict(_DECODER) | dict(pairs)).items():
        r.fixed(name, value)


def _read_gpt_bigcode(r: KeyReader) -> None:
    """GPTBigCodeForCausalLM: GPT-2 with nn.Linear and, when multi_query, one K/V head (c_attn: d + 2 head_dim)."""
    _fixed(r, ("norm_placement", "pre"), ("position", "learned"), ("bias", True))
    r.copy("vocab_size", "vocab_size")
    d = r.copy("n_embd", "embed_dim")
    r.copy("n_layer", "num_layers")
    r.copy("n_head", "num_heads")
    r.copy("n_positions", "max_seq_len")
    r.copy_or("n_inner", "ffn_dim", 4 * d if isinstance(d, int) else None, "n_inner null: 4 * n_embd")
    r.copy(
        "multi_query",
        "num_kv_heads",
        lambda v: 1 if v is True else r.data.get("num_heads") if v is False else v,
    )
    if isinstance(r.data.get("num_kv_heads"), int):
        r.derived("num_key_value_heads", r.data["num_kv_heads"], "1 if multi_query else n_head")
    map_activation(r, "activation_function", gated=False)
    map_dropout(r, "resid_pdrop")
    r.copy("tie_word_embeddings", "tie_embeddings")
    for key in (
        "scale_attn_weights",
        "attention_softmax_in_fp32",
        "scale_attention_softmax_in_fp32",
        "n_ctx",
    ):
        r.ignore(key, "scales or upcasts the attention scores: element-wise work, same matmuls")
    refuse(r, "add_cross_attention", (False,), "a cross-attention sublayer in every block")
    for key in ("inference_runner", "max_batch_size", "max_sequence_length", "pad_key_length",
                "pre_allocate_kv_cache", "validate_runner_input"):  # fmt: skip
        r.ignore(key, "a switch of BigCode's inference runner that transformers never reads")
    for key in ("summary_type", "summary_use_proj", "summary_activation", "summary_proj_to_labels",
                "summary_first_dropout"):  # fmt: skip
        r.ignore(key, "configures a double-heads model's multiple-choice head; the causal LM has none")


def _read_gpt_neo(r: KeyReader) -> None:
    """GPTNeoForCausalLM: learned positions, q/k/v without bias, out_proj with, local layers see window_size (the
    KV cache keeps every token of them: transformers' cache is full in every layer, the mask windows)."""
    _fixed(r, ("norm_placement", "pre"), ("position", "learned"), ("bias", True))
    map_biases(r, qkv=False, out=True, ffn=True)
    r.copy("vocab_size", "vocab_size")
    d = r.copy("hidden_size", "embed_dim")
    layers = r.copy("num_layers", "num_layers")
    r.copy("num_heads", "num_heads")
    r.copy("max_position_embeddings", "max_seq_len")
    r.copy_or("intermediate_size", "ffn_dim", 4 * d if isinstance(d, int) else None, "null: 4 * hidden_size")
    map_activation(r, "activation_function", gated=False)
    map_dropout(r, "resid_dropout")
    r.copy("tie_word_embeddings", "tie_embeddings")
    types_key, spec = r.lookup("attention_types")
    window_key, window, _ = r.value("window_size")
    if spec is MISSING or spec is None:
        spec = [[["global", "local"], (layers or 0) // 2]]
    from embedcalc.config.limits import MAX_HF_LAYERS

    try:  # counted before it is expanded (issue 33: a repeat of 10^29 grew `check` past 3.7 GB)
        total = sum(len(pattern) * repeat for pattern, repeat in spec)
    except (TypeError, ValueError):
        r.problem(types_key, f"{types_key} = {str(spec)[:200]}: expected [[[kinds...], repeat], ...]")
        return
    if (isinstance(layers, int) and total != layers) or not 0 <= total <= MAX_HF_LAYERS:
        r.problem(types_key, f"{types_key} lays out {total:,} layers, num_layers is {layers}")
        return
    kinds = [kind for pattern, repeat in spec for _ in range(repeat) for kind in pattern]
    types = ["sliding_attention" if k == "local" else "full_attention" if k == "global" else k for k in kinds]
    r.ignore("attention_layers", "the expansion of attention_types, derived by GPTNeoConfig")
    for key in ("summary_type", "summary_use_proj", "summary_activation", "summary_proj_to_labels",
                "summary_first_dropout"):  # fmt: skip
        r.ignore(key, "configures a double-heads model's multiple-choice head; the causal LM has none")
    # GPTNeoModel builds DynamicCache(config=...): GPTNeoConfig has neither layer_types nor sliding_window, so
    # every layer is a full cache layer and the local layers' window is only their attention mask
    put_windows(r, types, window, window_key, types_key, full_cache=True)


def _parallel(r: KeyReader, parallel: Any, norms: int) -> None:
    if parallel is True:
        r.fixed("norm_placement", "parallel", "attention and MLP read one normalised input")
        r.fixed("parallel_norms", norms)
    else:
        r.fixed("norm_placement", "pre")


def _read_gptj(r: KeyReader) -> None:
    """GPTJForCausalLM: one ln_1 per block feeding attention (no biases) and MLP (biases) in parallel, rotary on
    rotary_dim channels, a biased LM head."""
    _fixed(r, ("position", "rope"), ("bias", True), ("lm_head_bias", True))
    _parallel(r, True, 1)
    map_biases(r, qkv=False, out=False, ffn=True)
    r.copy("vocab_size", "vocab_size")
    d = r.copy("n_embd", "embed_dim")
    r.copy("n_layer", "num_layers")
    r.copy("n_head", "num_heads")
    r.copy("n_positions", "max_seq_len", note="RoPE has no table")
    r.copy_or("n_inner", "ffn_dim", 4 * d if isinstance(d, int) else None, "n_inner null: 4 * n_embd")
    r.copy("rotary_dim", "rotary_dim")
    r.ignore("rotary", "GPT-J always uses rotary positions")
    r.ignore("scale_attn_weights", "scales the attention scores: element-wise work")
    for key in ("summary_type", "summary_use_proj", "summary_activation", "summary_proj_to_labels",
                "summary_first_dropout"):  # fmt: skip
        r.ignore(key, "configures a double-heads model's multiple-choice head; the causal LM has none")
    map_activation(r, "activation_function", gated=False)
    map_dropout(r, "resid_pdrop")
    r.copy("tie_word_embeddings", "tie_embeddings")


def _read_gpt_neox(r: KeyReader) -> None:
    """GPTNeoXForCausalLM: fused query_key_value, biases (attention_bias for attention), two norms in parallel
    (use_parallel_residual) or sequential pre-norm, rotary on rotary_pct of each head, untied embed_out."""
    _fixed(r, ("position", "rope"), ("bias", True))
    r.copy("vocab_size", "vocab_size")
    r.copy("hidden_size", "embed_dim")
    r.copy("num_hidden_layers", "num_layers")
    r.copy("num_attention_heads", "num_heads")
    r.copy("intermediate_size", "ffn_dim")
    r.copy("max_position_embeddings", "max_seq_len", note="RoPE has no table")
    map_biases(r, qkv="attention_bias", out="attention_bias", ffn=True)
    _, parallel, _ = r.value("use_parallel_residual")
    _parallel(r, parallel, 2)
    map_partial_rotary(r, 0.25, legacy="rotary_pct")
    map_activation(r, "hidden_act", gated=False)
    map_dropout(r, "hidden_dropout")
    r.copy("tie_word_embeddings", "tie_embeddings")
    r.ignore("rotary_emb_base", hf_keys.ROPE)
    r.ignore("use_parallel_residual", "mapped as norm_placement")


def _read_phi(r: KeyReader) -> None:
    """PhiForCausalLM: LayerNorm, one input_layernorm feeding attention and MLP in parallel, biases everywhere,
    half rotary, a biased untied LM head, optional per-head q/k LayerNorms."""
    _fixed(r, ("position", "rope"), ("bias", True), ("lm_head_bias", True))
    _parallel(r, True, 1)
    read_shape(r)
    map_partial_rotary(r, 0.5)
    map_activation(r, "hidden_act", gated=False)
    map_dropout(r, "resid_pdrop")
    r.copy("tie_word_embeddings", "tie_embeddings")
    _, qk, _ = r.value("qk_layernorm")
    if qk is True:
        r.fixed("attention", {"qk_norm": "head"}, "q_layernorm, k_layernorm: LayerNorm(head_dim)")
    r.ignore("qk_layernorm", "mapped as attention.qk_norm")


def _read_cohere(r: KeyReader) -> None:
    """CohereForCausalLM: CohereLayerNorm (weight only), attention and MLP in parallel off one norm, tied head."""
    read_core(
        r, qkv="attention_bias", out="attention_bias", ffn=False, norm="layernorm", placement="parallel"
    )
    r.fixed("norm_bias", False, "CohereLayerNorm has no bias")
    r.fixed("parallel_norms", 1)
    refuse(r, "use_qk_norm", (False,), "CohereLayerNorm q/k norms with separate weights for every head")
    r.ignore("logit_scale", "scales the logits: no parameters")


def _read_stablelm(r: KeyReader) -> None:
    """StableLmForCausalLM: LayerNorm, q/k/v biases (use_qkv_bias), partial rotary, gated MLP without biases;
    use_parallel_residual: one norm feeding both branches."""
    read_core(r, qkv="use_qkv_bias", out=False, ffn=False, norm="layernorm")
    map_partial_rotary(r, 0.25)
    _, parallel, _ = r.value("use_parallel_residual")
    if parallel is True:
        r.data["norm_placement"] = "parallel"
        r.fixed(
            "parallel_norms", 1, "use_parallel_residual: one input_layernorm, attention and MLP in parallel"
        )
    r.ignore("use_parallel_residual", "mapped as norm_placement")
    refuse(r, "qk_layernorm", (False,), "a separate bias-free LayerNorm per head on q and k")


def _read_falcon(r: KeyReader) -> None:
    """FalconForCausalLM: fused query_key_value sized by new_decoder_architecture / multi_query, biases all or none
    (bias), parallel attention with one norm (Falcon-7B) or two (new architecture), ALiBi or RoPE, tied head."""
    _fixed(r, ("lm_head", True))
    r.copy("vocab_size", "vocab_size")
    d = r.copy("hidden_size", "embed_dim")
    r.copy("num_hidden_layers", "num_layers")
    heads = r.copy("num_attention_heads", "num_heads")
    r.copy("max_position_embeddings", "max_seq_len")
    r.copy_or("ffn_hidden_size", "ffn_dim", 4 * d if isinstance(d, int) else None, "null: 4 * hidden_size")
    r.copy("bias", "bias")
    r.copy("alibi", "position", lambda v: "alibi" if v is True else "rope" if v is False else v)
    _, new, _ = r.value("new_decoder_architecture")
    _, mq, _ = r.value("multi_query")
    kv_key, kv, kv_in_file = r.value("num_kv_heads")
    if new is True:
        r.put("num_kv_heads", heads if kv is None else kv, kv_key, "file" if kv_in_file else "default")
    else:
        r.put("num_kv_heads", 1 if mq is True else heads, "multi_query", "file" if "multi_query" in r.raw else
              "default", "multi_query: one K/V head")  # fmt: skip
        r.ignore("num_kv_heads", "read only with new_decoder_architecture")
    if isinstance(heads, int):  # FalconConfig (transformers >= 5.25) derives and writes num_key_value_heads
        computed = (heads if kv is None else kv) if (new is True or mq is not True) else 1
        r.derived(
            "num_key_value_heads",
            computed,
            "num_kv_heads if new_decoder_architecture or not multi_query else 1",
        )
    _, par, _ = r.value("parallel_attn")
    _, lns, _ = r.value("num_ln_in_parallel_attn")
    norms = 2 if (lns == 2 or (lns is None and new is True)) else 1
    _parallel(r, par, norms)
    for key in ("new_decoder_architecture", "multi_query", "parallel_attn", "num_ln_in_parallel_attn"):
        r.ignore(key, "mapped above (num_kv_heads, norm_placement)")
    map_activation(r, "activation", gated=False)
    map_dropout(r, "hidden_dropout")
    r.copy("tie_word_embeddings", "tie_embeddings")
    r.ignore("apply_residual_connection_post_layernorm", "transformers' Falcon never reads it")


def _read_bloom(r: KeyReader) -> None:
    """BloomForCausalLM: ALiBi, word_embeddings_layernorm, fused query_key_value, biases, 4 x hidden GELU MLP."""
    _fixed(r, ("norm_placement", "pre"), ("position", "alibi"), ("bias", True), ("embedding_norm", True))
    r.copy("vocab_size", "vocab_size")
    d = r.copy("hidden_size", "embed_dim")
    r.copy("n_layer", "num_layers")
    r.copy("n_head", "num_heads")
    if isinstance(d, int):
        r.fixed("ffn_dim", 4 * d, "BloomMLP: 4 * hidden_size")
    r.fixed(
        "max_seq_len",
        2048,
        "ALiBi has no table; BLOOM's training context (n_positions is not a BloomConfig key)",
    )
    r.fixed("activation", "gelu_tanh", "bloom_gelu_forward: the tanh approximation")
    map_dropout(r, "hidden_dropout")
    r.copy("tie_word_embeddings", "tie_embeddings")
    for key in ("apply_residual_connection_post_layernorm", "slow_but_exact", "pretraining_tp", "masked_softmax_fusion",
                "bias_dropout_fusion", "skip_bias_add", "skip_bias_add_qkv", "attention_softmax_in_fp32",
                "offset_alibi", "n_inner", "seq_length", "n_positions"):  # fmt: skip
        r.ignore(key, "a Megatron-DeepSpeed training or numerics switch that transformers' BloomModel never "
                 "reads as a shape (same weights and matmuls)")  # fmt: skip


def _read_mpt(r: KeyReader) -> None:
    """MptForCausalLM: ALiBi always, no biases, bias-free LayerNorms, Wqkv fused, 4 x d_model MLP, tied head."""
    _fixed(r, ("norm_placement", "pre"), ("position", "alibi"), ("bias", False), ("norm_bias", False))
    r.copy("vocab_size", "vocab_size")
    d = r.copy("d_model", "embed_dim")
    r.copy("n_layers", "num_layers")
    r.copy("n_heads", "num_heads")
    r.copy("max_seq_len", "max_seq_len", note="ALiBi has no table")
    if isinstance(d, int):
        r.fixed("ffn_dim", 4 * d, "MptMLP: up_proj 4 * hidden_size")
    r.fixed("activation", "gelu")
    r.copy("tie_word_embeddings", "tie_embeddings")
    refuse(r, "expansion_ratio", (4,), "transformers' MptMLP is always 4 x d_model wide")
    refuse(r, "no_bias", (True,), "transformers' MPT builds no biases")
    attn_key, attn = r.lookup("attn_config")
    if isinstance(attn, dict):
        bad = {k: v for k, v in attn.items() if k == "qk_ln" and v} | {
            k: v for k, v in attn.items() if k == "attn_type" and v != "multihead_attention"}  # fmt: skip
        if bad:
            r.problem(attn_key, f"{attn_key} {bad} is not modelled: q/k LayerNorms or another attention kind")
        else:
            r.ignore(attn_key, "ALiBi settings, softmax scale, clipping, kernel: no parameters or matmuls")
    for key in ("learned_pos_emb", "emb_pdrop", "embedding_fraction", "norm_type", "init_device", "logit_scale",
                "init_config", "verbose", "tokenizer_name", "use_cache", "resid_pdrop"):  # fmt: skip
        r.ignore(key, "a MosaicML training key that transformers' MPT never reads as a shape")


_NEOX = dict(
    vocab_size=50432,
    hidden_size=6144,
    num_hidden_layers=44,
    num_attention_heads=64,
    intermediate_size=24576,
    hidden_act="gelu",
    max_position_embeddings=2048,
    tie_word_embeddings=False,
    use_parallel_residual=True,
    attention_bias=True,
    hidden_dropout=0.0,
)

FAMILIES = (
    Family("gpt_bigcode", "GPTBigCodeConfig", "GPTBigCodeForCausalLM (AutoModelForCausalLM)", "gpt2",
           dict(vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12, n_head=12, n_inner=None,
                activation_function="gelu_pytorch_tanh", resid_pdrop=0.1, multi_query=True, tie_word_embeddings=True),
           _read_gpt_bigcode, {"hidden_size": "n_embd", "max_position_embeddings": "n_positions",
                               "num_attention_heads": "n_head", "num_hidden_layers": "n_layer"}),
    Family("gpt_neo", "GPTNeoConfig", "GPTNeoForCausalLM (AutoModelForCausalLM)", "gpt2",
           dict(vocab_size=50257, max_position_embeddings=2048, hidden_size=2048, num_layers=24, attention_types=None,
                num_heads=16, intermediate_size=None, window_size=256, activation_function="gelu_new",
                resid_dropout=0.0, tie_word_embeddings=True),
           _read_gpt_neo, {"num_attention_heads": "num_heads", "num_hidden_layers": "num_layers"}),
    Family("gptj", "GPTJConfig", "GPTJForCausalLM (AutoModelForCausalLM)", "gpt2",
           dict(vocab_size=50400, n_positions=2048, n_embd=4096, n_layer=28, n_head=16, rotary_dim=64, n_inner=None,
                activation_function="gelu_new", resid_pdrop=0.0, tie_word_embeddings=False),
           _read_gptj, {"max_position_embeddings": "n_positions", "hidden_size": "n_embd",
                        "num_attention_heads": "n_head", "num_hidden_layers": "n_layer"}),
    Family("gpt_neox", "GPTNeoXConfig", "GPTNeoXForCausalLM (AutoModelForCausalLM)", "gpt2", _NEOX,
           _read_gpt_neox),
    Family("phi", "PhiConfig", "PhiForCausalLM (AutoModelForCausalLM)", "gpt2",
           dict(vocab_size=51200, hidden_size=2048, intermediate_size=8192, num_hidden_layers=24,
                num_attention_heads=32, num_key_value_heads=None, hidden_act="gelu_new", max_position_embeddings=2048,
                resid_pdrop=0.0, tie_word_embeddings=False, qk_layernorm=False), _read_phi),
    Family("cohere", "CohereConfig", "CohereForCausalLM (AutoModelForCausalLM)", "llama-2-7b",
           dict(vocab_size=256000, hidden_size=8192, intermediate_size=22528, num_hidden_layers=40,
                num_attention_heads=64, num_key_value_heads=None, hidden_act="silu", max_position_embeddings=8192,
                tie_word_embeddings=True, attention_bias=False, attention_dropout=0.0), _read_cohere),
    Family("stablelm", "StableLmConfig", "StableLmForCausalLM (AutoModelForCausalLM)", "llama-2-7b",
           dict(vocab_size=50304, intermediate_size=6912, hidden_size=2560, num_hidden_layers=32,
                num_attention_heads=32, num_key_value_heads=32, hidden_act="silu", max_position_embeddings=4096,
                tie_word_embeddings=False, use_qkv_bias=False, use_parallel_residual=False, attention_dropout=0.0),
           _read_stablelm),
    Family("falcon", "FalconConfig", "FalconForCausalLM (AutoModelForCausalLM)", "llama-2-7b",
           dict(vocab_size=65024, hidden_size=4544, num_hidden_layers=32, num_attention_heads=71,
                num_ln_in_parallel_attn=None, hidden_dropout=0.0, num_kv_heads=None, alibi=False,
                new_decoder_architecture=False, multi_query=True, parallel_attn=True, bias=False,
                max_position_embeddings=2048, ffn_hidden_size=None, activation="gelu", tie_word_embeddings=True),
           _read_falcon, {"n_layer": "num_hidden_layers", "n_head": "num_attention_heads"}),
    Family("bloom", "BloomConfig", "BloomForCausalLM (AutoModelForCausalLM)", "gpt2",
           dict(vocab_size=250880, hidden_size=64, n_layer=2, n_head=8, hidden_dropout=0.0, tie_word_embeddings=True),
           _read_bloom, {"num_hidden_layers": "n_layer", "num_attention_heads": "n_head", "n_embed": "hidden_size"}),
    Family("mpt", "MptConfig", "MptForCausalLM (AutoModelForCausalLM)", "gpt2",
           dict(d_model=2048, n_heads=16, n_layers=24, max_seq_len=2048, vocab_size=50368, tie_word_embeddings=True),
           _read_mpt, {"num_attention_heads": "n_heads", "hidden_size": "d_model", "num_hidden_layers": "n_layers"}),
)  # fmt: skip
