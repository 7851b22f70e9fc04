"""Starting ranks under torchrun's own launcher, and tying each rank's life to the process that launched it.

The launcher is torch's elastic agent in-process (``torch.distributed.launcher.elastic_launch``, what the
``torchrun`` binary calls), never a home-made one. One node (the default) meets on a private c10d rendezvous on
localhost (port 0: the operating system picks a free one). Several nodes meet on one c10d rendezvous, the store
hosted by ``--node-rank 0`` at ``--rdzv-endpoint HOST:PORT``, as ``torchrun --nnodes M --node-rank R
--rdzv-backend c10d --rdzv-endpoint HOST:PORT --rdzv-conf join_timeout=T,read_timeout=T`` sets it up:

- ``join_timeout``: how long a node waits for all ``--nnodes`` to join (c10d's own default is 600 s; embedcalc's
  ``--rdzv-timeout`` defaults to 300 s); a node that never joins ends the others' wait with
  :class:`RendezvousFailedError`, before any rank was started;
- ``read_timeout``: how long a node waits for a reply of the store. A node other than 0 first waits, up to the
  same timeout, until node 0's port accepts a connection (:func:`wait_for_store`: a node may start before node 0,
  and an address that never answers is one clear message, not the store client's retry log);
- ``is_host``: node 0 hosts the store; every other node is its client (two launches on one machine are two
  "nodes" of one rendezvous).

Parent-death signal: a rank is a child of the launching process (multiprocessing's ``spawn``, started from the
launcher's calling thread, :func:`torch.multiprocessing.start_processes`). torchrun's agent stops the ranks when it
gets SIGTERM/SIGINT/SIGHUP/SIGQUIT, or when a rank fails, but a SIGKILL of the launcher reaches no handler, and its
ranks would run on to the end of their work. So every rank asks Linux at start-up to SIGKILL it when its parent
dies (``prctl(PR_SET_PDEATHSIG, SIGKILL)``, prctl(2)), then checks that the parent is still the launcher (it may
have died before the call); elsewhere the call is skipped.
"""

from __future__ import annotations

import ctypes
import logging
import os
import re
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


class DistributedRunError(RuntimeError):
    """A rank failed; the message names it and its exit code or signal."""


class RendezvousFailedError(RuntimeError):
    """The nodes did not meet: a node never joined within the timeout, or the store could not be reached or
    hosted. No rank was started."""


@dataclass(frozen=True)
class Rendezvous:
    """Where and how the nodes of one run meet (module docstring); the default is one node on its own."""

    nnodes: int = 1
    node_rank: int = 0
    endpoint: str | None = (
        None  # HOST:PORT of the c10d store, hosted by node 0; None: a private one on localhost
    )
    timeout_s: int = 300

    @property
    def multi_node(self) -> bool:
        return self.nnodes > 1


