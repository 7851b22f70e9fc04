"""``bench --nproc N``: the training step (or forward) of embedcalc's model on N processes of torch.distributed.

The processes are started by torchrun's own machinery in-process (``torch.distributed.launcher.elastic_launch``,
what the ``torchrun`` binary calls), over gloo on the CPU and NCCL on CUDA, with a c10d rendezvous on localhost.
Strategies, each the way torch ships it:

- ``ddp``: ``DistributedDataParallel`` (Li et al. 2020): a full replica per rank, gradients all-reduced in buckets;
- ``fsdp``: FSDP2 ``fully_shard`` on every block and on the root (:func:`embedcalc.modeling.sharding.apply_fsdp`;
  ZeRO-3: weights, gradients and optimizer state sharded over the ranks, weights all-gathered per block in forward
  and backward);
- ``tp``: DTensor tensor parallelism (``parallelize_module`` with :func:`embedcalc.modeling.sharding.tp_plan`),
  every rank on the same batch.

Each rank reports its step times (a barrier before every timed step, so the slowest rank sets the pace, as it does
in training), its peak memory (RSS growth on the CPU, ``max_memory_allocated`` on CUDA), its local parameter count,
and the time its collectives took, from ``torch.profiler`` events of two extra profiled steps (``gloo:*`` on the
CPU; NCCL kernels on CUDA). A rank that dies ends the whole group: torchrun's agent stops the others and
:class:`DistributedRunError` says which rank failed and how.

Fault injection for tests: ``EMBEDCALC_FAULT_RANK=R`` makes rank R kill itself (SIGKILL) before its first timed
step, the way an out-of-memory kill or a lost node ends a rank.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import torch

from embedcalc.config.schema import ModelConfig
from embedcalc.modeling.device import peak_memory
from embedcalc.modeling.steps import make_inputs, make_step
from embedcalc.modeling.timing import Clock, Timings

Strategy = Literal["ddp", "fsdp", "tp"]
FAULT_ENV = "EMBEDCALC_FAULT_RANK"


class DistributedRunError(RuntimeError):
    """A rank failed; the message names it and its exit code or signal."""


@dataclass(frozen=True)
class DistributedSettings:
    """What every rank runs."""

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


def _wrap(model: torch.nn.Module, config: ModelConfig, settings: DistributedSettings, device: torch.device) -> Any:
    if settings.strategy == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        # gradients as views into DDP's buckets: no second copy of every gradient (what the prediction assumes)
        return DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None, gradient_as_bucket_view=True
        )
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh(device.type, (settings.nproc,))
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
        if name.startswith(("gloo:", "nccl:")) or name.startswith("ncclDevKernel") or name.startswith("ncclKernel"):
            cuda_us = getattr(event, "device_time_total", 0) or getattr(event, "cuda_time_total", 0)
            seconds += (cuda_us if name.startswith("nccl") and cuda_us else event.cpu_time_total) / 1e6
            calls += event.count
            ops[name] = ops.get(name, 0) + event.count
    return seconds / steps, calls / steps, ops


def _page_in(config: ModelConfig, settings: DistributedSettings, device: torch.device) -> None:
    """Two steps of a miniature of the model (same options, toy size): the page-in of the rank's peak memory, so
    that the kernels' code pages and the process group's buffers are resident and not counted as the model's."""
    from embedcalc.modeling.benchmark import miniature
    from embedcalc.modeling.model import build_model

    tiny = miniature(config)
    if settings.strategy == "tp":
        from embedcalc.modeling.sharding import sharding_config

        tiny = sharding_config(tiny, settings.nproc)
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
    config = ModelConfig.model_validate(config_data)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if settings.device == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    rank = dist.get_rank()
    threads = settings.threads or max(1, (os.cpu_count() or 1) // settings.nproc)
    torch.set_num_threads(threads)
    try:
        with peak_memory(device, lambda: _page_in(config, settings, device)) as peak:
            if settings.strategy == "tp":
                from embedcalc.modeling.sharding import sharding_config

                config = sharding_config(config, settings.nproc)  # vocabulary padded, KV heads for every rank
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
            device=str(device), threads=threads,
        )  # fmt: skip
        return asdict(result)
    finally:
        dist.destroy_process_group()


@contextmanager
def _quiet_launcher() -> Iterator[None]:
    """torchrun's agent logs a failed rank's traceback itself; the error is reported once, by the caller."""
    prefixes = ("torch.distributed.elastic", "torch.multiprocessing.spawn", "torch.distributed.run")
    names = {*prefixes, *(n for n in logging.root.manager.loggerDict if n.startswith(prefixes))}
    loggers = [logging.getLogger(name) for name in sorted(names)]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def launch(config: ModelConfig, settings: DistributedSettings) -> list[RankResult]:
    """Run ``settings.nproc`` ranks under torchrun's launcher and collect every rank's result, in rank order."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    launch_config = LaunchConfig(
        min_nodes=1, max_nodes=1, nproc_per_node=settings.nproc, run_id=f"embedcalc-{os.getpid()}",
        rdzv_backend="c10d", rdzv_endpoint="localhost:0", max_restarts=0, monitor_interval=0.1,
    )  # fmt: skip
    try:
        with _quiet_launcher():
            results = elastic_launch(launch_config, _worker)(config.model_dump(mode="json"), asdict(settings))
    except SignalException as exc:  # the agent stopped every rank before re-raising the signal it got
        if exc.sigval == signal.SIGINT:
            raise KeyboardInterrupt from None
        raise DistributedRunError(f"stopped by {exc.sigval.name}; torchrun stopped every rank") from None
    except ChildFailedError as exc:
        rank, failure = exc.get_first_failure()
        signal_name = failure.signal_name()
        how = f"signal {signal_name}" if signal_name != "<N/A>" else f"exit {failure.exitcode}"
        detail = failure.message.strip() if isinstance(failure.message, str) and signal_name == "<N/A>" else ""
        if "To enable traceback" in detail or detail == "<NONE>":
            detail = "its own line above says why"
        raise DistributedRunError(
            f"rank {rank} of {settings.nproc} failed ({how}){': ' + detail if detail else ''}; "
            "torchrun stopped the other ranks"
        ) from None
    return [RankResult(**results[r]) for r in sorted(results)]
