"""Which transformers model class builds a Hugging Face ``config.json`` for the general reader (DESIGN §19), and that
class built empty on the meta device: the part of the general reader's torch side that its counting
(:mod:`embedcalc.modeling.hf_meta`), the PEFT adapters (:mod:`embedcalc.modeling.hf_peft`) and the checkpoint
conversion (:mod:`embedcalc.modeling.hf_conversion`) share. Also the installed transformers' version, the model types
near a file's, the top-level keys a multimodal file puts where its text model does not read them, and
:func:`quiet`, which silences transformers while it builds and runs a model.

Which model class (the counting rule of the native readers, :mod:`embedcalc.sources.hf`): an encoder-decoder
(``is_encoder_decoder``) is ``AutoModelForSeq2SeqLM``; a multimodal config is its text model (the text config's
``AutoModelForCausalLM`` class when it has one, else the outer ``AutoModelForImageTextToText`` class of which only the
language model and the LM head are counted; T5Gemma 2, an encoder-decoder with a vision tower in its encoder: the
encoder's text tower, the decoder and the head); a family with a masked-LM class (an encoder: BERT-like) or without a
causal-LM class is ``AutoModel`` (the backbone); every other family is ``AutoModelForCausalLM``.
An encoder-decoder of two sub-configs (T5Gemma: ``get_text_config()`` is its decoder half) is the whole seq2seq
model too.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

__all__ = ["NoAutoClassError", "Part", "build_meta_class", "choose_class", "hf_config", "misplaced_text_keys", "quiet",
           "related_model_types", "transformers_version"]  # fmt: skip


def transformers_version() -> str | None:
    """The installed transformers' version, None when it cannot be imported."""
    try:
        import transformers
    except ImportError:
        return None
    return str(transformers.__version__)


def related_model_types(model_type: str) -> list[str]:
    """The model types the installed transformers has whose names share ``model_type``'s family stem (its name
    before the last ``_`` part, ``minimax_m3`` -> ``minimax``), closest first: where a file's type is a near miss
    (MiniMax-M3's checkpoint is ``minimax_m3_vl`` there)."""
    import difflib

    from transformers.models.auto import configuration_auto

    names: Mapping[str, str] = getattr(configuration_auto, "CONFIG_MAPPING_NAMES", {})
    stem = model_type.rsplit("_", 1)[0] if "_" in model_type else model_type
    related = [t for t in names if t.startswith(stem) and t != model_type]
    return sorted(related, key=lambda t: (-difflib.SequenceMatcher(None, model_type, t).ratio(), t))[:4]


def hf_config(raw: Mapping[str, Any]) -> Any:
    from transformers import AutoConfig

    data = {k: v for k, v in raw.items() if k != "model_type"}
    return AutoConfig.for_model(str(raw["model_type"]), **data)


