"""Files of a ``model_type`` embedcalc does not read: the message that says so, and what it can say beyond that.

A refused file may still name a class embedcalc reads, in ``architectures`` (``DeepseekV3ForCausalLM``) or in
``auto_map`` (remote code such as ``configuration_deepseek.DeepseekV3Config``): the message names that class and
its family, so the user can tell whether the file is that family's config under another name. A file that also
holds numbers the parser refuses (Nemotron-H's ``time_step_limit`` of ``[0.0, Infinity]``) is told its family first:
the family is the reason it cannot be counted, the number only a detail of it; a file of a family it reads keeps the
non-finite numbers of the keys that family reads as element-wise only (:func:`keep_element_wise_numbers`). And the
flat files of multimodal models (Qwen2.5-VL before transformers 5) are split into their text model's keys the way
transformers splits them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from embedcalc.errors import ConfigError, Problem
from embedcalc.sources.hf import accept
from embedcalc.sources.hf.registry import FAMILIES, REFUSED

_ROPE_KEYS = ("rope_parameters", "rope_scaling", "rope_theta")


def flat_text_config(raw: Mapping[str, Any], text_type: str) -> dict[str, Any]:
    """The text model's keys of a flat multimodal file: every key its text config class declares (and the RoPE
    keys), as ``Qwen2_5_VLConfig.__post_init__`` takes them when the file has no ``text_config``."""
    keys = accept.class_keys(text_type)
    declared = keys.params if keys is not None else frozenset()
    inner = {k: v for k, v in raw.items() if isinstance(k, str) and (k in declared or k in _ROPE_KEYS)}
    return inner | {"model_type": text_type}


def _named_classes(raw: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(where, class name) for every class the file names in ``architectures`` and ``auto_map``."""
    out: list[tuple[str, str]] = []
    classes = raw.get("architectures")
    if isinstance(classes, list):
        out += [("architectures", c) for c in classes if isinstance(c, str)]
    auto = raw.get("auto_map")
    if isinstance(auto, Mapping):
        for key, value in auto.items():
            for ref in value if isinstance(value, list) else [value]:
                if isinstance(ref, str) and ref:
                    out.append((f"auto_map.{key}", ref.rsplit(".", 1)[-1]))
    return out


def supported_class(name: str) -> str | None:
    """The model_type whose transformers class ``name`` is (``DeepseekV3Config``, ``DeepseekV3ForCausalLM``): the
    family with the longest config-class prefix of it, followed by the end or one of transformers' class suffixes
    (``For...``, ``Model``, ``PreTrainedModel``, ``Config``: ``MiniMaxM3ForCausalLM`` is no class of ``MiniMax``);
    None when none is."""
    best: tuple[int, str] | None = None
    for model_type, family in FAMILIES.items():
        prefix = family.config_class.removesuffix("Config")
        rest = name[len(prefix) :]
        if (
            name.startswith(prefix)
            and (rest in ("", "Model", "PreTrainedModel", "Config") or rest.startswith("For"))
            and (best is None or len(prefix) > best[0])
        ):
            best = (len(prefix), model_type)
    return None if best is None else best[1]


def _hint(raw: Mapping[str, Any]) -> str:
    for where, name in _named_classes(raw):
        model_type = supported_class(name)
        if model_type is not None:
            return (
                f". Its {where} names {name}, transformers' class of model_type {model_type!r}, which embedcalc "
                f'reads: if this file is that class\'s config under another name, set "model_type": '
                f'"{model_type}" in a copy of the file'
            )
    return ""


def missing_family(raw: Mapping[str, Any]) -> tuple[Any, Mapping[str, Any], str | None]:
    """(the model_type embedcalc lacks, the mapping that names it, the multimodal wrapper's model_type or None): a
    multimodal file (``mistral3``) whose ``text_config`` names a ``model_type`` embedcalc does not read
    (``ministral3``) lacks the TEXT family, which the error names: the wrapper is read for any text family it has."""
    model_type, text = raw.get("model_type"), raw.get("text_config")
    inner = text.get("model_type") if isinstance(text, Mapping) else None
    if isinstance(model_type, str) and model_type not in FAMILIES and isinstance(inner, str):
        assert isinstance(text, Mapping)
        if inner not in FAMILIES:
            return inner, text, model_type
    return model_type, raw, None


