"""The tensors data parallelism moves, as PyTorch lays them out: DDP's gradient buckets and FSDP2's units
(the conventions are in :mod:`embedcalc.analysis.comm.volumes`'s docstring, which counts the collectives).

Both are written as runs of identical layers, so their cost does not grow with the depth; the ``*_bytes`` /
``fsdp_units`` forms write them out for small models (tests and reconciliation against torch's own shards).
"""

from __future__ import annotations

from math import prod
from typing import Any

from embedcalc.config.resolved import ResolvedShape

MIB = 2**20
DDP_FIRST_BUCKET_BYTES = 1 * MIB
DDP_BUCKET_BYTES = 25 * MIB


def ddp_buckets(tensor_bytes: list[int]) -> int:
    """All-reduce calls DDP makes for gradients of these sizes, in the order they become ready (the reverse of the
    model's parameter order): DDP fills a bucket with whole tensors until it holds at least its limit (1 MiB for
    the first, 25 MiB after), so one tensor larger than the limit is a bucket of its own."""
    return ddp_bucket_count([(tensor_bytes, 1)])


# a sequence written as (period, repeats) pieces: the tensors of layer after layer
Runs = list[tuple[list[int], int]]


def _fill(period: list[int], buckets: int, filled: int, limit: int) -> tuple[int, int, int]:
    for size in period:
        if size <= 0:
            continue
        filled += size
        if filled >= limit:
            buckets, filled, limit = buckets + 1, 0, DDP_BUCKET_BYTES
    return buckets, filled, limit


def ddp_bucket_count(runs: Runs) -> int:
    """:func:`ddp_buckets` of the sequence ``runs`` describes, in time that does not grow with the repeats: the
    filling state at the start of a period (bytes in the open bucket) takes few values (a bucket closes at some
    tensor of the period and restarts empty, or it keeps growing by the period's bytes, at most limit / bytes
    times), so once a state recurs the buckets of the cycle are counted by multiplication."""
    buckets, filled, limit = 0, 0, DDP_FIRST_BUCKET_BYTES
    for period, repeats in runs:
        seen: dict[tuple[int, int], tuple[int, int]] = {}  # state -> (repeats done, buckets) when first seen
        done = 0
        while done < repeats:
            state = (filled, limit)
            if state in seen:
                first_done, first_buckets = seen[state]
                cycle, gained = done - first_done, buckets - first_buckets
                jumps = (repeats - done) // cycle
                buckets, done = buckets + jumps * gained, done + jumps * cycle
                seen.clear()  # the rest (fewer than one cycle) is simulated
                if done >= repeats:
                    break
            seen[state] = (done, buckets)
            buckets, filled, limit = _fill(period, buckets, filled, limit)
            done += 1
    return buckets + (1 if filled else 0)


