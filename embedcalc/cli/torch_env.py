"""Importing torch on demand: a missing torch, or a ``--device`` this machine does not have, is exit 4 with what
to do instead, never a traceback."""

from __future__ import annotations

from typing import Any

import typer

from embedcalc.errors import UnsupportedEnvironmentError


def require_torch() -> None:
    """Import the torch side (:mod:`embedcalc.modeling`, the only package that imports torch), or exit 4 telling
    how to install torch."""
    try:
        from embedcalc.modeling.env import check_torch

        check_torch()
    except ImportError as exc:
        if (exc.name or "").split(".")[0] != "torch":
            raise
        raise UnsupportedEnvironmentError(
            "PyTorch is not installed; this command builds the model in torch. Install it with "
            "`pip install 'embedcalc[torch]'` (CPU-only: `pip install torch --index-url "
            "https://download.pytorch.org/whl/cpu`).",
            code="no_torch",
        ) from None


DEVICES = ("auto", "cpu", "cuda")


def require_device(name: str) -> Any:
    """The torch device for ``--device``: exit 2 for a name not in :data:`DEVICES`, exit 4 when the device is not
    there (cuda without CUDA)."""
    if name not in DEVICES:
        raise typer.BadParameter(f"{name!r} is not one of {', '.join(DEVICES)}", param_hint="'--device'")
    from embedcalc.modeling.timing import resolve_device

    try:
        return resolve_device(name)
    except RuntimeError as exc:
        raise UnsupportedEnvironmentError(f"{exc}; use --device cpu or --device auto", "no_cuda") from None
