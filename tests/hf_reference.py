"""The transformers side of the layer-model parity tests: the model transformers builds from a hub config.json.

Independent of embedcalc: everything here reads transformers' own config classes and modules. The counting rule
of the README: encoders as ``AutoModel``, decoders as ``AutoModelForCausalLM``; a multimodal file (Gemma 3,
Llama 4) as the causal LM of its ``text_config``. Models are built on the meta device (no memory) with eager
attention, so ``FlopCounterMode`` sees the score matmuls (PyTorch issue 195460: SDPA on the CPU counts 0).

Beside it, the one embedcalc helper the parity modules share, :func:`mapped_config`: the config embedcalc reads from
the same file, which every test compares with transformers' side.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from paths import HF_FIXTURES, PUBLISHED_SIZES

from embedcalc.analysis.memory import MemoryEstimate, estimate_memory
from embedcalc.analysis.workload import Workload
from embedcalc.config.schema import ModelConfig
from embedcalc.sources.hf import map_hf_config
from embedcalc.sources.loading import validate_config

FIXTURES = HF_FIXTURES
ENCODERS = {"albert"}
# keys a from_config build must not see: a quantiser would replace modules; remote code is never run
_BUILD_IGNORED = ("quantization_config", "auto_map")


@dataclass(frozen=True)
class Published:
    """One row of ``tests/fixtures/published_sizes.yaml`` (its header says what each field means)."""

    fixture: str
    group: str
    model_type: str
    built_as: str
    total: int
    active: int | None = None
    preset: str | None = None

    @property
    def auto_class(self) -> str:
        return "AutoModel" if self.built_as == "AutoModel" else f"AutoModelFor{self.built_as}"


@functools.cache
def published_sizes() -> dict[str, Published]:
    """Every row of the published sizes, by fixture name (a fixture appears in one group only)."""
    data = yaml.safe_load(PUBLISHED_SIZES.read_text(encoding="utf-8"))
    rows: dict[str, Published] = {}
    for group, members in data.items():
        for fixture, fields in members.items():
            assert fixture not in rows, f"{fixture} is in two groups of published_sizes.yaml"
            rows[fixture] = Published(fixture=fixture, group=group, **fields)
    return rows


def published(group: str) -> dict[str, Published]:
    """The rows of one group (the test module that checks those families beyond their size)."""
    rows = {name: row for name, row in published_sizes().items() if row.group == group}
    assert rows, f"published_sizes.yaml has no group {group!r}"
    return rows


def quiet_transformers() -> Any:
    """transformers (the test is skipped without it) with its warnings about hub files silenced."""
    import logging

    import pytest

    module = pytest.importorskip("transformers")
    module.logging.set_verbosity_error()
    logging.getLogger("transformers").setLevel(logging.ERROR)
    return module


def fixture_path(name: str) -> Path:
    """The hub config.json of fixture ``name`` in tests/fixtures/hf."""
    return FIXTURES / f"{name}.json"


def raw_fixture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(fixture_path(name).read_text(encoding="utf-8"))
    return data


def mapped_config(raw: dict[str, Any]) -> ModelConfig:
    """embedcalc's validated config of the config.json mapping ``raw`` (named ``test``), as ``check`` reads a file."""
    mapping = map_hf_config(raw, "test")
    return validate_config(dict(mapping.data), dict(mapping.user_keys), [], "test")


def text_raw(raw: dict[str, Any]) -> dict[str, Any]:
    """The text model's keys: ``text_config`` of a multimodal file, else the file itself."""
    inner = {
        "gemma3": "gemma3_text",
        "gemma3n": "gemma3n_text",
        "gemma4": "gemma4_text",
        "llama4": "llama4_text",
    }
    if isinstance(raw.get("text_config"), dict) and raw.get("model_type") in inner:
        text = dict(raw["text_config"])
        text.setdefault("model_type", inner[raw["model_type"]])
        return text
    return raw


def unaccounted_keys(raw: dict[str, Any], name: str = "test") -> set[str]:
    """The keys of config.json ``raw`` that its HF report neither maps nor ignores with a reason (empty: every key
    is accounted for). The text model's keys of a multimodal file count with or without their ``text_config.``
    prefix; a nested dict (DBRX's ``attn_config``, Mllama's ``text_config``) whose keys the report names one by one
    (``attn_config.clip_qkv``) and does not account for as a whole must have every one of them named."""
    report = map_hf_config(raw, name).report
    named = {k.strip() for m in report.mapped for k in m.key.split(",")} | {i.key for i in report.ignored}
    assert all(i.reason for i in report.ignored), [i.key for i in report.ignored if not i.reason]
    seen = named | {key.removeprefix("text_config.") for key in named}
    keys: set[str] = set()
    for key, value in text_raw(raw).items():
        if isinstance(value, dict) and key not in seen and any(s.startswith(f"{key}.") for s in seen):
            keys |= {f"{key}.{sub}" for sub in value}
        else:
            keys.add(key)
    return keys - seen


