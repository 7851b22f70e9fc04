"""Keys every Hugging Face ``config.json`` may carry that never change a model's size or cost, with the reason.

:mod:`embedcalc.sources.hf` maps the keys that do change the cost, family by family, and refuses every key that is
in neither place: a key embedcalc cannot classify might change the model, so it is never dropped silently.

The lists follow transformers' ``PretrainedConfig`` (the attributes every config has, in today's and in older
files, which were often saved with every default written out) and ``GenerationConfig`` (generation settings that
older files keep at top level).
"""

from __future__ import annotations

from typing import Any

METADATA = "metadata (names, versions, hub bookkeeping); no effect on the model"
RUNTIME = (
    "a runtime switch of transformers (returned outputs, caching, attention kernel); same weights and matmuls"
)
TOKEN_ID = "a token id: it indexes the vocabulary and sizes nothing"
TASK = "labels of a task head; the counted model has no classification head"
GENERATION = "a generate() setting: it decides how many forward passes run, not what one pass costs"
TOKENIZER = "a tokenizer setting; no effect on the model"
INIT = "an initialisation scale; no effect on sizes or FLOPs"
EPSILON = "a norm epsilon; numerics only"
ROPE = "RoPE frequencies and scaling: rotary embeddings have no parameters and no matmul FLOPs"
DROPOUT = (
    "a dropout probability: no parameters or matmul FLOPs (embedcalc's one `dropout` field, mapped from {key}, "
    "adds the 1-byte dropout masks to training activations)"
)
CHUNKING = "computes the FFN in chunks of positions: the same parameters and FLOPs"

GENERATION_KEYS = frozenset(
    {
        "assistant_confidence_threshold", "assistant_lookbehind", "bad_words_ids", "begin_suppress_tokens",
        "diversity_penalty", "do_sample", "early_stopping", "encoder_no_repeat_ngram_size",
        "encoder_repetition_penalty", "epsilon_cutoff", "eta_cutoff", "exponential_decay_length_penalty",
        "forced_bos_token_id", "forced_eos_token_id", "length_penalty", "max_length", "max_new_tokens",
        "min_length", "min_new_tokens", "no_repeat_ngram_size", "num_assistant_tokens",
        "num_assistant_tokens_schedule", "num_beam_groups", "num_beams", "num_return_sequences", "output_scores",
        "remove_invalid_values", "repetition_penalty", "return_dict_in_generate", "suppress_tokens",
        "target_lookbehind", "temperature", "top_k", "top_p", "typical_p", "task_specific_params",
        "cache_implementation", "constraints", "dola_layers", "force_words_ids", "forced_decoder_ids",
        "guidance_scale", "low_memory", "max_time", "min_p", "penalty_alpha", "prefill_chunk_size",
        "renormalize_logits", "sequence_bias", "stop_strings", "token_healing", "top_h", "watermarking_config",
        "_from_model_config",
    }
)  # fmt: skip

