"""``verify --tp/--dp/--zero 3/--pp``: the analytic per-device split beside the shards torch really makes.

Two independent sides. Analytic: the tensor list of :mod:`embedcalc.analysis.params`, split by
:func:`embedcalc.analysis.parallel.sharded_shape` (TP) and by FSDP2's rule for ZeRO-3 (every tensor chunked along
its first dimension over the dp ranks, torch.chunk's sizes, in the torch layout of
:func:`embedcalc.analysis.comm.gradient_buckets.torch_row_splits`), pipeline stages from ``stage_params``,
collectives from :func:`embedcalc.analysis.comm.volumes.communication`. Torch:
:func:`embedcalc.modeling.fake_group.shard_on_fake_group` (DTensor ``parallelize_module`` and FSDP2 ``fully_shard``
on a fake process group; local numel per rank from the DTensor placements; the collectives of one forward and
backward recorded by CommDebugMode) and the module split of :func:`embedcalc.modeling.sharding.stage_module_params`.
Every row must agree exactly; a difference names the breakdown key and the torch tensors behind it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from embedcalc.analysis.comm.gradient_buckets import torch_row_splits, torch_tensor_count
from embedcalc.analysis.comm.volumes import communication
from embedcalc.analysis.parallel import sharded_shape, stage_params
from embedcalc.analysis.params import param_tensors
from embedcalc.analysis.workload import Parallelism, Workload
from embedcalc.config.resolved import ResolvedShape

_TORCH_OPS = {"all_reduce": "all-reduce", "_allgather_base_": "all-gather", "_reduce_scatter_base_": "reduce-scatter",
              "all_gather_into_tensor": "all-gather", "reduce_scatter_tensor": "reduce-scatter"}  # fmt: skip


@dataclass(frozen=True)
class ShardRow:
    """One breakdown key on one rank: analytic local numel beside torch's."""

    key: str
    rank: int
    analytic: int
    torch: int
    tensors: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return self.analytic == self.torch


@dataclass(frozen=True)
class CommRow:
    """One collective kind in one pass: analytic count and payload beside what torch issued."""

    kind: str
    phase: str
    analytic_count: int
    torch_count: int
    analytic_bytes: int
    torch_bytes: int

    @property
    def ok(self) -> bool:
        return (self.analytic_count, self.analytic_bytes) == (self.torch_count, self.torch_bytes)


