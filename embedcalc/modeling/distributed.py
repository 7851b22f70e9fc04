"""``bench --nproc N``: the training step (or forward) of embedcalc's model on N processes of torch.distributed.

The processes are started by torchrun's own launcher (:mod:`embedcalc.modeling.launch`: one node on localhost, or
several nodes on one c10d rendezvous), over gloo on the CPU and NCCL on CUDA. Strategies, each the way torch ships
it, over every rank of every node:

- ``ddp``: ``DistributedDataParallel`` (Li et al. 2020): a full replica per rank, gradients all-reduced in buckets;
- ``fsdp``: FSDP2 ``fully_shard`` on every block and on the root (:func:`embedcalc.modeling.sharding.apply_fsdp`;
  ZeRO-3: weights, gradients and optimizer state sharded over the ranks, weights all-gathered per block in forward
  and backward);
- ``tp``: DTensor tensor parallelism (``parallelize_module`` with :func:`embedcalc.modeling.sharding.tp_plan`),
  every rank on the same batch.

Each rank reports its step times (a barrier before every timed step, so the slowest rank sets the pace, as it does
in training), its peak memory (RSS growth on the CPU, ``max_memory_allocated`` on CUDA), its local parameter count,
and the time its collectives took, from ``torch.profiler`` events of two extra profiled steps (``gloo:*`` on the
CPU; NCCL kernels on CUDA). At the end every rank's result is gathered (``all_gather_object``) and returned by the
rank that holds the report, local rank 0 of node 0; the ranks of other nodes return where the report is. Before
any model is built the ranks check that the nodes' ``--node-rank`` values are 0 .. M-1, each once. A rank that dies
ends the whole group: torchrun's agent stops the others and :class:`DistributedRunError` says which rank failed
and how (a rank of another node that dies ends this node's ranks in their next collective).

Fault injection for tests: ``EMBEDCALC_FAULT_RANK=R`` makes rank R kill itself (SIGKILL) before its first timed
step, the way an out-of-memory kill or a lost node ends a rank.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

import torch

from embedcalc.config.resolved import ResolvedShape
from embedcalc.config.schema import ModelConfig
from embedcalc.modeling.device import peak_memory
from embedcalc.modeling.launch import DistributedRunError, Rendezvous, RendezvousFailedError, launch
from embedcalc.modeling.steps import make_inputs, make_step
from embedcalc.modeling.timing import Clock, Timings

Strategy = Literal["ddp", "fsdp", "tp"]
FAULT_ENV = "EMBEDCALC_FAULT_RANK"

__all__ = ["DistributedRunError", "DistributedSettings", "RankResult", "Rendezvous", "RendezvousFailedError",
           "ReportElsewhere", "run_ranks"]  # fmt: skip


@dataclass(frozen=True)
class DistributedSettings:
    """What every rank runs (``nproc`` per node, on ``nnodes`` nodes; ``node_rank`` is this node's)."""

    nproc: int
    strategy: Strategy
    mode: Literal["inference", "training"]
    batch_size: int  # per rank for ddp / fsdp; the whole batch for tp
    seq_len: int
    tgt_len: int | None
    attention: Literal["sdpa", "eager"]
    warmup: int
    repeat: int
    device: Literal["cpu", "cuda"]
    threads: int | None = None
    nnodes: int = 1
    node_rank: int = 0

    @property
    def world_size(self) -> int:
        return self.nproc * self.nnodes


@dataclass(frozen=True)
class RankResult:
    """What one rank measured."""

    rank: int
    step_seconds: list[float]
    comm_seconds_per_step: float
    comm_calls_per_step: float
    comm_ops: dict[str, int] = field(default_factory=dict)
    peak_memory_bytes: int = 0
    memory_method: str = ""
    local_params: int = 0
    device: str = "cpu"
    threads: int = 1
    node_rank: int = 0
    host: str = ""

    @property
    def median_s(self) -> float:
        return Timings(self.step_seconds).median_s

    def quantile_s(self, q: float) -> float:
        return Timings(self.step_seconds).quantile_s(q)


def _local_numel(model: torch.nn.Module) -> int:
    """Parameters this rank holds: the local shard of a DTensor, else the whole tensor."""
    total = 0
    for p in model.parameters():
        local = p.to_local() if hasattr(p, "to_local") else p
        total += int(local.numel())
    return total


def _wrap(
    model: torch.nn.Module, config: ResolvedShape, settings: DistributedSettings, device: torch.device
) -> Any:
    if settings.strategy == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        # gradients as views into DDP's buckets: no second copy of every gradient (what the prediction assumes)
        return DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None, gradient_as_bucket_view=True
        )
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh(device.type, (settings.world_size,))
    if settings.strategy == "fsdp":
        from embedcalc.modeling.sharding import apply_fsdp

        apply_fsdp(model, mesh)
        return model
    from embedcalc.modeling.sharding import apply_tensor_parallel

    apply_tensor_parallel(model, mesh)
    return model


