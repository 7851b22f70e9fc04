"""The supported Hugging Face families by ``model_type``: one line per family module.

Each family module exports ``FAMILIES``, a tuple of :class:`~embedcalc.config.hf.reader.Family` (transformers'
config class, its defaults, the mapping function). Adding a family is a module, a line here and a fixture.
"""

from __future__ import annotations

from embedcalc.config.hf import bert, gpt2, llama, opt, t5
from embedcalc.config.hf.reader import Family

MODULES = (bert, gpt2, opt, t5, llama)

FAMILIES: dict[str, Family] = {family.model_type: family for module in MODULES for family in module.FAMILIES}
"""Supported families by ``model_type``; defaults are those of transformers' config classes (tests check them)."""
