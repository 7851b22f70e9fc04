"""The Llama 4 text model (Llama4ForCausalLM; the ``text_config`` of a Llama 4 multimodal file is counted as it).

Meta, "The Llama 4 herd" (2025); transformers' ``configuration_llama4.py`` / ``modeling_llama4.py``. LLaMA-shaped
(RMSNorm pre-norm, bias-free gated MLPs, attention biases when ``attention_bias``, untied head) with:

- **MoE layers** at ``moe_layers``, else every ``interleave_moe_layer_step``-th layer (``range(step - 1, L,
  step)``): a bias-free router Linear(hidden, num_local_experts), ``num_local_experts`` gated experts of
  ``intermediate_size`` (fused ``gate_up_proj``: the same parameters) and one shared expert, a gated MLP of
  ``intermediate_size``; top ``num_experts_per_tok``. Dense layers are a gated MLP of ``intermediate_size_mlp``.
- **NoPE layers**: ``no_rope_layers[i]`` is 1 where layer i uses RoPE (default: every
  ``no_rope_layer_interval``-th layer is NoPE). Neither has parameters. RoPE layers attend in chunks of
  ``attention_chunk_size`` (``layer_types`` ``chunked_attention``; transformers' cache keeps one chunk), NoPE
  layers attend globally.
- **q/k norm** (``use_qk_norm``, RoPE layers): ``Llama4TextL2Norm``, parameter-free; temperature tuning on NoPE
  layers (``attn_temperature_tuning``, ``floor_scale``, ``attn_scale``) scales queries element-wise.

transformers computes every expert on every token (scores of unrouted experts are 0), so ``FlopCounterMode``
sees num_local_experts experts per token where embedcalc counts the top_k a token is routed to (DESIGN §9).
"""

from __future__ import annotations

from typing import Any

from embedcalc.sources.hf.core import read_core
from embedcalc.sources.hf.layered import ignore_moe_keys, int_list, put_layout, read_moe
from embedcalc.sources.hf.reader import MISSING, Family, KeyReader, all_of

CHUNKED, FULL = "chunked_attention", "full_attention"
_SCALE = "attention temperature tuning on NoPE layers: scales the queries element-wise; no parameters"


def _moe_flags(r: KeyReader, layers: int) -> list[bool] | None:
    """Which layers are MoE: ``moe_layers`` when not null (an empty list: none), else the interleave step."""
    key, value, _ = r.value("moe_layers")
    step_key, step, _ = r.value("interleave_moe_layer_step")
    if value is not None:
        r.ignore(step_key, "moe_layers decides which layers are MoE")
        listed = int_list(r, key, value, layers)
        return None if listed is None else [i in listed for i in range(layers)]
    if not isinstance(step, int) or isinstance(step, bool) or step < 1:
        r.problem(step_key, f"{step_key} = {step!r} must be a positive integer")
        return None
    return [i in range(step - 1, layers, step) for i in range(layers)]


def _rope_flags(r: KeyReader, layers: int) -> list[bool] | None:
    """Which layers use RoPE: ``no_rope_layers`` when non-empty, else every ``no_rope_layer_interval``-th is NoPE
    (Llama4TextConfig.__post_init__)."""
    key, value, _ = r.value("no_rope_layers")
    interval_key, interval, _ = r.value("no_rope_layer_interval")
    if value:
        r.ignore(interval_key, "no_rope_layers decides which layers are NoPE")
        if not isinstance(value, list) or len(value) < layers or not all_of(value, {0, 1}):
            r.problem(
                key, f"{key} must list 1 (RoPE) or 0 (NoPE) for each of the {layers} layers; got {value!r}"
            )
            return None
        return [bool(v) for v in value[:layers]]
    if not isinstance(interval, int) or isinstance(interval, bool) or interval < 1:
        r.problem(interval_key, f"{interval_key} = {interval!r} must be a positive integer")
        return None
    return [(i + 1) % interval != 0 for i in range(layers)]


