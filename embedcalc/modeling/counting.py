"""Parameters and FLOPs of the torch model, per analytic breakdown key, measured rather than computed.

Parameters are the ``numel`` of the model's parameters (tied weights are one ``Parameter``, counted once). FLOPs
are what ``torch.utils.flop_counter.FlopCounterMode`` records during a forward pass on the meta device (shapes
only, nothing allocated, so GPT-3 175B counts in seconds): 2 per multiply-accumulate, matmuls only.

A module path maps to its breakdown key by dropping ``layers.<i>``, turning ``.`` into ``/``, writing ``in_`` as
``in``, filing a mixture of experts' ``ffn.moe.*`` under ``moe/*`` (its norms stay ``ffn/norm``), and keeping as
many segments as the key has (``embedding/position`` for ``embedding.position.decoder``, ``pooler`` for
``pooler.dense``, ``decoder/moe/experts`` for ``decoder.layers.4.ffn.moe.experts``, ``decoder/attention/norm`` for
a sandwich's ``attention.norm.after``). FLOPs are read from the modules whose path is exactly a key, so nothing is
counted twice; every FLOP the counter saw must land on a key (checked). Mixture-of-experts layers route
deterministically on the meta device (:mod:`embedcalc.modeling.moe`), so the count needs no data.

Attention cores: eager attention runs Q·Kᵀ in ``scores`` and A·V in ``context``, each counted on its own. SDPA
is one fused op (on the meta device it runs as two bmm's inside that op, on CUDA as one kernel): its measured
count, which ``FlopCounterMode`` defines as bmm(Q, Kᵀ) + bmm(A, V), is split into ``scores`` and ``context``
in the ratio of the query/key head width to the value head width (equal for standard attention, so in half;
nope + rope : v for latent attention). Layers with attention sinks run the eager core under either
implementation. On a real CPU, ``FlopCounterMode`` counts SDPA as 0 (PyTorch issue 195460);
:func:`flop_counter_mode` registers the CPU kernel so that even a CPU count is not silently short, and
:func:`component_flops` always counts on the meta device.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from embedcalc.config.resolved import ResolvedShape
from embedcalc.modeling.attention import AttentionImpl
from embedcalc.modeling.attention_parts import FusedCore
from embedcalc.modeling.model import TransformerModel, build_model

# Segments a breakdown key keeps, by its first segment.
_KEY_DEPTH = {"embedding": 2, "encoder": 3, "decoder": 3, "pooler": 1, "head": 2}
_SDPA = "sdpa"


def _segments(module_path: str) -> list[str]:
    """The path's segments as keys spell them: no ``layers.<i>``, no trailing ``_``, ``ffn.moe`` as ``moe``."""
    segments = [
        s.removesuffix("_") for s in module_path.split(".") if s and s != "layers" and not s.isdigit()
    ]
    if segments[:1] in (["encoder"], ["decoder"]) and segments[1:3] == ["ffn", "moe"]:
        del segments[1]
    return segments


def component_key(module_path: str) -> str | None:
    """The breakdown key of a module path (``encoder.layers.3.ffn.in_`` -> ``encoder/ffn/in``), None if none.

    The path is relative to the model (no root name). Paths shorter than their key (``encoder.layers.3``) and
    paths outside the keyed tree give None.
    """
    segments = _segments(module_path)
    if not segments or segments[0] not in _KEY_DEPTH:
        return None
    depth = _KEY_DEPTH[segments[0]]
    if segments[0] in ("encoder", "decoder") and segments[1:2] in (
        ["final_norm"],
        ["altup_unembed"],
        ["rope_scale"],
        ["hyper_head"],
    ):
        depth = 2
    if len(segments) < depth:
        return None
    return "/".join(segments[:depth])


def _is_exact(module_path: str) -> bool:
    """Whether ``module_path`` is a key's own module rather than one nested inside it."""
    key = component_key(module_path)
    return key is not None and len(_segments(module_path)) == key.count("/") + 1