def unsupported_family(model_type: Any, origin: str, raw: Mapping[str, Any]) -> ConfigError:
    """The error for a file whose ``model_type`` no family reads (or one :data:`REFUSED` names); for a multimodal
    file, the error names its text model's family (:func:`missing_family`)."""
    model_type, named, wrapper = missing_family({**raw, "model_type": model_type})
    hint = _hint(named) or _hint(raw)
    subject = f"model_type {model_type!r}"
    path = "text_config.model_type" if wrapper is not None else "model_type"
    if wrapper is not None:
        subject += (f" (the text_config of this {wrapper!r} multimodal file: embedcalc reads a {wrapper!r} file as "
                    "its text model, and lacks this one)")  # fmt: skip
    if isinstance(model_type, str) and model_type in REFUSED:
        reason = f"{subject} needs what embedcalc cannot describe yet: {REFUSED[model_type]}"
        message = (
            f"{origin}: {reason}, so it is refused rather than miscounted{hint}. Describe the nearest model in "
            "embedcalc's own YAML (`embedcalc schema`; docs/concepts/huggingface.md) if an estimate will do"
        )
        problem = Problem(path, message, "hf_refused_family", reason)
        return ConfigError(message, [problem], "hf_refused_family")
    families = ", ".join(FAMILIES)
    message = (
        f"{origin}: {subject} is not a family embedcalc reads from a Hugging Face config.json{hint}. Describe the "
        "model in embedcalc's own YAML instead: architecture, vocab_size, max_seq_len, embed_dim, num_heads, "
        "num_layers, ffn_dim and the options that apply (`embedcalc presets show llama-2-7b` prints a complete "
        f"example, `embedcalc schema` every field; docs/concepts/huggingface.md). Families it reads: {families}"
    )
    return ConfigError(message, [Problem(path, message, "hf_unsupported_family")], "hf_unsupported_family")


def family_before_numbers(raw: Mapping[str, Any], origin: str, refused: list[Problem]) -> ConfigError | None:
    """For a Hugging Face file whose numbers the parser refused: the family error first when embedcalc does not
    read its ``model_type`` (the refused values follow as a detail); None when the family is one it reads."""
    model_type = raw.get("model_type")
    if not isinstance(model_type, str) or model_type in FAMILIES:
        return None
    text = raw.get("text_config")
    if isinstance(text, Mapping) and text.get("model_type") in FAMILIES and model_type not in REFUSED:
        return None
    error = unsupported_family(model_type, origin, raw)
    details = "; ".join(f"{p.path}: {p.message}" for p in refused)
    message = f"{error.message} (the file also holds values embedcalc refuses: {details})"
    problems = [Problem(error.problems[0].path, message, error.problems[0].code), *refused]
    return ConfigError(message, problems, error.problems[0].code)


def keep_element_wise_numbers(data: dict[str, Any], refused: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """For a file of a family embedcalc reads: the non-finite numbers under a key the family reads as element-wise
    only (``Family.non_finite``: the Mamba-2 families' ``time_step_limit``, ``[0.0, Infinity]``, transformers'
    default, which every save writes) stay in ``data`` as their text (``"Infinity"``); returns the refused numbers
    left (each a (key path, refused number) pair, as :func:`embedcalc.sources.parsing.refused_numbers` lists them)."""
    family = FAMILIES.get(data["model_type"]) if isinstance(data.get("model_type"), str) else None
    if family is None or not family.non_finite:
        return refused
    kept = {key for key in family.non_finite if key in data}
    left = [(where, n) for where, n in refused
            if n.code != "number_not_finite" or where.split("[")[0].split(".")[0] not in kept]  # fmt: skip
    for key in kept:
        value = data[key]
        data[key] = [v.text if _refused(v) else v for v in value] if isinstance(value, list) else (
            value.text if _refused(value) else value)  # fmt: skip
    return left


def _refused(value: Any) -> bool:
    return getattr(value, "code", None) == "number_not_finite"
