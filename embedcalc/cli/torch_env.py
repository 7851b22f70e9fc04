"""``--device NAME`` checked as a usage error (exit 2) before :func:`embedcalc.api.torch_env.require_device`
resolves it (exit 4 without torch, or for cuda without CUDA)."""

from __future__ import annotations

from typing import Any

import typer


def require_device(name: str) -> Any:
    """The torch device for ``--device``: exit 2 for a name not in the API's ``DEVICES``, exit 4 when torch or
    the device is not there."""
    from embedcalc.api.torch_env import DEVICES
    from embedcalc.api.torch_env import require_device as resolved

    if name not in DEVICES:
        raise typer.BadParameter(f"{name!r} is not one of {', '.join(DEVICES)}", param_hint="'--device'")
    return resolved(name)