def _component_module(module_path: str) -> str:
    """The shortest prefix of ``module_path`` that is its key's own module (``...attention.qkv`` for ``...qkv.q``)."""
    parts = module_path.split(".")
    for end in range(1, len(parts) + 1):
        prefix = ".".join(parts[:end])
        if _is_exact(prefix):
            return prefix
    return module_path


def component_paths(model: nn.Module) -> dict[str, list[str]]:
    """Breakdown key -> the modules holding that component's parameters (one per layer for stack keys).

    A component split into several tensors (``qkv`` into ``q``, ``k``, ``v``) is named by its own module.
    """
    out: dict[str, list[str]] = {}
    for name, param in model.named_parameters():
        if param.numel() == 0:
            continue
        module_path = name.rpartition(".")[0]
        key = component_key(module_path)
        if key is None:
            raise ValueError(f"parameter {name!r} maps to no breakdown key")
        owner = _component_module(module_path)
        if owner not in out.setdefault(key, []):
            out[key].append(owner)
    return out


def component_params(model: nn.Module) -> dict[str, int]:
    """Trainable parameters per breakdown key; tied weights once, zero entries omitted."""
    out: dict[str, int] = {}
    for name, param in model.named_parameters():  # named_parameters yields a shared Parameter once
        key = component_key(name.rpartition(".")[0])
        if key is None:
            raise ValueError(f"parameter {name!r} maps to no breakdown key")
        if param.numel():
            out[key] = out.get(key, 0) + param.numel()
    return out


def component_buffers(model: nn.Module) -> dict[str, int]:
    """Values of the persistent buffers (those ``state_dict`` saves) per breakdown key, zero entries omitted; the
    tables a module recomputes and does not save (RoPE, sinusoidal positions) are left out."""
    out: dict[str, int] = {}
    for name, buffer in model.named_buffers():
        module_path, _, local = name.rpartition(".")
        if local in model.get_submodule(module_path)._non_persistent_buffers_set or not buffer.numel():
            continue
        key = component_key(module_path)
        if key is None:
            raise ValueError(f"buffer {name!r} maps to no breakdown key")
        out[key] = out.get(key, 0) + buffer.numel()
    return out


def _sdpa_flops(
    query_shape: torch.Size, key_shape: torch.Size, value_shape: torch.Size, *args: Any, **kwargs: Any
) -> int:
    """FLOPs of one SDPA call as FlopCounterMode counts its CUDA kernels: bmm(Q, Kᵀ) + bmm(A, V), mask ignored."""
    batch, heads, query_len, qk_dim = query_shape
    key_len, value_dim = key_shape[-2], value_shape[-1]
    return 2 * batch * heads * query_len * key_len * (qk_dim + value_dim)


def flop_counter_mode() -> FlopCounterMode:
    """A silent ``FlopCounterMode`` that also counts SDPA's CPU kernel (PyTorch issue 195460)."""
    mapping: dict[Any, Any] = {}
    cpu_kernel = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    if cpu_kernel is not None:
        mapping[cpu_kernel] = _sdpa_flops
    return FlopCounterMode(display=False, custom_mapping=mapping)


def _strip_root(name: str) -> str:
    """``TransformerModel.encoder.layers.0.attention.qkv`` -> ``encoder.layers.0.attention.qkv``."""
    return name.partition(".")[2]


def _sdpa_widths(model: nn.Module) -> dict[str, tuple[int, int]]:
    """Module path -> (query/key head width, value head width) of every fused attention core."""
    return {
        name: (module.qk_head_dim, module.v_head_dim)
        for name, module in model.named_modules()
        if isinstance(module, FusedCore)
    }


