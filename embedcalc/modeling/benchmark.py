"""Build a model on a real device and time it: the measurement side of ``embedcalc bench``, and
:func:`miniature`, the same architecture at toy size that every run's page-in uses.

Peak memory covers the build and the timed steps (weights, optimizer state, activations), measured by
:func:`embedcalc.modeling.device.peak_memory` after a page-in run of the miniature. bf16/fp16 training keeps fp32
weights and runs the forward under ``torch.autocast`` (mixed precision); inference casts the model to the dtype.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

import torch

from embedcalc.config.resolved import ResolvedShape
from embedcalc.config.schema import ModelConfig
from embedcalc.modeling.adapters import AdapterSite, attach_adapters
from embedcalc.modeling.device import DTYPES, device_name, peak_memory
from embedcalc.modeling.layers import AttentionImpl
from embedcalc.modeling.model import build_model
from embedcalc.modeling.steps import apply_recompute, make_inputs, make_step
from embedcalc.modeling.timing import StepCallback, Timings, time_steps, timed_call


@dataclass(frozen=True)
class BenchSettings:
    """What to run: shapes, dtype, mode, attention implementation, compile, step counts."""

    batch_size: int
    seq_len: int
    tgt_len: int | None
    dtype: str
    mode: Literal["inference", "training"]
    attention: AttentionImpl
    compile: bool
    warmup: int
    repeat: int
    recompute: Literal["none", "selective", "full"] = "none"
    adapters: tuple[AdapterSite, ...] = ()  # a fine-tune: the base frozen, these adapters trained
    saved: tuple[str, ...] = ()  # modules trained whole beside the adapters


@dataclass(frozen=True)
class BenchRun:
    """What was measured."""

    timings: Timings
    build_s: float
    peak_memory_bytes: int
    memory_method: str
    device: str
    threads: int


def miniature(config: ResolvedShape) -> ResolvedShape:
    """The same architecture and options at toy size (embed_dim 64, vocab 128, one layer per distinct block,
    at most 4 experts, MLA dims 16/8, windows and chunks within the 16-token context)."""
    heads = 4
    kv = _mini_kv_heads(config.resolved_kv_heads, config.num_heads, heads)
    context = min(config.max_seq_len, 16)
    # unset fields keep their meaning (a block overrides only its own)
    data = config.model_dump(exclude_unset=True)
    data.update(
        vocab_size=128, max_seq_len=context, embed_dim=64, num_heads=heads, num_kv_heads=kv,
        head_dim=16 if config.head_dim is not None else None, ffn_dim=128, num_layers=1,
        num_decoder_layers=1 if config.num_decoder_layers is not None else None,
        type_vocab_size=min(config.type_vocab_size, 2),
    )  # fmt: skip
    if config.token_embed_dim is not None:
        data["token_embed_dim"] = 32
    if config.rotary_dim is not None:
        data["rotary_dim"] = 8
    if config.sliding_window is not None:
        data["sliding_window"] = min(config.sliding_window, context)
    if config.layers is not None:
        names = list(dict.fromkeys(name for run in config.layers for name in run.pattern))
        data.update(layers=[{"pattern": names, "repeat": 1}], num_layers=len(names))
    specs = [data.get("attention")] + [
        block.get("attention") for block in (data.get("blocks") or {}).values()
    ]
    for spec in specs:  # a block's own KV heads (the NAS models'), scaled as the flat ones
        if spec and spec.get("num_kv_heads") is not None:
            spec["num_kv_heads"] = _mini_kv_heads(spec["num_kv_heads"], config.num_heads, heads)
    if data.get("attention") is not None:  # a config passed through model_dump sets every field, None too
        data["attention"] = _mini_attention(data["attention"], context)
    if data.get("ffn") is not None:
        data["ffn"] = _mini_ffn(data["ffn"])
    for block in (data.get("blocks") or {}).values():
        if block.get("attention") is not None:
            block["attention"] = _mini_attention(block["attention"], context)
        if block.get("ffn") is not None:
            block["ffn"] = _mini_ffn(block["ffn"])
    return ModelConfig.model_validate(data)


def _mini_kv_heads(kv: int, num_heads: int, heads: int) -> int:
    """KV heads at toy size: all ``heads`` for MHA, 1 for MQA, else 2 (GQA), so they divide the 4 query heads."""
    return heads if kv == num_heads else (1 if kv == 1 else 2)


_MINI_MLA = {"q_lora_rank": 16, "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 8, "v_head_dim": 8,
             "qk_head_dim": 16}  # fmt: skip
_MINI_FFN = {"ffn_dim": 128, "expert_dim": 32, "shared_expert_dim": 32}


def _mini_attention(spec: dict[str, Any], context: int) -> dict[str, Any]:
    """An attention spec's sizes at toy scale (only the fields it sets)."""
    out: dict[str, Any] = {k: _MINI_MLA.get(k, v) if v is not None else None for k, v in spec.items()}
    for name in ("sliding_window", "chunk_size"):
        size = out.get(name)
        if size is not None:
            out[name] = min(int(size), context)
    return out


