"""Whether torch can be imported: the check the CLI makes before a torch command (torch is imported here, in the
only package allowed to import it, DESIGN.md §7)."""

from __future__ import annotations


def check_torch() -> None:
    """Import torch; an ``ImportError`` (name ``torch``) when it is not installed or not importable."""
    import torch  # noqa: F401 (imported to see that it can be)
