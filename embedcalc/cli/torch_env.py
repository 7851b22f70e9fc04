"""Importing torch on demand: a missing torch is exit 4 with the install command, never a traceback."""

from __future__ import annotations

from typing import Any

from embedcalc.errors import UnsupportedEnvironmentError


def require_torch() -> Any:
    """The torch module, or exit 4 telling how to install it."""
    try:
        import torch
    except ImportError:
        raise UnsupportedEnvironmentError(
            "PyTorch is not installed; this command builds the model in torch. Install it with "
            "`pip install 'embedcalc[torch]'` (CPU-only: `pip install torch --index-url "
            "https://download.pytorch.org/whl/cpu`).",
            code="no_torch",
        ) from None
    return torch
