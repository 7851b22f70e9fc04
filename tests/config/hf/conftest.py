"""Fixtures the Hugging Face parity modules share: transformers, quiet, for the tests that build its models."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(scope="module")
def hf_transformers() -> Any:
    """transformers with its hub-file warnings silenced; the test is skipped without torch or transformers."""
    pytest.importorskip("torch")
    from hf_reference import quiet_transformers

    return quiet_transformers()
