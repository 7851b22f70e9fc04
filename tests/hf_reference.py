"""The transformers side of the layer-model parity tests: the model transformers builds from a hub config.json.

Independent of embedcalc: everything here reads transformers' own config classes and modules. The counting rule
of the README: encoders as ``AutoModel``, decoders as ``AutoModelForCausalLM``; a multimodal file (Gemma 3,
Llama 4) as the causal LM of its ``text_config``. Models are built on the meta device (no memory) with eager
attention, so ``FlopCounterMode`` sees the score matmuls (PyTorch issue 195460: SDPA on the CPU counts 0).
"""

from __future__ import annotations

import json
from typing import Any

from paths import HF_FIXTURES

FIXTURES = HF_FIXTURES
ENCODERS = {"albert"}
# keys a from_config build must not see: a quantiser would replace modules; remote code is never run
_BUILD_IGNORED = ("quantization_config", "auto_map")


def quiet_transformers() -> Any:
    """transformers (the test is skipped without it) with its warnings about hub files silenced."""
    import logging

    import pytest

    module = pytest.importorskip("transformers")
    module.logging.set_verbosity_error()
    logging.getLogger("transformers").setLevel(logging.ERROR)
    return module


def raw_fixture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))
    return data


def text_raw(raw: dict[str, Any]) -> dict[str, Any]:
    """The text model's keys: ``text_config`` of a multimodal file, else the file itself."""
    if isinstance(raw.get("text_config"), dict) and raw.get("model_type") in ("gemma3", "llama4"):
        text = dict(raw["text_config"])
        text.setdefault("model_type", {"gemma3": "gemma3_text", "llama4": "llama4_text"}[raw["model_type"]])
        return text
    return raw


def hf_config(transformers: Any, raw: dict[str, Any]) -> Any:
    """transformers' config object for the (text) model of ``raw``."""
    text = {k: v for k, v in text_raw(raw).items() if k not in _BUILD_IGNORED}
    return transformers.CONFIG_MAPPING[text["model_type"]].from_dict(text)


def hf_model(transformers: Any, raw: dict[str, Any]) -> Any:
    """The model transformers builds from ``raw`` on the meta device, eager attention, by the counting rule."""
    import torch

    config = hf_config(transformers, raw)
    auto = transformers.AutoModel if config.model_type in ENCODERS else transformers.AutoModelForCausalLM
    with torch.device("meta"):
        model = auto.from_config(config, attn_implementation="eager")
    return model.eval()


def numel(model: Any) -> int:
    return sum(p.numel() for p in model.parameters())  # a tied Parameter once


def forward_flops(model: Any, batch: int, seq_len: int) -> int:
    """``FlopCounterMode``'s total for one forward of ``batch`` x ``seq_len`` token ids (meta tensors)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    device = next(model.parameters()).device
    ids = torch.zeros(batch, seq_len, dtype=torch.long, device=device)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(input_ids=ids, use_cache=False)
    return int(counter.get_total_flops())