def hf_config(transformers: Any, raw: dict[str, Any]) -> Any:
    """transformers' config object for the (text) model of ``raw`` (Llama 4's ``attn_temperature_tuning``, an int in
    the hub file, as the bool transformers 5 accepts)."""
    text = {k: v for k, v in text_raw(raw).items() if k not in _BUILD_IGNORED}
    if "attn_temperature_tuning" in text:
        text["attn_temperature_tuning"] = bool(text["attn_temperature_tuning"])
    return transformers.CONFIG_MAPPING[text["model_type"]].from_dict(text)


def _untied(raw: dict[str, Any]) -> bool:
    """The file says its LM head is separate: ``tie_word_embeddings: false`` (files written before transformers 5)
    or ``scale_decoder_outputs: false`` (T5 files written by transformers >= 5, which write the tie as true and keep
    the v1.1 marker there)."""
    return raw.get("tie_word_embeddings") is False or raw.get("scale_decoder_outputs") is False


def hf_model(transformers: Any, raw: dict[str, Any], built_as: str | None = None) -> Any:
    """The model transformers builds from ``raw`` on the meta device, eager attention, by the counting rule:
    ``built_as`` names the auto class (``AutoModel``, ``AutoModelForCausalLM``, ``AutoModelForSeq2SeqLM``; by
    default ``AutoModel`` for :data:`ENCODERS`, else the causal LM). A file that unties its LM head
    (T5 v1.1, mT5: :func:`_untied`) gets its own head: transformers >= 5 ties one built from a config whatever the
    file says, where ``from_pretrained`` keeps the checkpoint's separate head."""
    import torch

    config = hf_config(transformers, raw)
    if built_as is None:
        built_as = "AutoModel" if config.model_type in ENCODERS else "AutoModelForCausalLM"
    with torch.device("meta"):
        model = getattr(transformers, built_as).from_config(config, attn_implementation="eager")
        head, table = model.get_output_embeddings(), model.get_input_embeddings()
        if _untied(text_raw(raw)) and head is not None and head.weight is table.weight:
            head.weight = torch.nn.Parameter(torch.empty_like(table.weight))
    return model.eval()


def numel(model: Any) -> int:
    return sum(p.numel() for p in model.parameters())  # a tied Parameter once


