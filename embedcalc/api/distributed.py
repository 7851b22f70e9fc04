"""``bench --nproc N --strategy ddp|fsdp|tp [--nnodes M --node-rank R --rdzv-endpoint HOST:PORT]``: the model on N
processes per node under torchrun, each rank beside the analytic per-device prediction.

Before anything is launched (the pre-launch check, :func:`launch_problems`):

- **cores**: at most :data:`RANKS_PER_CORE` ranks per core this process may run on (``sched_getaffinity``);
  past that the ranks time-share the cores and the barrier-paced step time measures the scheduler, not the model.
  CUDA: at most one rank per GPU. ``--force`` does not lift these;
- **memory**: each rank is a torch process that holds :data:`RANK_PROCESS_BYTES` of its own before its model (the
  measured peak RSS of a rank of a miniature model), plus the analyzer's per-rank memory under the strategy's
  parallel setting. On the CPU the ranks share this machine's available memory; on CUDA each rank's model must fit
  one GPU and the processes this machine's RAM. Refused unless ``--force``.

Either refusal is exit 4 (the environment can't do it, DESIGN §6) with the numbers and the largest ``--nproc``
that passes. Multi-node: the same command on every node, each with its own ``--node-rank``, meets on torchrun's
c10d rendezvous (:mod:`embedcalc.modeling.launch`); node 0 gets the report of every rank, the others where it is.
A node that never joins ends the wait after ``--rdzv-timeout`` seconds (exit 4); no rank was started.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from embedcalc.analysis.workload import Workload
from embedcalc.api.bench import RunOptions, local_estimate, measured_analysis, run_settings
from embedcalc.api.load import load_target
from embedcalc.api.workload import usage
from embedcalc.config.limits import DEFAULT_RDZV_TIMEOUT_S
from embedcalc.errors import EmbedcalcError, ExitCode, UnsupportedEnvironmentError
from embedcalc.units import binary_bytes

if TYPE_CHECKING:
    from embedcalc.analysis.report import Analysis
    from embedcalc.modeling.distributed import ReportElsewhere
    from embedcalc.reconcile.distributed import DistributedBench

Strategy = Literal["ddp", "fsdp", "tp"]

# A rank's own resident memory besides its model: the peak RSS (VmHWM) of each rank of `bench tiny.yaml --nproc 2
# --strategy ddp --mode training --batch-size 1 --seq-len 16` (a 2-layer, 64-wide decoder whose tensors are a few
# hundred KiB), 361,058,304 and 361,029,632 bytes, sampled from /proc on the project's 2-core machine with torch
# 2.13.0+cpu (2026-12-01). It is torch, gloo, the profiler and autograd: a bare `import torch` with a one-rank gloo
# process group and one all-reduce peaks at 232,673,280 bytes, 243,851,264 with embedcalc's modeling imported.
RANK_PROCESS_BYTES = 361_058_304
RANKS_PER_CORE = 2  # the oversubscription bound: at most two ranks time-share one core
DEFAULT_RDZV_PORT = 29400  # torchrun's, for an endpoint given without a port

__all__ = ["DEFAULT_RDZV_TIMEOUT_S", "RANKS_PER_CORE", "RANK_PROCESS_BYTES", "DistributedReport", "ElsewhereReport",
           "LaunchCheck", "Nodes", "Strategy", "bench_ranks", "launch_problems"]  # fmt: skip


@dataclass(frozen=True)
class Nodes:
    """The nodes of one run: ``nnodes`` machines (default 1), this one's ``node_rank``, the c10d store's
    ``endpoint`` ``HOST[:PORT]`` (hosted by node 0; needed for more than one node) and how long a node waits for
    the others, ``timeout_s``. Bad values raise a usage error (exit 2) naming the flag."""

    nnodes: int = 1
    node_rank: int = 0
    endpoint: str | None = None
    timeout_s: int = DEFAULT_RDZV_TIMEOUT_S

    def __post_init__(self) -> None:
        if self.nnodes < 1:
            raise usage(f"--nnodes must be at least 1, got {self.nnodes}", "nnodes")
        if not 0 <= self.node_rank < self.nnodes:
            raise usage(
                f"--node-rank {self.node_rank} is not a node of --nnodes {self.nnodes}; use 0 to {self.nnodes - 1}, "
                "a different one on each node",
                "node_rank",
            )
        if self.timeout_s < 1:
            raise usage(f"--rdzv-timeout must be at least 1 second, got {self.timeout_s}", "rdzv_timeout")
        if self.nnodes > 1 and self.endpoint is None:
            raise usage(
                f"--nnodes {self.nnodes} needs --rdzv-endpoint HOST:PORT, node 0's address, the same on every node",
                "rdzv_endpoint",
            )
        if self.endpoint is not None:
            object.__setattr__(self, "endpoint", _endpoint(self.endpoint))


_LABEL = re.compile(r"(?!-)[A-Za-z0-9_-]{1,63}(?<!-)")  # a DNS label (RFC 1123; '_' as /etc/hosts allows)


def _endpoint_error(value: str, why: str) -> EmbedcalcError:
    shown = value if len(value) <= 80 else value[:80] + "..."
    return usage(f"--rdzv-endpoint {shown!r}: {why}; give node 0's address as HOST:PORT (e.g. 10.0.0.1:29400, "
                 "[fd00::1]:29400 or node0.cluster:29400)", "rdzv_endpoint")  # fmt: skip


def _host_problem(host: str) -> str | None:
    """Why ``host`` is no IPv4 address, bracketed IPv6 address or DNS name, or None."""
    if host.startswith("["):
        try:
            ipaddress.IPv6Address(host[1:-1] if host.endswith("]") else "x")
        except ValueError:
            return "the part in brackets is not an IPv6 address"
        return None
    if len(host) > 253 or not host.isascii():
        return "the host is not a name of at most 253 ASCII characters"
    if all(part.isdigit() for part in host.split(".")):
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            return "the host is not an IPv4 address"
        return None
    if not all(_LABEL.fullmatch(label) for label in host.split(".")):
        return "the host is not a host name (letters, digits and '-' between dots)"
    return None


def _endpoint(value: str) -> str:
    """``HOST[:PORT]`` -> ``HOST:PORT``, the port 1..65535 (torchrun's 29400 if omitted). HOST is an IPv4 address,
    an IPv6 address in brackets or a host name; anything else (a second ':', an unclosed bracket, a non-ASCII
    digit in the port) is a usage error naming the flag."""
    text = value.strip()
    if not text or len(text) > 300:
        raise _endpoint_error(value, "empty or longer than any address")
    if text.startswith("["):
        close = text.find("]")
        if close < 0:
            raise _endpoint_error(value, "an IPv6 address opens '[' without closing it")
        host, rest = text[: close + 1], text[close + 1 :]
        if rest and not rest.startswith(":"):
            raise _endpoint_error(value, "only ':PORT' may follow the bracketed address")
        port = rest[1:] if rest else str(DEFAULT_RDZV_PORT)
    elif text.count(":") > 1:
        raise _endpoint_error(value, "more than one ':' (write an IPv6 address in brackets)")
    else:
        host, _, port = text.partition(":") if ":" in text else (text, "", str(DEFAULT_RDZV_PORT))
    if (why := _host_problem(host)) is not None:
        raise _endpoint_error(value, why)
    if not (port.isascii() and port.isdigit() and len(port) <= 5 and 1 <= int(port) <= 65535):
        raise _endpoint_error(value, "the port must be 1 to 65535 (torchrun's default is 29400)")
    return f"{host}:{int(port)}"


@dataclass(frozen=True)
class DistributedReport:
    """The per-rank analysis (the strategy's layout) and every rank measured beside it."""

    analysis: Analysis
    result: DistributedBench

    def to_json(self) -> dict[str, Any]:
        """The ``results[]`` entry of ``embedcalc bench --nproc N --format json``."""
        return self.analysis.to_json() | {"distributed": self.result.to_json()}


@dataclass(frozen=True)
class ElsewhereReport:
    """On a node other than node 0: the prediction, and where the measured report of every rank is."""

    analysis: Analysis
    where: ReportElsewhere

    def to_json(self) -> dict[str, Any]:
        return self.analysis.to_json() | {"distributed": self.where.to_json()}


def _cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@dataclass(frozen=True)
class LaunchCheck:
    """The pre-launch check of one node: what stands in the way (empty: nothing), the largest ``--nproc`` that
    passes, and whether ``--force`` would lift every problem (memory ones only)."""

    problems: list[str]
    largest_nproc: int
    forceable: bool


def launch_problems(
    analysis: Analysis,
    nproc: int,
    cores: int,
    free_host: int,
    gpus: int | None,
    free_gpu: int | None,
    force: bool,
) -> LaunchCheck:
    """Why ``nproc`` ranks of ``analysis`` cannot run on this node (module docstring). ``gpus``/``free_gpu``:
    CUDA's device count and one GPU's free bytes, None on the CPU."""
    from embedcalc.reconcile.bench import predicted_bytes

    model = predicted_bytes(analysis)
    hard: list[str] = []  # cores and GPUs: --force does not lift them
    bounds = [cores * RANKS_PER_CORE]
    if nproc > bounds[0]:
        hard.append(
            f"{nproc} ranks on {cores} core{'s' if cores != 1 else ''} is over the bound of {RANKS_PER_CORE} ranks "
            f"per core ({bounds[0]}): past it the ranks time-share the cores and the step time measures the scheduler"
        )
    if gpus is not None:
        bounds.append(gpus)
        if nproc > gpus:
            hard.append(f"{nproc} ranks need a GPU each and this machine has {gpus}")
    memory: list[str] = []
    per_rank = RANK_PROCESS_BYTES + (model if gpus is None else 0)
    if not force:
        bounds.append(free_host // per_rank)
        if nproc * per_rank > free_host:
            what = f"{binary_bytes(model)} of model and " if gpus is None else ""
            memory.append(
                f"{nproc} ranks are predicted to need {binary_bytes(nproc * per_rank)} ({nproc * per_rank:,} "
                f"bytes) of this machine's RAM, shared by the ranks ({what}{binary_bytes(RANK_PROCESS_BYTES)} per "
                f"torch process, measured), but {binary_bytes(free_host)} is available"
            )
        if free_gpu is not None and model > free_gpu:
            bounds.append(0)
            memory.append(
                f"each rank is predicted to need {binary_bytes(model)} ({model:,} bytes) of its GPU, but "
                f"{binary_bytes(free_gpu)} is free"
            )
    return LaunchCheck(hard + memory, max(0, min(bounds)), not hard)


def _refuse_unless_launchable(analysis: Analysis, nproc: int, dev: Any, force: bool) -> None:
    from embedcalc.modeling.device import available_host_bytes, free_memory_bytes, gpu_count

    cuda = dev.type == "cuda"
    check = launch_problems(
        analysis, nproc, _cores(), available_host_bytes(), gpu_count() if cuda else None,
        free_memory_bytes(dev) if cuda else None, force,
    )  # fmt: skip
    if check.problems:
        fits = check.largest_nproc
        fix = (
            f"use --nproc {fits} or fewer"
            if fits
            else "no rank fits: use a smaller --batch-size or --seq-len"
        )
        raise UnsupportedEnvironmentError(
            f"{analysis.target}: refused before launch: {'; '.join(check.problems)}; {fix}"
            f"{' (or --force past the memory check)' if check.forceable else ''}",
            code="does_not_fit",
        )


def bench_ranks(
    target: str, overrides: Sequence[str] | None, run: Workload, nproc: int, strategy: Strategy, baseline: bool,
    options: RunOptions, nodes: Nodes | None = None,
) -> DistributedReport | ElsewhereReport:  # fmt: skip
    """Predict, check the launch (module docstring), run ``nproc`` ranks on each of ``nodes`` (and, with
    ``baseline``, one more run on one process of node 0 for the scaling efficiency), reconcile on node 0."""
    from embedcalc.modeling.distributed import (
        DistributedRunError,
        DistributedSettings,
        Rendezvous,
        RendezvousFailedError,
        run_ranks,
    )  # fmt: skip
    from embedcalc.reconcile.distributed import distributed_bench, strategy_parallelism

    nodes = nodes or Nodes()
    world = nproc * nodes.nnodes
    dev = options.resolve()
    per_rank = replace(run, parallel=strategy_parallelism(strategy, world))
    analysis = measured_analysis(load_target(target, overrides), per_rank)
    _refuse_unless_launchable(analysis, nproc, dev, options.force)
    device = "cuda" if dev.type == "cuda" else "cpu"
    settings = run_settings(DistributedSettings, per_rank, options, nproc=nproc, strategy=strategy, device=device,
                            nnodes=nodes.nnodes, node_rank=nodes.node_rank)  # fmt: skip
    rendezvous = Rendezvous(nodes.nnodes, nodes.node_rank, nodes.endpoint, nodes.timeout_s)
    where = (f" as node {nodes.node_rank} of {nodes.nnodes} (rendezvous {nodes.endpoint}; every node joins within "
             f"{nodes.timeout_s} s)") if nodes.nnodes > 1 else ""  # fmt: skip
    options.notify(
        f"launching {nproc} rank{'s' if nproc > 1 else ''} ({strategy}, {device}) under torchrun{where}"
    )
    try:
        ranks = run_ranks(analysis.config, settings, rendezvous)
        if not isinstance(ranks, list):
            return ElsewhereReport(analysis, ranks)
        single = replace(settings, nproc=1, nnodes=1, node_rank=0)
        base = run_ranks(analysis.config, single, Rendezvous()) if baseline and world > 1 else None
    except RendezvousFailedError as exc:
        raise UnsupportedEnvironmentError(f"{target}: {exc}", code="rendezvous_failed") from None
    except DistributedRunError as exc:
        raise EmbedcalcError(f"{target}: {exc}", ExitCode.RUNTIME, code="rank_failed") from None
    from embedcalc.devices.local import previous_local

    one = base[0] if isinstance(base, list) else None
    estimate, note = local_estimate(analysis, dev, options, every_position=True)
    prediction = (estimate, previous_local(), note)
    return DistributedReport(analysis, distributed_bench(analysis, strategy, world, ranks, one, prediction))
