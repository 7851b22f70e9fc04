"""Communication time on the critical path by an α–β model over the device's links (issue 20).

The bytes are :mod:`embedcalc.analysis.comm.volumes`'s (ring volumes per collective); this module times them:

- **α–β** (Hockney 1994; Thakur, Rabenseifner & Gropp 2005, "Optimization of collective communication operations
  in MPICH", §2): a call of a ring collective over n devices costs ``collective_base_s`` + steps × the link's
  per-hop latency + wire bytes / (link bandwidth × ``link_fraction``), with 2(n − 1) steps for an all-reduce,
  n − 1 for a reduce-scatter, all-gather or all-to-all, and 1 for a point-to-point send: NCCL's own tuning model
  (``src/graph/tuning.cc``: base latency + steps × hwLat + bytes / bus bandwidth).
- **Which link** (Megatron-LM's rank order, tensor-parallel ranks innermost, then data-, then pipeline-parallel;
  expert-parallel ranks inside the data-parallel group): a group whose ranks span at most the interconnect's
  ``domain_size`` devices (tp for TP; tp × cp for CP; tp × cp × dp for DP; tp × cp × ep for EP; tp × cp × dp × pp
  for PP) stays on the
  interconnect (NVLink, xGMI, ICI), a larger one is limited by the device's ``network`` (InfiniBand/RoCE per GPU)
  and its latency; a device without an interconnect talks over its host link (PCIe).
- **What is exposed** is decided by the schedule (:mod:`embedcalc.analysis.time.schedule`): TP all-reduces and EP
  all-to-alls block the next kernel (Megatron-LM, Shoeybi et al. 2019 §3: no overlap); PP sends sit between a
  stage's micro-batches; DP and ZeRO collectives overlap with the backward when the schedule allows.
"""

from __future__ import annotations

from dataclasses import dataclass

from embedcalc.analysis.comm.volumes import Collective
from embedcalc.analysis.workload import Parallelism
from embedcalc.devices.calibration import TimeConstants
from embedcalc.devices.catalogue import Device, Link


@dataclass(frozen=True)
class Path:
    """The link a group's traffic is limited by: per-direction bandwidth and per-hop latency."""

    name: str
    bandwidth_bytes_per_s: float
    hop_latency_s: float


def ring_steps(c: Collective) -> int:
    """Sequential steps of one call of a ring collective over ``c.group_size`` devices (module docstring)."""
    n = c.group_size
    if c.kind == "all-reduce":
        return 2 * (n - 1)
    if c.kind == "send":
        return 1
    return n - 1


def group_span(c: Collective, par: Parallelism) -> int:
    """Consecutive device ranks one group of ``c.group`` spans (Megatron's order: tp innermost, then cp, then dp
    (the ep ranks inside it), then pp)."""
    if c.group == "tp":
        return par.tp
    if c.group == "cp":
        return par.tp * par.cp
    if c.group == "ep":
        return par.tp * par.cp * par.ep
    if c.group == "dp":
        return par.tp * par.cp * par.dp
    return par.tp * par.cp * par.dp * par.pp


def _path_of(link: Link, c: TimeConstants, name: str) -> Path:
    latency = link.latency_s.value if link.latency_s is not None else c.hop_latency_s
    return Path(name, link.per_direction_bytes_per_s.value, latency)


def link_path(device: Device, span: int, c: TimeConstants) -> Path | None:
    """The link a group spanning ``span`` devices is limited by (module docstring); None: the device has no link."""
    inter = device.interconnect
    if inter is not None and (
        inter.domain_size is None or span <= inter.domain_size or device.network is None
    ):
        return _path_of(inter, c, f"{inter.kind}")
    if device.network is not None:
        return _path_of(device.network, c, f"{device.network.kind}")
    if device.host_link is not None:
        return _path_of(device.host_link, c, f"{device.host_link.kind}")
    return None


def collective_s(coll: Collective, path: Path, c: TimeConstants) -> float:
    """Seconds of all ``coll.count`` calls of one collective on ``path`` by the α–β model (module docstring)."""
    if coll.group_size <= 1 or coll.count == 0:
        return 0.0
    alpha = coll.count * (c.collective_base_s + ring_steps(coll) * path.hop_latency_s)
    return alpha + coll.wire_bytes / (path.bandwidth_bytes_per_s * c.link_fraction)


def collectives_s(collectives: list[Collective], device: Device, par: Parallelism, c: TimeConstants) -> float:
    """Seconds of ``collectives`` one after another, each over the link its group spans."""
    total = 0.0
    for coll in collectives:
        path = link_path(device, group_span(coll, par), c)
        if path is not None:
            total += collective_s(coll, path, c)
    return total