def die_with_launcher(launcher_pid: int) -> None:
    """Have Linux SIGKILL this process when its parent dies, and exit now if the parent is no longer
    ``launcher_pid`` (it died before the call: the rank was re-parented)."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != launcher_pid:
        os._exit(1)


def wait_for_store(endpoint: str, timeout_s: float, node_rank: int) -> None:
    """Return once ``endpoint`` (``HOST:PORT``) accepts a TCP connection, retrying every half second; raise
    :class:`RendezvousFailedError` after ``timeout_s`` seconds."""
    host, _, port = endpoint.rpartition(":")
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=min(5.0, timeout_s)):
                return
        except OSError as exc:
            if time.monotonic() + 0.5 >= deadline:
                raise RendezvousFailedError(
                    f"node {node_rank} could not reach node 0's rendezvous at {endpoint} within --rdzv-timeout "
                    f"{timeout_s:g} s ({exc.strerror or type(exc).__name__}); start the same command with "
                    "--node-rank 0 on the machine at that address, and check that its port is open to this one"
                ) from None
            time.sleep(0.5)


def _rank_main(entrypoint: Callable[..., Any], launcher_pid: int, started: str, *args: Any) -> Any:
    """What every rank runs: the tie to the launcher first, a mark in the folder ``started`` (so the launcher
    knows that ranks ran), then ``entrypoint(*args)``."""
    die_with_launcher(launcher_pid)
    with open(os.path.join(started, str(os.getpid())), "w"):
        pass
    return entrypoint(*args)


C10D_LOG = re.compile(r"^\[[IWEF]\d{4} [0-9:.]+ [^\]]*\] \[c10d\]")  # a c10 log line of the store client
TRACE = re.compile(r"^(Exception raised from |frame #\d+: |<omitting python frames>|\s*$)")


@contextmanager
def _without_store_client_log(multi_node: bool) -> Iterator[None]:
    """Several nodes: the store client in this process logs each failed connection attempt or lost store with a
    C++ stack trace on file descriptor 2 (c10's logging, which nothing turns off once torch is loaded). Its
    outcome is reported in one message by :func:`launch`, so those lines (and their traces) are held back; every
    other line, the ranks' own included, is written out when the launch ends."""
    if not multi_node:
        yield
        return
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            dropping = False
            for line in held.read().decode("utf-8", "replace").splitlines(keepends=True):
                dropping = bool(C10D_LOG.match(line)) or (dropping and bool(TRACE.match(line)))
                if not dropping:
                    sys.stderr.write(line)
            sys.stderr.flush()


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


def _launch_config(nproc: int, rendezvous: Rendezvous, run_id: str) -> Any:
    from torch.distributed.launcher.api import LaunchConfig

    conf: dict[str, Any] = {"join_timeout": rendezvous.timeout_s, "read_timeout": rendezvous.timeout_s}
    if rendezvous.endpoint is not None:
        conf["is_host"] = rendezvous.node_rank == 0
    return LaunchConfig(
        min_nodes=rendezvous.nnodes, max_nodes=rendezvous.nnodes, nproc_per_node=nproc, run_id=run_id,
        rdzv_backend="c10d", rdzv_endpoint=rendezvous.endpoint or "localhost:0", rdzv_configs=conf,
        max_restarts=0, monitor_interval=0.1,
    )  # fmt: skip


def _rendezvous_failure(exc: BaseException, rendezvous: Rendezvous, run_id: str) -> RendezvousFailedError:
    from torch.distributed.elastic.rendezvous.api import RendezvousTimeoutError

    where = rendezvous.endpoint or "localhost"
    same = f"nodes meet only when they run the same model and flags: this one waited as rendezvous {run_id}"
    if isinstance(exc, RendezvousTimeoutError):
        return RendezvousFailedError(
            f"the rendezvous at {where} did not complete within --rdzv-timeout {rendezvous.timeout_s} s: "
            f"{rendezvous.nnodes} nodes were expected (--nnodes) and not all joined; start the same command on every "
            f"node, each with its own --node-rank from 0 to {rendezvous.nnodes - 1}, or raise --rdzv-timeout ({same})"
        )
    if rendezvous.node_rank != 0:  # node 0's port had answered (wait_for_store): node 0 went away since
        return RendezvousFailedError(
            f"node {rendezvous.node_rank} reached node 0's rendezvous at {where}, but node 0 went away before every "
            f"node joined (its own --rdzv-timeout ran out, or it was stopped); check that node 0 runs this same "
            f"command ({same})"
        )
    cause = exc.__cause__ or exc
    detail = str(cause).strip().splitlines()[0] if str(cause).strip() else "no detail"
    return RendezvousFailedError(
        f"node 0 could not host the rendezvous store at {where} ({type(cause).__name__}: {detail}); the port must be "
        "free on this machine and its address this machine's own, and only one node runs with --node-rank 0"
    )


def launch(
    entrypoint: Callable[..., Any], args: tuple[Any, ...], nproc: int, rendezvous: Rendezvous, run_id: str
) -> dict[int, Any]:
    """Run ``entrypoint(*args)`` on ``nproc`` ranks of this node under torchrun's launcher; every local rank's
    return value by its global rank. Raises :class:`RendezvousFailedError` when the nodes do not meet,
    :class:`DistributedRunError` when a rank fails (the agent has stopped the others), KeyboardInterrupt on
    SIGINT."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous.api import RendezvousError
    from torch.distributed.launcher.api import elastic_launch

    world = nproc * rendezvous.nnodes
    if rendezvous.endpoint is not None and rendezvous.node_rank != 0:
        wait_for_store(rendezvous.endpoint, rendezvous.timeout_s, rendezvous.node_rank)
    with tempfile.TemporaryDirectory(prefix="embedcalc-ranks-") as started:
        try:
            with _without_store_client_log(rendezvous.multi_node), _quiet_launcher():
                return dict(
                    elastic_launch(_launch_config(nproc, rendezvous, run_id), _rank_main)(
                        entrypoint, os.getpid(), started, *args
                    )
                )
        except SignalException as exc:  # the agent stopped every rank before re-raising the signal it got
            if exc.sigval == signal.SIGINT:
                raise KeyboardInterrupt from None
            raise DistributedRunError(f"stopped by {exc.sigval.name}; torchrun stopped every rank") from None
        except RendezvousError as exc:
            if os.listdir(started):  # ranks ran: the store went away mid-run, with node 0
                raise DistributedRunError(
                    f"node 0's rendezvous store at {rendezvous.endpoint} went away during the run (node 0 ended: a "
                    "rank failed there or it was stopped; its output says which); torchrun stopped this node's ranks"
                ) from None
            raise _rendezvous_failure(exc, rendezvous, run_id) from None
        except ChildFailedError as exc:
            raise _rank_failure(exc, world) from None


def _rank_failure(exc: Any, world: int) -> DistributedRunError:
    """Which rank failed first, and how (exit code or signal, and its one line)."""
    rank, failure = exc.get_first_failure()
    signal_name = failure.signal_name()
    how = f"signal {signal_name}" if signal_name != "<N/A>" else f"exit {failure.exitcode}"
    detail = failure.message.strip() if isinstance(failure.message, str) and signal_name == "<N/A>" else ""
    if "To enable traceback" in detail or detail == "<NONE>":
        detail = "its own line above says why"
    return DistributedRunError(
        f"rank {rank} of {world} failed ({how}){': ' + detail if detail else ''}; torchrun stopped the other ranks"
    )