def misplaced_text_keys(raw: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """(key, the file's value, the value transformers' text model gets) for each top-level key of a multimodal
    file without ``text_config`` that its outer class does not declare but its text sub-config does, at another
    value than the text model is built with: transformers keeps such a key as a plain attribute of the outer
    config and builds its default text model (a flat Step-3.7 file's ``num_hidden_layers``)."""
    from embedcalc.sources.hf.derive import params

    if "text_config" in raw:
        return []
    with quiet():
        config = hf_config(raw)
    if "text_config" not in (getattr(type(config), "sub_configs", {}) or {}):
        return []
    text = getattr(config, "text_config", None)
    if text is None:
        return []
    outer, inner = (
        set(params(type(config))),
        set(params(type(text))),
    )  # the text class built (AutoConfig's pick)
    found = []
    for key, value in raw.items():
        if key in outer or key not in inner or key in ("model_type", "architectures"):
            continue
        built = getattr(text, key, None)
        if built != value:
            found.append((key, value, built))
    return found


def _names(mapping: str) -> Mapping[str, str]:
    from transformers.models.auto import modeling_auto

    names: Mapping[str, str] = getattr(modeling_auto, mapping, {})
    return names


class NoAutoClassError(LookupError):
    """transformers has the config class of a model_type but no Auto model class that builds it."""


# which part of the built model is counted: all of it, a multimodal model's language model and LM head, or the
# text tower of a dual encoder (the module built from its text config: CLIP's text_model)
Part = str


def _own_class(config: Any) -> tuple[str, str, str, Any, Part] | None:
    """A config's own generative class: seq2seq for an encoder-decoder, causal LM for a decoder (a family with a
    masked-LM class is an encoder: None here)."""
    model_type = config.model_type
    if getattr(config, "is_encoder_decoder", False):
        name = _names("MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES").get(model_type)
        name = name or _names("MODEL_MAPPING_NAMES").get(model_type)
        return (name, "AutoModelForSeq2SeqLM", "encoder-decoder", config, "all") if name else None
    causal = _names("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES").get(model_type)
    if causal and model_type not in _names("MODEL_FOR_MASKED_LM_MAPPING_NAMES"):
        return causal, "AutoModelForCausalLM", "decoder", config, "all"
    return None


def choose_class(config: Any) -> tuple[str, str, str, Any, Part]:
    """(class name, auto class, architecture, the config to build it from, the part counted): the module
    docstring's rule. A composite config's text model first (its own class, else the multimodal class's language
    model and head, else the text tower the composite model builds, else the text config's base model)."""
    model_type = config.model_type
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    base = _names("MODEL_MAPPING_NAMES")
    image_text = _names("MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES")
    halves = [getattr(config, name, None) for name in ("encoder", "decoder")]
    if text is not config and any(text is h for h in halves) and model_type not in image_text:
        # an encoder-decoder of two sub-configs (T5Gemma's encoder and decoder): get_text_config() is its decoder
        # half, but the text model is the whole seq2seq model the outer config builds
        own = _own_class(config)
        if own is not None:
            return own
    causal = _names("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES").get(model_type)
    if text is not config and causal and set(getattr(config, "sub_configs", {})) == {"text_config"}:
        # a causal LM of its own around a text config and nothing else (Gemma 4's assistant: projections in and
        # out, every layer reading the target's keys and values): the outer class is the text model
        return causal, "AutoModelForCausalLM", "decoder", config, "all"
    if text is not config:
        own = _own_class(text)
        if own is not None:
            return own
        outer = image_text.get(model_type)
        if outer and getattr(config, "is_encoder_decoder", False):
            # T5Gemma 2: a vision tower inside an encoder-decoder; the text model is the encoder's text tower, the
            # decoder and the head, and its forward takes decoder tokens too
            return outer, "AutoModelForImageTextToText", "encoder-decoder", config, "seq2seq_text"
        if outer:
            return outer, "AutoModelForImageTextToText", "decoder", config, "language"
        if model_type in base:
            return base[model_type], "AutoModel", "encoder", config, "text_model"
        if text.model_type in base:
            return base[text.model_type], "AutoModel", "encoder", text, "all"
        raise NoAutoClassError(model_type)
    own = _own_class(config)
    if own is not None:
        return own
    parent = _parent(config, _names("MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES"))
    if (
        parent is not None
    ):  # a text config alone (glm4v_text): its model as the multimodal class holds it, head too
        return choose_class(parent)
    if model_type in base:
        return base[model_type], "AutoModel", "encoder", config, "all"
    parent = _parent(config, base)
    if parent is not None:  # a dual encoder's text config alone (align_text_model): its text tower
        return choose_class(parent)
    raise NoAutoClassError(model_type)


def _parent(text: Any, mapping: Mapping[str, str]) -> Any:
    """The default composite config of a model_type in ``mapping`` holding ``text`` as its ``text_config``
    (Glm4vConfig for a glm4v_text file), built around it; None when there is none."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    for model_type in mapping:
        if model_type not in CONFIG_MAPPING:
            continue
        cls: Any = CONFIG_MAPPING[model_type]
        if getattr(cls, "sub_configs", {}).get("text_config") is type(text):
            tie = getattr(text, "tie_word_embeddings", None)  # a text file alone keeps its own head tying
            return cls(text_config=text.to_dict(), **({} if tie is None else {"tie_word_embeddings": tie}))
    return None


@contextmanager
def quiet() -> Iterator[None]:
    """transformers' own warnings and log lines (deprecations, slow-path notices) silenced while it builds and runs
    the model: the command's stderr carries embedcalc's lines only."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        hf_logging.set_verbosity(level)


def build_meta_class(class_name: str, config: Any) -> nn.Module:
    import transformers

    cls = getattr(transformers, class_name)
    options: dict[str, Any] = {"attn_implementation": "eager", "experts_implementation": "batched_mm"}
    with torch.device("meta"), quiet():
        try:
            return cls._from_config(config, **options)  # type: ignore[no-any-return]
        except (TypeError, ValueError):  # a transformers without experts implementations (4.x)
            return cls._from_config(config, attn_implementation="eager")  # type: ignore[no-any-return]