@dataclass(frozen=True)
class ShardedVerify:
    """The reconciliation of one parallel layout."""

    target: str
    parallel: Parallelism
    shards: list[ShardRow]
    collectives: list[CommRow]
    stages: list[ShardRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    failed: bool = False  # torch could not run the sharded step

    @property
    def agree(self) -> bool:
        shards_ok = all(r.ok for r in (*self.shards, *self.stages))
        return shards_ok and all(r.ok for r in self.collectives) and not self.failed

    def mismatches(self) -> list[str]:
        out = [f"{r.key} on rank {r.rank}: analytic {r.analytic:,} vs torch {r.torch:,} ({', '.join(r.tensors[:3])})"
               for r in (*self.shards, *self.stages) if not r.ok]  # fmt: skip
        out += [f"{r.kind} ({r.phase}): analytic {r.analytic_count} calls / {r.analytic_bytes:,} B vs torch "
                f"{r.torch_count} / {r.torch_bytes:,} B" for r in self.collectives if not r.ok]  # fmt: skip
        return out + ([n for n in self.notes if n.startswith("the sharded training step failed")] if self.failed
                      else [])  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        p = self.parallel
        return {
            "target": self.target, "tp": p.tp, "dp": p.dp, "zero": p.zero, "pp": p.pp, "agree": self.agree,
            "shards": [vars(r) | {"ok": r.ok, "tensors": list(r.tensors)} for r in self.shards],
            "collectives": [vars(r) | {"ok": r.ok} for r in self.collectives],
            "stages": [vars(r) | {"ok": r.ok, "tensors": list(r.tensors)} for r in self.stages],
            "mismatches": self.mismatches(), "notes": self.notes,
        }  # fmt: skip


def _chunk(rows: int, parts: int, index: int) -> int:
    size = -(-rows // parts)
    return max(0, min(size, rows - index * size))


def analytic_shards(config: ResolvedShape, tp: int, dp: int, zero3: bool) -> dict[str, list[int]]:
    """Local parameters per breakdown key on every rank (rank = dp index x tp + tp index)."""
    out: dict[str, list[int]] = {}
    par = Parallelism(tp=tp)
    for tensor in param_tensors(config):
        shape = tuple(int(s) for s in sharded_shape(tensor, par, config))
        torch_tensors = torch_tensor_count(tensor)
        per_rank = []
        for rank in range(tp * dp):
            if zero3:
                splits = torch_row_splits(tensor, shape, config, tp)
                local = sum(_chunk(rows, dp, rank // tp) * rest for rows, rest in splits) * torch_tensors
            else:
                numel = 1
                for s in shape:
                    numel *= s
                local = numel * int(tensor.copies)
            per_rank.append(local)
        row = out.setdefault(tensor.key, [0] * (tp * dp))
        out[tensor.key] = [a + b for a, b in zip(row, per_rank, strict=True)]
    return out


def _torch_shards(
    local: dict[str, list[int]], key_of: Any
) -> tuple[dict[str, list[int]], dict[str, list[str]]]:
    sums: dict[str, list[int]] = {}
    names: dict[str, list[str]] = {}
    for name, per_rank in local.items():
        key = key_of(name.rsplit(".", 1)[0]) or name
        row = sums.setdefault(key, [0] * len(per_rank))
        sums[key] = [a + b for a, b in zip(row, per_rank, strict=True)]
        names.setdefault(key, []).append(name)
    return sums, names


def _comm_rows(config: ResolvedShape, workload: Workload, recorded: list[Any]) -> list[CommRow]:
    expected: dict[tuple[str, str], list[int]] = {}
    for c in communication(config, workload).collectives:
        if c.group in ("tp", "dp"):
            entry = expected.setdefault((c.kind, c.phase), [0, 0])
            entry[0] += c.count
            entry[1] += c.payload_bytes
    seen: dict[tuple[str, str], list[int]] = {}
    for r in recorded:
        kind = _TORCH_OPS.get(r.op, r.op)
        entry = seen.setdefault((kind, "backward" if r.backward else "forward"), [0, 0])
        entry[0] += 1
        entry[1] += r.payload_bytes
    rows = []
    for kind, phase in sorted(set(expected) | set(seen)):
        (a_count, a_bytes), (t_count, t_bytes) = (
            expected.get((kind, phase), [0, 0]),
            seen.get((kind, phase), [0, 0]),
        )
        rows.append(CommRow(kind, phase, a_count, t_count, a_bytes, t_bytes))
    return rows


def verify_sharded(
    target: str, config: ResolvedShape, parallel: Parallelism, attention: str = "eager", batch_size: int = 1,
    seq_len: int = 16, plan_override: dict[str, Any] | None = None,
) -> ShardedVerify:  # fmt: skip
    """Shard ``config`` on a fake process group and reconcile every rank and every collective (module docstring)."""
    from embedcalc.reconcile.verify import check_buildable

    check_buildable(config, target, "verify")
    from embedcalc.modeling.counting import component_key
    from embedcalc.modeling.fake_group import shard_on_fake_group
    from embedcalc.modeling.model import build_model
    from embedcalc.modeling.sharding import sharding_config, stage_module_params

    tp, dp, zero3 = parallel.tp, parallel.dp, parallel.zero == 3
    notes: list[str] = []
    shards: list[ShardRow] = []
    collectives: list[CommRow] = []
    if tp > 1 or zero3:
        run = shard_on_fake_group(config, tp, dp, zero3, attention, batch_size, seq_len, plan_override)
        notes += run.notes
        torch_sums, names = _torch_shards(run.local_numel, component_key)
        analytic = analytic_shards(config, tp, dp if zero3 else 1, zero3)
        ranks = tp * (dp if zero3 else 1)
        for key in sorted(set(analytic) | set(torch_sums)):
            a, t = analytic.get(key, [0] * ranks), torch_sums.get(key, [0] * ranks)
            shards += [ShardRow(key, r, a[r], t[r], tuple(names.get(key, []))) for r in range(ranks)]
        if run.collectives is not None:
            workload = Workload(
                batch_size=batch_size,
                seq_len=seq_len,
                mode="training",
                parallel=Parallelism(tp=tp, dp=dp if zero3 else 1, zero=3 if zero3 else 0),
            )
            collectives = _comm_rows(config, workload, run.collectives)  # fmt: skip
    stages: list[ShardRow] = []
    if parallel.pp > 1:
        model = build_model(sharding_config(config, 1))
        torch_stages = stage_module_params(model, config, parallel.pp)
        analytic_stages = stage_params(config, Parallelism(pp=parallel.pp))
        for i, (planned, held) in enumerate(zip(analytic_stages, torch_stages, strict=True)):
            stages.append(ShardRow(f"stage {i}", i, int(planned), sum(held.values()), tuple(held.keys())))
        if tp > 1:
            notes.append("pipeline stages reconciled on one tensor-parallel rank of tp 1 (stages x tp: each stage's "
                         "tensors split as the shards above)")  # fmt: skip
    failed = any(note.startswith("the sharded training step failed") for note in notes)
    return ShardedVerify(target, parallel, shards, collectives, stages, notes, failed)
