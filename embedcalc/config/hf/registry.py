"""The supported Hugging Face families by ``model_type``: one line per family module.

Each family module exports ``FAMILIES``, a tuple of :class:`~embedcalc.config.hf.reader.Family` (transformers'
config class, its defaults, the mapping function). Adding a family is a module, a line here and a fixture.
:data:`REFUSED` names the families transformers has that embedcalc cannot count exactly, and what each needs.
"""

from __future__ import annotations

from types import ModuleType

from embedcalc.config.hf import (
    bart,
    bert,
    cohere2,
    dbrx,
    deepseek,
    encoders,
    exaone4,
    gemma,
    gpt,
    gpt2,
    gpt_oss,
    llama,
    llama4,
    llama_like,
    moe,
    olmo,
    opt,
    qwen3,
    t5,
)
from embedcalc.config.hf.reader import Family

MODULES: tuple[ModuleType, ...] = (bert, encoders, gpt2, gpt, opt, t5, bart, llama, llama_like)
MODULES += (
    gemma,
    qwen3,
    moe,
    deepseek,
    gpt_oss,
    olmo,
)  # the layer-model families (layers as data, DESIGN §9)
MODULES += (llama4, dbrx, cohere2, exaone4)  # issue 10's last layer-model families

FAMILIES: dict[str, Family] = {family.model_type: family for module in MODULES for family in module.FAMILIES}
"""Supported families by ``model_type``; defaults are those of transformers' config classes (tests check them)."""

REFUSED: dict[str, str] = {
    "deberta-v2": (
        "DeBERTa's disentangled attention: a shared relative-position table (rel_embeddings) projected by the "
        "key and query projections, and content-to-position / position-to-content score matmuls"
    ),
    "mpnet": "a learned position table together with a relative attention bias table in the encoder",
    "umt5": "a relative position bias in every layer (T5 has one in the first layer of each stack)",
}
"""Families embedcalc refuses, with the layer feature it would need to count them exactly."""