def gradient_tensor_runs(config: ResolvedShape, par: Any, bytes_per_param: int) -> Runs:
    """One device's parameter tensors (one TP rank of the heaviest stage), each layer's its own, in the reverse of
    module order (embeddings, the blocks layer by layer, final norms and heads): the order DDP's gradients arrive.
    Written as runs of identical layers, so its size does not grow with the depth."""
    from embedcalc.analysis.parallel import sharded_shape, stage_tensors

    stages = stage_tensors(config, par)
    sizes = [sum(int(prod(sharded_shape(t, par, config))) * int(n) for t, n in s) for s in stages]
    heaviest = stages[sizes.index(max(sizes))]
    front: list[int] = []
    layers: dict[str, list[tuple[int, int]]] = {}  # stack -> (bytes of one layer's tensor, layers)
    back: list[int] = []
    for tensor, copies in heaviest:
        one = int(prod(sharded_shape(tensor, par, config))) * bytes_per_param
        if tensor.per_layer:
            per_layer = max(tensor.per_layer_copies, 1) if not tensor.expert else 1
            layers.setdefault(tensor.stack or "", []).append((one * per_layer, int(copies) // per_layer))
        elif tensor.key.startswith("embedding/"):
            front += [one] * int(copies)
        else:
            back += [one] * int(copies)
    runs: Runs = [(front, 1)]
    for (
        entries
    ) in layers.values():  # layer i holds the tensors with more than i layers: constant between counts
        start = 0
        for stop in sorted({n for _, n in entries if n > 0}):
            runs.append(([size for size, n in entries if start < n], stop - start))
            start = stop
    runs.append((back, 1))
    return [(list(reversed(period)), repeats) for period, repeats in reversed(runs) if period and repeats]


def gradient_tensor_bytes(config: ResolvedShape, par: Any, bytes_per_param: int) -> list[int]:
    """:func:`gradient_tensor_runs` written out, tensor by tensor (small models: tests and reconciliation)."""
    return [size for period, repeats in gradient_tensor_runs(config, par, bytes_per_param)
            for _ in range(repeats) for size in period]  # fmt: skip


def fsdp_unit_runs(config: ResolvedShape, tp: int, dp: int, dtype_bytes: int) -> list[tuple[str, int, int]]:
    """(unit, bytes it all-gathers, how many such units) of FSDP2 ``fully_shard`` on each stack's relative-position
    table (T5: its stack computes the bias before the first block runs), on every block and on the root (last,
    one), one TP rank's tensors: each parameter tensor is padded along its first dimension to a multiple of
    dp (FSDP2's rule), in the torch layout (q, k, v and gate, up separate; experts stacked as (E, ·, ·)). One
    entry per kind of block, whatever the depth."""
    from embedcalc.analysis.parallel import sharded_shape
    from embedcalc.analysis.params import param_tensors
    from embedcalc.analysis.workload import Parallelism

    par = Parallelism(tp=tp)
    blocks: dict[tuple[str, str], int] = {}
    layers_of: dict[tuple[str, str], int] = {}
    tables: dict[str, tuple[int, int]] = {}  # a stack's table unit (T5's bias, DeBERTa's table and norm)
    root = 0
    for tensor in param_tensors(config):
        shape = tuple(int(s) for s in sharded_shape(tensor, par, config))
        padded = sum(-(-rows // dp) * dp * rest for rows, rest in torch_row_splits(tensor, shape, config, tp))
        if tensor.key.endswith(("attention/relative_bias", "attention/rel_embeddings")):
            name = f"{tensor.stack} relative-position table"
            tables[name] = (tables.get(name, (0, 0))[0] + padded * dtype_bytes, int(tensor.copies))
        elif tensor.per_layer and not config.shared_layers:
            unit = (tensor.stack or "", tensor.block or "")
            # one (E, ·, ·) tensor holds every expert
            per_layer = 1 if tensor.expert else tensor.per_layer_copies
            blocks[unit] = blocks.get(unit, 0) + padded * per_layer * dtype_bytes
            layers_of[unit] = int(tensor.copies) // max(tensor.per_layer_copies, 1)
        else:
            root += padded * torch_tensor_count(tensor) * dtype_bytes
    runs = [
        (f"{stack} {block} block", size, layers_of[(stack, block)]) for (stack, block), size in blocks.items()
    ]
    return [*((name, size, count) for name, (size, count) in tables.items()), *runs, ("root", root, 1)]


def fsdp_units(config: ResolvedShape, tp: int, dp: int, dtype_bytes: int) -> list[tuple[str, int]]:
    """:func:`fsdp_unit_runs` written out, one (unit, bytes) per unit (small models: tests and reconciliation)."""
    return [
        (name, size)
        for name, size, count in fsdp_unit_runs(config, tp, dp, dtype_bytes)
        for _ in range(count)
    ]


def torch_tensor_count(tensor: Any) -> int:
    """How many torch tensors hold the ``copies`` of one analytic tensor: one per copy, except routed experts,
    stacked (E, ·, ·) in one tensor per layer."""
    return int(tensor.copies) // max(tensor.per_layer_copies, 1) if tensor.expert else int(tensor.copies)


def torch_row_splits(
    tensor: Any, shape: tuple[int, ...], config: ResolvedShape, tp: int
) -> list[tuple[int, int]]:
    """(rows, elements per row) of each torch tensor behind one analytic tensor of TP-local ``shape``: the fused
    Q/K/V is q, k, v; a dense gated FFN input is gate and up; stacked experts are (E, ·, ·), one row per expert."""
    rest = 1
    for s in shape[1:]:
        rest *= s
    if tensor.expert:
        return [(int(tensor.per_layer_copies), shape[0] * rest)]
    if tensor.split == "qkv":
        kv = shape[0] - config.q_dim // tp
        return [(config.q_dim // tp, rest), (kv // 2, rest), (kv // 2, rest)]
    if tensor.key.endswith("ffn/in") and config.gated:
        return [(shape[0] // 2, rest), (shape[0] // 2, rest)]
    return [(shape[0], rest)]