@contextmanager
def _stderr_to_devnull() -> Iterator[None]:
    """The profiler's C++ side prints a start and a stop line on file descriptor 2 that no setting turns off;
    they are not the user's business. An exception inside is still raised (and reported) after the restore."""
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _comm_profile(step: Any, steps: int) -> tuple[float, float, dict[str, int]]:
    """(seconds, calls) per step spent in collectives over ``steps`` profiled steps, and the op counts."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    with _stderr_to_devnull(), profile(activities=activities) as prof:
        for _ in range(steps):
            step()
    seconds, calls = 0.0, 0
    ops: dict[str, int] = {}
    for event in prof.key_averages():
        name = event.key
        if (
            name.startswith(("gloo:", "nccl:"))
            or name.startswith("ncclDevKernel")
            or name.startswith("ncclKernel")
        ):
            cuda_us = getattr(event, "device_time_total", 0) or getattr(event, "cuda_time_total", 0)
            seconds += (cuda_us if name.startswith("nccl") and cuda_us else event.cpu_time_total) / 1e6
            calls += event.count
            ops[name] = ops.get(name, 0) + event.count
    return seconds / steps, calls / steps, ops


def _page_in(config: ResolvedShape, settings: DistributedSettings, device: torch.device) -> None:
    """Two steps of a miniature of the model (same options, toy size): the page-in of the rank's peak memory, so
    that the kernels' code pages and the process group's buffers are resident and not counted as the model's."""
    from embedcalc.modeling.benchmark import miniature
    from embedcalc.modeling.model import build_model

    tiny = miniature(config)
    if settings.strategy == "tp":
        from embedcalc.modeling.sharding import sharding_config

        tiny = sharding_config(tiny, settings.world_size)
    model = _wrap(build_model(tiny, attention=settings.attention, device=device), tiny, settings, device)
    inputs = make_inputs(tiny, 1, min(8, tiny.max_seq_len), None, device)
    step = make_step(model, inputs, settings.mode, fused=settings.strategy != "tp")
    for _ in range(2):
        step()


def _worker(config_data: dict[str, Any], settings_data: dict[str, Any]) -> dict[str, Any]:
    """One rank, as torchrun starts it; a failure ends the rank with one line on stderr (no traceback), which the
    launcher then reports as that rank's failure."""
    try:
        return _run_rank(config_data, settings_data)
    except Exception as exc:
        rank = os.environ.get("RANK", "?")
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise SystemExit(f"embedcalc: rank {rank}: {type(exc).__name__}: {detail}") from None