COMMON_REASONS: dict[str, str] = {
    "_name_or_path": METADATA,
    "name_or_path": METADATA,
    "transformers_version": METADATA,
    "_commit_hash": METADATA,
    "model_type": "selects the family (mapped above)",
    "use_cache": "whether generate() keeps a KV cache; embedcalc reports the KV cache of every decoder",
    "output_past": "the old name of use_cache; embedcalc reports the KV cache of every decoder",
    "output_hidden_states": RUNTIME,
    "output_attentions": RUNTIME,
    "return_dict": RUNTIME,
    "use_return_dict": RUNTIME,
    "torchscript": RUNTIME,
    "_attn_implementation": RUNTIME,
    "_attn_implementation_internal": RUNTIME,
    "attn_implementation": RUNTIME,
    "_experts_implementation": RUNTIME,
    "use_bfloat16": "a TPU-era storage hint; memory is computed for --dtype",
    "xla_device": RUNTIME,
    "tf_legacy_loss": "a TensorFlow loss switch; no effect on the PyTorch model's cost",
    "bos_token_id": TOKEN_ID,
    "eos_token_id": TOKEN_ID,
    "pad_token_id": TOKEN_ID,
    "sep_token_id": TOKEN_ID,
    "cls_token_id": TOKEN_ID,
    "mask_token_id": TOKEN_ID,
    "unk_token_id": TOKEN_ID,
    "decoder_start_token_id": TOKEN_ID,
    "id2label": TASK,
    "label2id": TASK,
    "num_labels": TASK,
    "problem_type": TASK,
    "finetuning_task": TASK,
    "classifier_dropout": TASK + " (its dropout)",
    "tokenizer_class": TOKENIZER,
    "prefix": TOKENIZER + " (a prompt prefix)",
    "initializer_range": INIT,
    "initializer_factor": INIT,
    "init_std": INIT,
    "layer_norm_eps": EPSILON,
    "layer_norm_epsilon": EPSILON,
    "rms_norm_eps": EPSILON,
    "chunk_size_feed_forward": CHUNKING,
    "gradient_checkpointing": (
        "a training-time switch (recompute activations in the backward pass); use --recompute full to model it"
    ),
    "auto_map": (
        "custom modeling code on the hub, used only with trust_remote_code=True; embedcalc counts transformers' "
        "own class for this model_type"
    ),
    "_attn_implementation_autoset": RUNTIME,
    "_output_attentions": RUNTIME,
    "_experts_implementation_internal": RUNTIME,
    "use_flash_attn": RUNTIME,
    "use_flash_attention_2": RUNTIME,
    "_flash_attn_2_enabled": RUNTIME,
    "_num_labels": TASK,
    "classifier_dropout_prob": TASK + " (its dropout)",
    "unsloth_version": "written by Unsloth when it saves a model; " + METADATA,
    "unsloth_fixed": "written by Unsloth when it saves a model; " + METADATA,
    "transformers.js_config": (
        "transformers.js's runtime settings (ONNX dtypes per session, KV cache dtype, device), written by its "
        "conversion scripts; transformers never reads it"
    ),
    "is_llama_config": "a marker of nanotron / SmolLM conversions that transformers never reads",
    "rope_interleaved": (
        "nanotron's rotary channel layout (interleaved or halves), never read by transformers: rotary embeddings "
        "have no parameters either way"
    ),
    "use_mrope": (
        "Qwen2-VL's multimodal RoPE switch, left in text-only Qwen2 / Qwen2.5 files; transformers' text model "
        "never reads it, and rotary embeddings have no parameters"
    ),
    "rope_theta": ROPE,
    "rope_scaling": ROPE,
    "rope_type": ROPE,
    "rope_parameters": ROPE,
    "pretraining_tp": "how the matmuls were split over tensor-parallel ranks in pre-training; the same FLOPs",
    "layerdrop": "skips whole layers at random during training; the model holds and runs all of them",
    "encoder_layerdrop": "skips whole layers at random during training; the model holds and runs all of them",
    "decoder_layerdrop": "skips whole layers at random during training; the model holds and runs all of them",
    "compression_config": (
        "how llm-compressor stored the weights; embedcalc counts the unquantized model (pass --dtype for memory)"
    ),
    "quantization_config": (
        "how the checkpoint's weights are quantized, by a method embedcalc does not name (it reads fp8, mxfp4 "
        "and ModelOpt FP8 / NVFP4); embedcalc counts the unquantized model, so pass --dtype int8 or int4 for "
        "weight-only quantized memory"
    ),
}

# Keys whose value decides whether they are harmless: (harmless values, what a harmful value would change).
CONDITIONAL: dict[str, tuple[tuple[Any, ...], str]] = {
    "pruned_heads": (({}, None), "pruned heads remove rows of Q/K/V and columns of the output projection"),
    "tie_encoder_decoder": ((False, None), "it shares every encoder weight with the decoder"),
    "add_cross_attention": ((False, None), "it adds a cross-attention sublayer to every block"),
    "cross_attention_hidden_size": ((None,), "it adds a projection of the encoder states"),
    "is_decoder": ((False, None), "it turns the encoder into a causal decoder with a KV cache"),
    "is_encoder_decoder": ((False, None), "it claims an encoder-decoder, which this family is not"),
    "per_layer_config": ((None, {}), "it gives layers different shapes"),
}  # fmt: skip


# Key shapes that cannot change a shape whatever the family: (suffix or prefix, reason).
SUFFIXES = (
    ("_token_id", TOKEN_ID), ("_token_ids", TOKEN_ID), ("_eps", EPSILON), ("_epsilon", EPSILON),
    ("dropout", "a dropout probability: no parameters or matmul FLOPs"),
    ("_dropout_prob", "a dropout probability: no parameters or matmul FLOPs"),
    ("_pdrop", "a dropout probability: no parameters or matmul FLOPs"),
    ("dropout_rate", "a dropout probability: no parameters or matmul FLOPs"),
)  # fmt: skip
PREFIXES = (("initializer_", INIT), ("init_", INIT), ("output_", RUNTIME))


def common_reason(key: str, value: Any) -> str | None:
    """Why ``key`` never changes the cost, or None when embedcalc does not know the key."""
    if key in COMMON_REASONS:
        return COMMON_REASONS[key]
    if key in GENERATION_KEYS:
        return GENERATION
    if key == "eos_token_ids":
        return TOKEN_ID
    for suffix, reason in SUFFIXES:
        if key.endswith(suffix):
            return reason
    for prefix, reason in PREFIXES:
        if key.startswith(prefix):
            return reason
    if key in ("torch_dtype", "dtype"):
        return (
            f"the dtype the checkpoint names ({value}); the model's dtype is read from dtype / torch_dtype "
            "or a quantization_config in fp8, mxfp4 or nvfp4, and --dtype overrides it"
        )
    return None


def conditional_problem(key: str, value: Any) -> str | None:
    """For a key of :data:`CONDITIONAL`: None when its value is harmless, else what it would change."""
    harmless, change = CONDITIONAL[key]
    if any(value == h and type(value) is type(h) for h in harmless):
        return None
    return change


def dropout_reason(mapped_from: str) -> str:
    return DROPOUT.format(key=mapped_from)
