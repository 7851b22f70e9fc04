"""Refusal messages of Hugging Face files (issue 31, item 3): the missing family named is the TEXT model's (not the
multimodal wrapper embedcalc reads for any text family it has), the real cause comes first, no claim that
transformers refuses what it builds (tests/sources/hf/test_hub.py: the hub hint names ``hf download``).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hf_reference import raw_fixture

from embedcalc.errors import ConfigError
from embedcalc.sources.hf import map_hf_config

# a text model_type no family will ever read (a real one, such as ministral3 in a mistral3 file, gains a reader)
MISSING = "not_yet_a_family"


def _error(raw: dict[str, Any]) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        map_hf_config(raw, "config.json")
    return caught.value


def test_a_multimodal_wrapper_names_the_missing_text_family() -> None:
    """A ``mistral3`` file is read whenever its text_config is a family embedcalc reads; when it is not, the text
    family is what is missing, and the error says so at ``text_config.model_type``."""
    text = raw_fixture("mistral-7b-v0.1") | {"model_type": MISSING}
    error = _error(
        {"model_type": "mistral3", "text_config": text, "vision_config": {"model_type": "pixtral"}}
    )
    (problem,) = error.problems
    assert problem.path == "text_config.model_type" and problem.code == "hf_unsupported_family"
    assert error.message.startswith(
        f"config.json: model_type {MISSING!r} (the text_config of this 'mistral3'"
    )


def test_the_cause_comes_before_the_list_of_families() -> None:
    raw = {"model_type": MISSING, "architectures": ["MistralForCausalLM"], "hidden_size": 64}
    message = _error(raw).message
    cause, hint, families = (message.index(s) for s in ("is not a family", "Its architectures names",
                                                         "Families it reads:"))  # fmt: skip
    assert cause < hint < families


def test_a_wrapper_whose_text_family_is_read_is_counted() -> None:
    text = raw_fixture("mistral-7b-v0.1")
    mapping = map_hf_config({"model_type": "mistral3", "text_config": text}, "config.json")
    assert mapping.report.family == "mistral"


def test_no_claim_that_transformers_refuses_what_it_builds() -> None:
    """transformers >= 5.25 builds a Gemma 4 stack whose every layer shares its cache; embedcalc refuses it for its
    own reason, without claiming transformers refuses it too."""
    raw = copy.deepcopy(raw_fixture("gemma-4-e2b"))
    raw["text_config"]["num_kv_shared_layers"] = raw["text_config"]["num_hidden_layers"]
    message = _error(raw).message
    assert "shares the cache of every layer" in message and "transformers refuses" not in message