def _run_rank(config_data: dict[str, Any], settings_data: dict[str, Any]) -> dict[str, Any]:
    """Build, wrap, warm up, time and profile one rank."""
    import torch.distributed as dist

    from embedcalc.modeling.model import build_model

    settings = DistributedSettings(**settings_data)
    config: ResolvedShape = ModelConfig.model_validate(config_data)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if settings.device == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    rank = dist.get_rank()
    _check_node_ranks(settings)
    threads = settings.threads or max(1, (os.cpu_count() or 1) // settings.nproc)
    torch.set_num_threads(threads)
    try:
        with peak_memory(device, lambda: _page_in(config, settings, device)) as peak:
            if settings.strategy == "tp":
                from embedcalc.modeling.sharding import sharding_config

                # vocabulary padded, KV heads for every rank
                config = sharding_config(config, settings.world_size)
            model = build_model(config, attention=settings.attention, device=device, dtype=torch.float32)
            wrapped = _wrap(model, config, settings, device)
            local_params = _local_numel(model)
            inputs = make_inputs(config, settings.batch_size, settings.seq_len, settings.tgt_len, device)
            # tensor parallel: every rank on the same batch, the for-each AdamW over the DTensor shards
            step = make_step(wrapped, inputs, settings.mode, fused=settings.strategy != "tp")
            for _ in range(settings.warmup):
                step()
            if os.environ.get(FAULT_ENV) == str(rank):
                os.kill(os.getpid(), signal.SIGKILL)
            clock = Clock(device)
            seconds: list[float] = []
            for _ in range(settings.repeat):
                dist.barrier()  # the slowest rank sets the pace, as in training
                seconds.append(clock.time(step))
        comm_s, comm_calls, ops = _comm_profile(step, 2)  # after the memory reading: the profiler allocates
        result = RankResult(
            rank=rank, step_seconds=seconds, comm_seconds_per_step=comm_s, comm_calls_per_step=comm_calls,
            comm_ops=ops, peak_memory_bytes=peak.bytes, memory_method=peak.method, local_params=local_params,
            device=str(device), threads=threads, node_rank=settings.node_rank, host=socket.gethostname(),
        )  # fmt: skip
        return _gather(result, local_rank)
    finally:
        dist.destroy_process_group()


def _check_node_ranks(settings: DistributedSettings) -> None:
    """Every node's ``--node-rank`` is one of 0 .. nnodes-1, each node's its own (else every rank raises the same
    error, before anything is built)."""
    import torch.distributed as dist

    if settings.nnodes == 1:
        return
    seen: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(seen, settings.node_rank)
    nodes = sorted(set(seen))
    if nodes != list(range(settings.nnodes)) or any(seen.count(n) != settings.nproc for n in nodes):
        raise ValueError(
            f"the nodes' --node-rank values are {nodes} (counted once per rank: {sorted(seen)}); run each of the "
            f"{settings.nnodes} nodes with its own --node-rank from 0 to {settings.nnodes - 1}"
        )


def _gather(result: RankResult, local_rank: int) -> dict[str, Any]:
    """Every rank's result, gathered on every rank (a few hundred bytes each) and returned whole by local rank 0 of
    node 0, the rank whose launcher prints the report; the other ranks return where that is."""
    import torch.distributed as dist

    everyone: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, (local_rank, asdict(result)))
    holder = next(r for r, (local, data) in enumerate(everyone) if local == 0 and data["node_rank"] == 0)
    if result.rank == holder:
        return {"ranks": [data for _, data in everyone]}
    return {"report_rank": holder, "report_host": everyone[holder][1]["host"]}


@dataclass(frozen=True)
class ReportElsewhere:
    """What a node other than node 0 gets back: its ranks took part, the report is on ``host`` (rank ``rank``)."""

    host: str
    rank: int
    node_rank: int
    local_ranks: list[int]  # the global ranks this node ran

    def to_json(self) -> dict[str, Any]:
        return {"report_on": {"host": self.host, "rank": self.rank, "node_rank": 0}, "node_rank": self.node_rank,
                "ranks_here": self.local_ranks}  # fmt: skip


def run_id(config: ResolvedShape, settings: DistributedSettings) -> str:
    """The rendezvous id every node of one run computes alike: a digest of the model and of what every rank runs
    (all but this node's rank), so that only nodes running the same command meet."""
    shared = asdict(replace(settings, node_rank=0))
    digest = hashlib.sha256(json.dumps([config.model_dump(mode="json"), shared], sort_keys=True).encode())
    return f"embedcalc-{digest.hexdigest()[:12]}"


def run_ranks(
    config: ResolvedShape, settings: DistributedSettings, rendezvous: Rendezvous
) -> list[RankResult] | ReportElsewhere:
    """Run this node's ``settings.nproc`` ranks; every rank's result in rank order on the node holding the report
    (node 0), or where the report is on any other node."""
    ident = run_id(config, settings) if rendezvous.multi_node else f"embedcalc-{os.getpid()}"
    results = launch(
        _worker, (config.model_dump(mode="json"), asdict(settings)), settings.nproc, rendezvous, ident
    )
    for value in results.values():
        if "ranks" in value:
            return [RankResult(**data) for data in value["ranks"]]
    first = results[min(results)]
    return ReportElsewhere(first["report_host"], first["report_rank"], settings.node_rank, sorted(results))