def _chunked(r: KeyReader, layers: int, chunk: Any) -> list[bool] | None:
    """Which layers attend in chunks: ``layer_types`` when the file has it, else the RoPE layers (when
    ``attention_chunk_size`` is set)."""
    rope = _rope_flags(r, layers)
    key, value = r.lookup("layer_types")
    if value is MISSING or value is None:
        return None if rope is None else [flag and chunk is not None for flag in rope]
    if not isinstance(value, list) or len(value) != layers or not all_of(value, {CHUNKED, FULL}):
        r.problem(key, f"layer_types must list {CHUNKED!r} or {FULL!r} for each of the {layers} layers; got "
                       f"{value!r}")  # fmt: skip
        return None
    return [t == CHUNKED and chunk is not None for t in value]


def _read_llama4_text(r: KeyReader) -> None:
    read_core(r, qkv="attention_bias", out="attention_bias", ffn=False)
    r.fixed("ffn_bias", False, "Llama4TextMLP and the experts build no biases")
    ignore_moe_keys(r)
    qk_key, _, _ = r.value("use_qk_norm")
    r.ignore(qk_key, "Llama4TextL2Norm on q and k of the RoPE layers: parameter-free, element-wise only")
    for key in ("attn_temperature_tuning", "floor_scale", "attn_scale"):
        r.ignore(key, _SCALE)
    r.ignore("for_llm_compressor", "a flag of Meta's conversion script for llm-compressor; transformers never "
             "reads it")  # fmt: skip
    layers = r.data.get("num_layers")
    chunk_key, chunk, _ = r.value("attention_chunk_size")
    mlp_key, mlp_width, _ = r.value("intermediate_size_mlp")
    moe = read_moe(r, "num_local_experts", width_key="intermediate_size", extra={"num_shared_experts": 1})
    if moe is None or not isinstance(layers, int):
        return
    flags, chunked = _moe_flags(r, layers), _chunked(r, layers, chunk)
    if flags is None or chunked is None:
        return
    if not any(chunked):
        r.ignore(chunk_key, "no layer attends in chunks")
    variants: dict[str, dict[str, Any]] = {}
    names = []
    for is_moe, is_chunked in zip(flags, chunked, strict=True):
        name = ("moe" if is_moe else "dense") + ("_chunked" if is_chunked else "")
        spec: dict[str, Any] = {"ffn": moe if is_moe else {"ffn_dim": mlp_width}}
        if is_chunked:
            spec["attention"] = {"chunk_size": chunk}
        variants[name] = spec
        names.append(name)
    if not any(flags):
        r.ignore("num_local_experts", "no layer is MoE")
    wanted = [
        "num_local_experts",
        "num_experts_per_tok",
        "intermediate_size",
        mlp_key,
        "moe_layers",
        "interleave_moe_layer_step",
        "no_rope_layers",
        "no_rope_layer_interval",
        "layer_types",
        chunk_key,
    ]
    key = ", ".join(k for k in wanted if k in r.raw) or "num_local_experts"
    note = (f"{sum(flags)} MoE layers ({moe['num_experts']} experts + 1 shared), {layers - sum(flags)} dense "
            f"of {mlp_width}; {sum(chunked)} chunked ({chunk}), {layers - sum(chunked)} global")  # fmt: skip
    put_layout(r, names, variants, key, note)


FAMILIES = (
    Family("llama4_text", "Llama4TextConfig", "Llama4ForCausalLM (AutoModelForCausalLM)", "mixtral-8x7b",
           dict(vocab_size=202048, hidden_size=5120, intermediate_size=8192, intermediate_size_mlp=16384,
                num_hidden_layers=48, num_attention_heads=40, num_key_value_heads=8, head_dim=128,
                hidden_act="silu", max_position_embeddings=4096 * 32, tie_word_embeddings=False,
                attention_dropout=0.0, num_experts_per_tok=1, num_local_experts=16, moe_layers=None,
                interleave_moe_layer_step=1, use_qk_norm=True, no_rope_layers=None, no_rope_layer_interval=4,
                attention_chunk_size=8192, attention_bias=False), _read_llama4_text),
)  # fmt: skip
