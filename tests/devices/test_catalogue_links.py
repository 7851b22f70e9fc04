"""The catalogue's links carry what the time model's α-β communication needs (issue 20): per-direction bandwidth,
a sourced per-hop latency, the size of the domain a link joins, and the scale-out network between domains."""

from __future__ import annotations

import pytest

from embedcalc.devices.catalogue import catalogue, parse_device


def test_every_device_link_has_a_source_and_nvidia_nodes_have_a_network() -> None:
    for device in catalogue():
        link = device.interconnect
        if link is None:
            continue
        assert link.domain_size is None or link.domain_size >= 2, device.name
        if link.kind in ("nvlink", "xgmi"):
            assert link.latency_s is not None and link.latency_s.value < 1e-5, device.name
            assert "tuning.cc" in device.citation(link.latency_s)
    networks = {d.name: d.network for d in catalogue() if d.network is not None}
    assert {"a100-80gb", "h100-sxm", "b200"} <= set(networks)
    assert all(n.kind == "infiniband" and n.per_direction_bytes_per_s.value < 1e11 for n in networks.values())


def test_a_latency_in_microseconds_written_as_seconds_is_refused() -> None:
    data = {
        "name": "x", "title": "x", "vendor": "x", "kind": "gpu",
        "peak_flops_per_s": {"bf16": {"value": 1e12, "source": "x y"}},
        "memory_bytes": {"value": 2**30, "source": "x y"},
        "memory_bandwidth_bytes_per_s": {"value": 1e11, "source": "x y"},
        "interconnect": {"kind": "nvlink", "per_direction_bytes_per_s": {"value": 1e11, "source": "x y"},
                         "latency_s": {"value": 2.0, "source": "x y"}},
    }  # fmt: skip
    with pytest.raises(Exception, match="latency_s"):
        parse_device(data, "x.yaml")