def _mini_ffn(spec: dict[str, Any]) -> dict[str, Any]:
    """An FFN spec's sizes at toy scale: at most 4 experts, top_k within them."""
    out: dict[str, Any] = {k: _MINI_FFN.get(k, v) if v is not None else None for k, v in spec.items()}
    experts = min(int(out["num_experts"]), 4) if out.get("num_experts") is not None else 4
    if "num_experts" in out and out["num_experts"] is not None:
        out["num_experts"] = experts
    if out.get("top_k") is not None:
        out["top_k"] = min(int(out["top_k"]), experts)
    return out


def run_benchmark(
    config: ResolvedShape, settings: BenchSettings, device: torch.device, on_step: StepCallback | None = None
) -> BenchRun:
    """Build ``config`` on ``device`` and time ``settings.repeat`` steps after ``settings.warmup``; on the CPU a
    miniature runs two steps first (the page-in of :func:`~embedcalc.modeling.device.peak_memory`)."""
    tiny = miniature(config)
    length = min(8, tiny.max_seq_len)
    mini = replace(settings, batch_size=1, seq_len=length, tgt_len=None, warmup=1, repeat=1, compile=False,
                   adapters=(), saved=())  # fmt: skip
    with peak_memory(device, lambda: _timed(tiny, mini, device, None)) as peak:
        timings, build_s = _timed(config, settings, device, on_step)
    return BenchRun(timings, build_s, peak.bytes, peak.method, device_name(device), torch.get_num_threads())


def _timed(
    config: ResolvedShape, settings: BenchSettings, device: torch.device, on_step: StepCallback | None
) -> tuple[Timings, float]:
    """Build the model and time its steps; returns the timings and the build time."""
    mixed = settings.mode == "training" and settings.dtype != "fp32"
    model_dtype = torch.float32 if mixed or settings.mode == "training" else DTYPES[settings.dtype]
    model, build_s = timed_call(lambda: build_model(config, attention=settings.attention, device=device,
                                                    dtype=model_dtype), device)  # fmt: skip
    if settings.adapters or settings.saved:
        attach_adapters(model, list(settings.adapters), settings.saved)
    if settings.mode == "training" and settings.recompute != "none":
        apply_recompute(model, settings.recompute)
    runnable: torch.nn.Module = torch.compile(model) if settings.compile else model  # type: ignore[assignment]
    inputs = make_inputs(config, settings.batch_size, settings.seq_len, settings.tgt_len, device)
    step = make_step(runnable, inputs, settings.mode)
    if mixed:
        inner = step

        def step() -> None:
            with torch.autocast(device_type=device.type, dtype=DTYPES[settings.dtype]):
                inner()

    timings = time_steps(step, device, settings.warmup, settings.repeat, on_step)
    return timings, build_s
