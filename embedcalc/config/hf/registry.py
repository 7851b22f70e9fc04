"""The supported Hugging Face families by ``model_type``: one line per family module.

Each family module exports ``FAMILIES``, a tuple of :class:`~embedcalc.config.hf.reader.Family` (transformers'
config class, its defaults, the mapping function). Adding a family is a module, a line here and a fixture.
"""

from __future__ import annotations

from embedcalc.config.hf import bert, deepseek, gemma, gpt2, gpt_oss, llama, moe, olmo, opt, qwen3, t5
from embedcalc.config.hf.reader import Family

MODULES = (bert, gpt2, opt, t5, llama)
MODULES += (gemma, qwen3, moe, deepseek, gpt_oss, olmo)  # the layer-model families (layers as data, DESIGN §9)

FAMILIES: dict[str, Family] = {family.model_type: family for module in MODULES for family in module.FAMILIES}
"""Supported families by ``model_type``; defaults are those of transformers' config classes (tests check them)."""
