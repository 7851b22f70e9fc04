"""Saved activations of a torch model as autograd holds them, for the tests that check an analytic training
activation count against a measurement (tests/analysis/test_sparse_attention.py, test_disentangled_memory.py).

:func:`saved_bytes` runs a forward pass under ``torch.autograd.graph.saved_tensors_hooks`` and sums the bytes of the
distinct storages packed for the backward pass while inside the given modules (their forward hooks) or methods
(wrapped on their instances), parameters and buffers excluded: a tensor saved by two ops, or a view of one already
saved, counts once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any


def saved_bytes(model: Any, run: Callable[[], Any], modules: Iterable[Any] = (),
                methods: Iterable[tuple[Any, str]] = ()) -> int:  # fmt: skip
    """Bytes of the distinct non-parameter storages saved for backward during ``run()`` while inside one of
    ``modules`` or one of the ``(object, method name)`` pairs of ``methods``."""
    import torch

    fixed = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}
    seen: dict[int, int] = {}
    inside = [False]

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if inside[0] and storage.data_ptr() not in fixed:
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    for module in modules:
        module.register_forward_pre_hook(lambda *_: inside.__setitem__(0, True))
        module.register_forward_hook(lambda *_: inside.__setitem__(0, False))
    for owner, name in methods:
        method = getattr(owner, name)

        def entered(*args: Any, method: Any = method, **kwargs: Any) -> Any:
            inside[0] = True
            try:
                return method(*args, **kwargs)
            finally:
                inside[0] = False

        setattr(owner, name, entered)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        run()
    return sum(seen.values())