def _attribute(counts: dict[str, dict[Any, int]], widths: dict[str, tuple[int, int]]) -> dict[str, int]:
    """Sum the counter's per-module counts onto breakdown keys; split SDPA into scores and context.

    SDPA's bmm(Q, Kᵀ) + bmm(A, V) = 2 b h T S (d_qk + d_v) splits exactly as d_qk : d_v (``widths``, per core).
    """
    out: dict[str, int] = {}
    for name, per_op in counts.items():
        path = _strip_root(name)
        if not path or not _is_exact(path):
            continue
        key = component_key(path)
        assert key is not None
        flops = sum(per_op.values())
        if key.endswith("/" + _SDPA):
            base = key.removesuffix(_SDPA)
            qk, v = widths[path]
            scores = flops * qk // (qk + v)
            out[base + "scores"] = out.get(base + "scores", 0) + scores
            out[base + "context"] = out.get(base + "context", 0) + flops - scores
        else:
            out[key] = out.get(key, 0) + flops
    return {k: v for k, v in out.items() if v}


def _inputs(
    config: ResolvedShape, batch_size: int, seq_len: int, tgt_len: int | None, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor | None]:
    ids = torch.zeros(batch_size, seq_len, dtype=torch.long, device=device)  # (B, S)
    if config.architecture != "encoder-decoder":
        return ids, None
    tgt = torch.zeros(
        batch_size, tgt_len if tgt_len is not None else seq_len, dtype=torch.long, device=device
    )
    return ids, tgt  # (B, S), (B, T)


def _model_device(model: nn.Module) -> torch.device:
    for tensor in [*model.parameters(), *model.buffers()]:
        return tensor.device
    return torch.device("meta")


def component_flops(
    config: ResolvedShape,
    model: TransformerModel | None = None,
    batch_size: int = 1,
    seq_len: int = 128,
    tgt_len: int | None = None,
    attention: AttentionImpl | None = None,
) -> dict[str, int]:
    """Forward FLOPs per breakdown key, as ``FlopCounterMode`` counts one forward pass on the meta device.

    ``model`` (built from ``config``) defaults to a new one; a model that is not on the meta device is replaced by
    a meta twin with the same attention implementation (so counting never allocates, and never meets the CPU SDPA
    gap). ``attention`` overrides the implementation. ``tgt_len`` is the decoder length of an encoder-decoder (default
    ``seq_len``). Raises RuntimeError if any counted FLOP falls outside the keyed modules, or if attention was
    counted as zero.
    """
    if model is not None and model.config != config:
        raise ValueError("model was built from a different config than the one given")
    impl: AttentionImpl = attention or (model.attention_impl if model is not None else "sdpa")
    if model is None or model.attention_impl != impl or _model_device(model).type != "meta":
        model = build_model(config, attention=impl, device="meta")
    src, tgt = _inputs(config, batch_size, seq_len, tgt_len, torch.device("meta"))
    with torch.no_grad(), flop_counter_mode() as counter:
        model(src, tgt)
    counts = counter.get_flop_counts()
    out = _attribute(counts, _sdpa_widths(model))
    _check_complete(config, out, counter.get_total_flops())
    return out


def _check_complete(config: ResolvedShape, out: dict[str, int], total: int) -> None:
    """Every counted FLOP is on a key, and every stack's attention core was really counted."""
    if sum(out.values()) != total:
        raise RuntimeError(
            f"FlopCounterMode counted {total} FLOPs but {sum(out.values())} landed on breakdown keys "
            "(a matmul ran outside the keyed modules)"
        )
    names = ["encoder", "decoder"] if config.architecture == "encoder-decoder" else [config.architecture]
    for name in names:
        if all(block.attention is None for block in config.stack_plan(name).blocks):
            continue  # no attention layer (a recurrent or mixer-free stack): no core to miss
        if not out.get(f"{name}/attention/scores") or not out.get(f"{name}/attention/context"):
            raise RuntimeError(
                f"{name} attention was counted as 0 FLOPs: FlopCounterMode missed the attention op "
                "(SDPA on a real CPU, PyTorch issue 195460)"
            )
