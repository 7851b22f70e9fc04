"""Fixtures the Hugging Face parity modules share: transformers, quiet, for the tests that build its models (a module
that reads only transformers' config classes, without torch, defines its own ``transformers``)."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(scope="module")
def hf_transformers() -> Any:
    """transformers with its hub-file warnings silenced; the test is skipped without torch or transformers."""
    pytest.importorskip("torch")
    from hf_reference import quiet_transformers

    return quiet_transformers()


@pytest.fixture(scope="module")
def transformers(hf_transformers: Any) -> Any:
    """:func:`hf_transformers` under the name the older parity modules' tests take."""
    return hf_transformers
