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
- **A ring across domains uses every NIC its members in a domain have**: NCCL builds one ring per channel, each
  entering and leaving a node through a different NIC, and its tuning model puts a ring's bus bandwidth at
  nChannels × the per-channel inter-node bandwidth (``src/graph/tuning.cc``: ``busBw = graphs[a]->nChannels *
  bw``). A group with k members in each domain (k = domain_size / the ranks between two members, at most the
  group's size) therefore reaches k × the per-device ``network`` bandwidth, capped by the interconnect the ring
  also crosses inside the domain: FSDP over 64 H100s without TP (k = 8) all-gathers at 8 × 50 GB/s, capped by
  NVLink; its data-parallel group beside TP 8 (k = 1) at one NIC's 50 GB/s. A point-to-point send and an
  all-to-all stay on one NIC per device (a send has one path; an all-to-all's inter-domain bytes leave through
  each device's own NIC).
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


def group_stride(c: Collective, par: Parallelism) -> int:
    """Device ranks from one member of a group of ``c.group`` to the next (Megatron's order: tp innermost, then
    cp, then dp (the ep ranks inside it), then pp)."""
    if c.group == "tp":
        return 1
    if c.group == "cp":
        return par.tp
    if c.group in ("ep", "dp"):
        return par.tp * par.cp
    return par.tp * par.cp * par.dp


def group_span(c: Collective, par: Parallelism) -> int:
    """Consecutive device ranks one group of ``c.group`` spans."""
    size = {"tp": par.tp, "cp": par.cp, "ep": par.ep, "dp": par.dp}.get(c.group, par.pp)
    return group_stride(c, par) * size


def _path_of(link: Link, c: TimeConstants, name: str) -> Path:
    latency = link.latency_s.value if link.latency_s is not None else c.hop_latency_s
    return Path(name, link.per_direction_bytes_per_s.value, latency)


def link_path(device: Device, span: int, c: TimeConstants, rails: int = 1) -> Path | None:
    """The link a group spanning ``span`` devices is limited by (module docstring); None: the device has no link.
    ``rails``: the NICs a ring across domains runs on in each domain (its members there), each at the device's
    ``network`` bandwidth, together at most the interconnect's."""
    inter = device.interconnect
    if inter is not None and (
        inter.domain_size is None or span <= inter.domain_size or device.network is None
    ):
        return _path_of(inter, c, f"{inter.kind}")
    if device.network is not None:
        path = _path_of(device.network, c, f"{device.network.kind}")
        if rails <= 1:
            return path
        cap = inter.per_direction_bytes_per_s.value if inter is not None else float("inf")
        return Path(
            f"{path.name} x {rails}", min(rails * path.bandwidth_bytes_per_s, cap), path.hop_latency_s
        )
    if device.host_link is not None:
        return _path_of(device.host_link, c, f"{device.host_link.kind}")
    return None


def ring_rails(coll: Collective, par: Parallelism, device: Device) -> int:
    """The NICs per domain a ring collective of ``coll``'s group runs on: its members in one interconnect domain
    (module docstring); 1 for sends and all-to-alls, and where the device has no domain size."""
    inter = device.interconnect
    if (
        coll.kind not in ("all-reduce", "reduce-scatter", "all-gather")
        or inter is None
        or not inter.domain_size
    ):
        return 1
    return max(1, min(coll.group_size, inter.domain_size // group_stride(coll, par)))


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
        path = link_path(device, group_span(coll, par), c, ring_rails(coll, par, device))
        if path is not None:
            total += collective_s(coll, path, c)
    return total
