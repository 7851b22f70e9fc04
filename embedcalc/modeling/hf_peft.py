"""peft on the model transformers builds from a Hugging Face ``config.json``, on the meta device: the trainable and
total parameters peft's ``get_nb_trainable_parameters`` reports for a LoRA / DoRA configuration, the independent
count ``verify --peft`` puts beside embedcalc's analytic one.

The model class is the general reader's (:func:`embedcalc.modeling.hf_classes.choose_class`: an encoder as
``AutoModel``, a decoder as its causal LM, an encoder-decoder as its seq2seq LM). A file that unties its LM head
(``tie_word_embeddings: false``, or T5 files written by transformers >= 5 with ``scale_decoder_outputs: false``)
gets a head of its own, as ``from_pretrained`` keeps the checkpoint's: transformers >= 5 ties the head of a model
built from a config whatever the file says. Nothing is allocated (every parameter is a shape).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from embedcalc.modeling.hf_classes import NoAutoClassError, build_meta_class, choose_class, hf_config, quiet

__all__ = ["PeftCount", "peft_available", "peft_counts"]


@dataclass(frozen=True)
class PeftCount:
    """peft's counts of one adapted model: (trainable, all) and what counted them."""

    class_name: str
    trainable: int
    total: int


def peft_available() -> bool:
    """Whether peft can be imported (found, not imported)."""
    return importlib.util.find_spec("peft") is not None


def _untied(raw: Mapping[str, Any]) -> bool:
    return raw.get("tie_word_embeddings") is False or raw.get("scale_decoder_outputs") is False


def peft_counts(raw: Mapping[str, Any], lora: Mapping[str, Any]) -> PeftCount:
    """peft's ``get_nb_trainable_parameters`` of transformers' model of ``raw`` wrapped with ``LoraConfig(**lora)``.

    Raises ``ImportError`` without peft or transformers, :class:`~embedcalc.modeling.hf_classes.NoAutoClassError`
    for a composite model whose text part alone is counted (peft would adapt the whole of it), and what
    transformers or peft raise for a configuration they refuse (the caller names it)."""
    import peft

    with quiet():
        config = hf_config(raw)
        class_name, _, _, build_from, part = choose_class(config)
        if part != "all":
            raise NoAutoClassError(
                f"{class_name} holds more than the text model embedcalc counts; peft would adapt all of it"
            )
        model: Any = build_meta_class(class_name, build_from)
        head, table = model.get_output_embeddings(), model.get_input_embeddings()
        if _untied(raw) and head is not None and table is not None and head.weight is table.weight:
            with torch.device("meta"):
                head.weight = torch.nn.Parameter(torch.empty_like(table.weight))
        adapted = peft.get_peft_model(model, peft.LoraConfig(**lora))
        trainable, total = adapted.get_nb_trainable_parameters()
    return PeftCount(class_name, int(trainable), int(total))
