"""FLOPs of a forward on the meta device, counted as ``torch.utils.flop_counter.FlopCounterMode`` counts them, fast
enough for families that loop over tokens in Python (the general reader, DESIGN §19).

The count is FlopCounterMode's: the same formulas (its module-level ``flop_registry``, which
``register_flop_formula`` extends), the same decomposition of an op it has no formula for, the same attribution to
every module active when an op runs (``ModuleTracker``'s ``parents``, ``"Global"`` included). Tests hold the two
equal, op by op and module by module.

What differs is the cost. A meta tensor's elementwise ops are computed by Python reference implementations
(``torch._refs``: broadcasting, type promotion, stride order), ~200 µs an op; a recurrent family's forward on meta
runs them per token and per layer (transformers' RWKV: 138,000 ops at 128 tokens, 10-12 s). On the meta device an
op's result depends on nothing but its inputs' shapes, strides and dtypes and its other arguments, so a functional
op (no mutated argument, no aliased output) is run once per distinct signature and its result's layout reused:
later calls get a fresh ``empty_strided`` of the same shape, strides and dtype. Views and in-place ops always run
(they are cheap, and their aliasing must stay real). FakeTensor forwards (``memo=False``) run every op: FakeTensor
mode keeps its own cache.
"""

from __future__ import annotations

from collections import defaultdict
from types import TracebackType
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry
from torch.utils.module_tracker import ModuleTracker

__all__ = ["MetaFlopCounter"]

_PLAIN = (int, float, bool, str, type(None), torch.dtype, torch.device, torch.memory_format, torch.layout)
_COMPOSITE = torch._C.DispatchKey.CompositeImplicitAutograd
_aten = torch.ops.aten
_DEVICE = torch.ops.prim.device.default  # no dispatcher entry to ask about
# metadata queries a tensor subclass (FakeTensor) may route through a Python mode: answered by the tensor itself, as
# FlopCounterMode leaves them
_METADATA = frozenset({_aten.sym_is_contiguous.default, _aten.is_contiguous.default, _aten.is_contiguous.memory_format,
                       _aten.is_strides_like_format.default, _aten.is_non_overlapping_and_dense.default,
                       _aten.size.default, _aten.sym_size.default, _aten.stride.default, _aten.sym_stride.default,
                       _aten.storage_offset.default, _aten.sym_storage_offset.default, _aten.numel.default,
                       _aten.sym_numel.default, _aten.dim.default, torch.ops.prim.layout.default})  # fmt: skip


class _Unkeyable(Exception):
    """An argument whose value could change an op's result other than through its metadata."""


def _key(value: Any) -> Any:
    """A hashable description of an op argument as a meta kernel sees it."""
    if isinstance(value, torch.Tensor):
        if value.device.type != "meta":
            raise _Unkeyable
        return (tuple(value.shape), value.stride(), value.dtype)  # an input's storage offset shapes no result
    if isinstance(value, (list, tuple)):
        return (type(value), *map(_key, value))
    if isinstance(value, _PLAIN):
        return (type(value), value)
    raise _Unkeyable


class _Mode(TorchDispatchMode):  # type: ignore[no-untyped-call]
    def __init__(self, counter: MetaFlopCounter) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.counter = counter
        self.layouts: dict[
            Any, tuple[bool, tuple[tuple[tuple[int, ...], tuple[int, ...], torch.dtype], ...]]
        ] = {}
        self.pure: dict[Any, bool] = {}
        self.composite: dict[Any, bool] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func in _METADATA:
            return NotImplemented
        kwargs = kwargs or {}
        packet = func._overloadpacket
        formula = flop_registry.get(packet)
        if formula is None and func is not _DEVICE:  # as FlopCounterMode: an op with no formula may decompose
            composite = self.composite.get(func)
            if composite is None:
                composite = self.composite[func] = torch._C._dispatch_has_kernel_for_dispatch_key(
                    func.name(), _COMPOSITE
                )
            if composite:
                with self:
                    out = func.decompose(*args, **kwargs)
                if out is not NotImplemented:
                    return out
        out = self._run(func, args, kwargs)
        if formula is not None:
            flops = formula(*args, **kwargs, out_val=out)
            counts = self.counter.counts
            for parent in set(self.counter.tracker.parents):
                counts[parent][packet] += flops
        return out

    def _run(self, func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        pure = self.pure.get(func)
        if pure is None:
            schema = func._schema
            pure = self.pure[func] = not schema.is_mutable and all(
                r.alias_info is None for r in schema.returns
            )
        if not (pure and self.counter.memo):
            return func(*args, **kwargs)
        try:
            key = (func, _key(args), _key(tuple(kwargs.items())))
        except _Unkeyable:
            return func(*args, **kwargs)
        known = self.layouts.get(key)
        if known is not None:
            self.counter.reused += 1
            is_tuple, layouts = known
            outs = tuple(torch.empty_strided(s, st, dtype=dt, device="meta") for s, st, dt in layouts)
            return outs if is_tuple else outs[0]
        out = func(*args, **kwargs)
        outs = out if isinstance(out, tuple) else (out,)
        if all(
            type(o) is torch.Tensor and o.device.type == "meta" and o.layout == torch.strided for o in outs
        ):
            self.layouts[key] = (
                isinstance(out, tuple),
                tuple((tuple(o.shape), o.stride(), o.dtype) for o in outs),
            )
        return out


class MetaFlopCounter:
    """A context manager counting the FLOPs of what runs inside it (module docstring); ``get_flop_counts()`` as
    FlopCounterMode's: module path (``"Global"`` for all) → op → FLOPs. ``reused``: ops answered from the memo."""

    def __init__(self, memo: bool = True) -> None:
        self.memo = memo
        self.counts: defaultdict[str, defaultdict[Any, int]] = defaultdict(lambda: defaultdict(int))
        self.tracker = ModuleTracker()
        self.reused = 0
        self._mode: _Mode | None = None

    def __enter__(self) -> MetaFlopCounter:
        self.tracker.__enter__()  # type: ignore[no-untyped-call]
        self._mode = _Mode(self)
        self._mode.__enter__()  # type: ignore[no-untyped-call]
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._mode is not None
        self._mode.__exit__(kind, exc, tb)  # type: ignore[no-untyped-call]
        self._mode = None
        self.tracker.__exit__()  # type: ignore[no-untyped-call]

    def get_flop_counts(self) -> dict[str, dict[Any, int]]:
        return {module: dict(ops) for module, ops in self.counts.items()}