def trainable(model: Any) -> int:
    """The parameters of the counting rule: trainable ones (a frozen sinusoidal table, Marian's and Pegasus', is a
    buffer to embedcalc), a tied Parameter once."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def forward_flops(
    model: Any, batch: int, seq_len: int, tgt_len: int | None = None, *, no_cache: bool = True,
    extra: dict[str, Any] | None = None,
) -> int:  # fmt: skip
    """``FlopCounterMode``'s total for one forward of ``batch`` x ``seq_len`` token ids on the model's device (meta
    for a model built there); ``tgt_len``: an encoder-decoder's decoder tokens (``decoder_input_ids``);
    ``no_cache``: pass ``use_cache=False`` (the causal LMs; on the meta device some families, Falcon's among them,
    fail with it, so the published-family tests call them as the model's defaults have it); ``extra``: more
    inputs of the forward (Mllama's ``cross_attention_states``)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    device = next(model.parameters()).device
    inputs = {"input_ids": torch.zeros(batch, seq_len, dtype=torch.long, device=device)}
    if tgt_len is not None:
        inputs["decoder_input_ids"] = torch.zeros(batch, tgt_len, dtype=torch.long, device=device)
    # FlopCounterMode's module tracker hooks the backward of every input that requires grad; transformers >= 5.25
    # passes a Parameter-derived tensor with no grad function to its kernelized causal conv (``kernels``' module
    # wrapper), where that hook fails. A forward count needs no backward: freeze the parameters while counting.
    frozen = [p for p in model.parameters() if p.requires_grad]
    for p in frozen:
        p.requires_grad_(False)
    try:
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            model(**inputs, **(extra or {}), **({"use_cache": False} if no_cache else {}))
    finally:
        for p in frozen:
            p.requires_grad_(True)
    return int(counter.get_total_flops())


def kv_cache_formula(cfg: Any, tokens: int, dtype_bytes: int) -> int:
    """The KV cache of ``tokens`` tokens, per layer from transformers' config object: MLA caches kv_lora_rank +
    qk_rope_head_dim per token (DeepseekV2Attention's compressed latent), other layers 2 x kv_heads x head_dim per
    token kept, a sliding layer keeping at most its window and a chunked one (Llama 4) at most its chunk. The kind
    of each layer is ``layer_types``; a config without them slides every layer when it has a ``sliding_window``.
    DBRX keeps its heads in ``attn_config``."""
    if getattr(cfg, "kv_lora_rank", None):
        return cfg.num_hidden_layers * (cfg.kv_lora_rank + cfg.qk_rope_head_dim) * tokens * dtype_bytes
    if cfg.model_type == "dbrx":
        kv_heads, head_dim = cfg.attn_config.kv_n_heads, cfg.d_model // cfg.n_heads
    else:
        kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    window = getattr(cfg, "sliding_window", None)
    types = getattr(cfg, "layer_types", None)
    if types is None:
        types = ["sliding_attention" if window else "full_attention"] * cfg.num_hidden_layers
    limits = {"sliding_attention": window, "chunked_attention": getattr(cfg, "attention_chunk_size", None)}
    kept = [min(tokens, limit) if (limit := limits.get(t)) else tokens for t in types]
    return sum(2 * kv_heads * head_dim * k * dtype_bytes for k in kept)


def shared_kv_cache(cfg: Any, tokens: int, dtype_bytes: int) -> int:
    """The KV cache transformers' DynamicCache lays out for a KV-sharing config (Gemma 3n, Gemma 4): none for a layer
    whose ``kv_sharing_modes`` entry is ``reuse`` (a DummyLayer), a sliding layer keeping at most its window, each
    layer its own head_dim and KV heads where the config has ``per_layer_config`` (Gemma 4)."""
    total = 0
    for index, (kind, mode) in enumerate(zip(cfg.layer_types, cfg.kv_sharing_modes, strict=True)):
        if mode == "reuse":
            continue
        layer = cfg.per_layer_config[index] if getattr(cfg, "per_layer_config", None) else cfg
        kept = min(tokens, cfg.sliding_window) if kind == "sliding_attention" else tokens
        total += 2 * layer.num_key_value_heads * layer.head_dim * kept * dtype_bytes
    return total


def cache_bytes(cache: Any) -> tuple[int, int, set[Any]]:
    """(KV bytes, recurrent bytes, the scan states' dtypes) of a transformers cache: every layer's keys and values,
    conv windows and recurrent states."""
    kv = recurrent = 0
    dtypes: set[Any] = set()
    for layer in cache.layers:
        for name in ("keys", "values"):
            t = getattr(layer, name, None)
            kv += t.numel() * t.element_size() if hasattr(t, "numel") else 0
        for name in ("conv_states", "recurrent_states"):
            for t in (getattr(layer, name, None) or {}).values():
                recurrent += t.numel() * t.element_size()
                dtypes |= {t.dtype} if name == "recurrent_states" else set()
    return kv, recurrent, dtypes


def bf16_decode_cache(transformers: Any, raw: dict[str, Any]) -> Any:
    """The cache transformers' causal LM of ``raw`` holds in bf16 after a prefill of 2 sequences of 6 tokens and one
    decode step (seed 0)."""
    import torch

    torch.manual_seed(0)
    model = (
        transformers.AutoModelForCausalLM.from_config(hf_config(transformers, raw)).to(torch.bfloat16).eval()
    )
    ids = torch.randint(0, 200, (2, 6))
    with torch.no_grad():
        cache = model(ids, use_cache=True).past_key_values
        return model(ids[:, :1], past_key_values=cache, use_cache=True).past_key_values


def bf16_cache_and_estimate(
    transformers: Any, raw: dict[str, Any]
) -> tuple[int, int, set[Any], MemoryEstimate]:
    """(KV bytes, recurrent bytes, the scan states' dtypes) transformers' cache holds after a bf16 prefill of 6
    tokens and a decode step (2 sequences, :func:`bf16_decode_cache`), and embedcalc's memory estimate of the same
    7 tokens."""
    kv, recurrent, dtypes = cache_bytes(bf16_decode_cache(transformers, raw))
    memory = estimate_memory(mapped_config(raw), Workload(batch_size=2, seq_len=7, dtype="bf16"))
    return kv, recurrent, dtypes, memory
