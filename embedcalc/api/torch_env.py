"""The torch side on demand: a missing torch, or a device this machine does not have, is
:class:`~embedcalc.errors.UnsupportedEnvironmentError` (exit 4) saying what to do instead, never a traceback."""

from __future__ import annotations

from typing import Any

from embedcalc.errors import UnsupportedEnvironmentError

DEVICES = ("auto", "cpu", "cuda")

__all__ = ["DEVICES", "require_device", "require_torch"]


def require_torch() -> None:
    """Import the torch side (:mod:`embedcalc.modeling`, the only package that imports torch), or raise telling
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


def require_device(name: str, flag: str = "--device") -> Any:
    """The torch device for ``name`` (one of :data:`DEVICES`; ``auto``: cuda if available); raises when it is not
    there (cuda without CUDA), naming ``flag`` in the way out."""
    require_torch()
    from embedcalc.modeling.device import resolve_device

    try:
        return resolve_device(name)
    except RuntimeError as exc:
        other = "--device cpu or --device auto" if flag == "--device" else "device='cpu' or 'auto'"
        raise UnsupportedEnvironmentError(f"{exc}; use {other}", "no_cuda") from None
