"""Hugging Face ``config.json`` -> embedcalc config, family by family, with a report of every key's fate.

A file is a Hugging Face config when it has a ``model_type`` (embedcalc's own schema has no such key). Each
supported family maps the keys that decide the cost onto embedcalc fields, fills the keys the file leaves out
with the defaults of transformers' own config class (``LlamaConfig`` ...), and classifies every other key as
harmless with a reason (:mod:`embedcalc.config.hf.keys`). A key that is neither mapped nor known to be harmless
is an error: it might change the model.

What an imported config counts as (the counting rule): encoders as transformers' ``AutoModel`` (the backbone with
its default pooler: ``BertModel``, ``RobertaModel``, ``DistilBertModel``); decoders as ``AutoModelForCausalLM``
(``GPT2LMHeadModel``, ``OPTForCausalLM``, ``LlamaForCausalLM``, ``MistralForCausalLM``, ``Qwen2ForCausalLM``)
and encoder-decoders as ``AutoModelForSeq2SeqLM`` (``T5ForConditionalGeneration``), LM head included and tied as
``tie_word_embeddings`` says. Every mapping here was checked against transformers' modeling code, and
``tests/test_hf.py`` checks the counts against models transformers builds from the same files.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from embedcalc.config.hf.reader import HFReport, IgnoredKey, KeyReader, MappedKey
from embedcalc.config.hf.registry import FAMILIES
from embedcalc.errors import ConfigError, Problem

__all__ = ["FAMILIES", "HFMapping", "HFReport", "IgnoredKey", "MappedKey", "is_hf_config", "map_hf_config"]


@dataclass(frozen=True)
class HFMapping:
    """The canonical embedcalc mapping of a Hugging Face config, ready for validation."""

    data: dict[str, Any]
    user_keys: dict[str, str]  # field -> the Hugging Face key it came from (error messages name it)
    report: HFReport


def is_hf_config(raw: Mapping[Any, Any]) -> bool:
    """Whether a parsed file is a Hugging Face ``config.json`` (it has a ``model_type``)."""
    return "model_type" in raw


def _unsupported(model_type: Any, origin: str) -> ConfigError:
    families = ", ".join(FAMILIES)
    message = (
        f"{origin}: model_type {model_type!r} is not a family embedcalc reads from a Hugging Face config.json "
        f"(supported: {families}). Describe the model in embedcalc's own YAML instead: architecture, vocab_size, "
        "max_seq_len, embed_dim, num_heads, num_layers, ffn_dim and the options that apply (`embedcalc presets "
        "show llama-2-7b` prints a complete example, `embedcalc schema` every field; README: Hugging Face configs)"
    )
    return ConfigError(
        message, [Problem("model_type", message, "hf_unsupported_family")], "hf_unsupported_family"
    )


def _name(raw: Mapping[str, Any], path: Path | None) -> str | None:
    name = raw.get("_name_or_path")
    if isinstance(name, str) and name.strip():
        return name.strip()
    if path is None:
        return None
    return path.parent.name if path.name == "config.json" and path.parent.name else path.stem


def map_hf_config(raw: Mapping[str, Any], origin: str, path: Path | None = None) -> HFMapping:
    """Map a Hugging Face config onto embedcalc's fields; raise ConfigError listing every problem."""
    model_type = raw.get("model_type")
    family = FAMILIES.get(model_type) if isinstance(model_type, str) else None
    if family is None:
        raise _unsupported(model_type, origin)
    reader = KeyReader(raw, family)
    family.read(reader)
    name = _name(raw, path)
    if name is not None:
        reader.consumed.add("_name_or_path")
        reader.put("name", name, "_name_or_path" if "_name_or_path" in raw else "(file name)", "file")
    reader.classify_rest()
    if reader.problems:
        lines = "\n".join(f"  {p.path}: {p.message}" for p in reader.problems)
        noun = "problem" if len(reader.problems) == 1 else "problems"
        raise ConfigError(f"{origin}: {len(reader.problems)} {noun} in this {family.model_type} config\n{lines}",
                          reader.problems)  # fmt: skip
    head = ""
    if reader.data.get("lm_head"):
        head = ", LM head tied" if reader.data.get("tie_embeddings", True) else ", LM head untied"
    report = HFReport(
        family.model_type, family.counted_as + head, reader.mapped, reader.ignored, reader.notes
    )
    return HFMapping(reader.data, reader.user_keys, report)
