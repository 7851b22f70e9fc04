"""``bench --peak --nproc N``'s loopback link (issue 20 item 5): the α–β model solved for the link that gives back
both measured all-reduce times, cached as local's interconnect, read by ``analyze --hardware local --tp N``."""

from __future__ import annotations

import json
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from embedcalc.analysis.comm.volumes import Collective  # noqa: E402
from embedcalc.analysis.time.comm import Path, collective_s  # noqa: E402
from embedcalc.devices.calibration import load_calibration  # noqa: E402
from embedcalc.devices.local import local_device, save_local  # noqa: E402
from embedcalc.devices.resolve import load_device  # noqa: E402
from embedcalc.modeling.loopback import AllReduceMeasurement  # noqa: E402
from embedcalc.reconcile.peak import loopback_link  # noqa: E402

pytestmark = [pytest.mark.torch]
C = load_calibration().constants


def _measured(nproc: int, bandwidth: float, latency: float) -> AllReduceMeasurement:
    """The times the α–β model gives for a link of ``bandwidth`` and ``latency`` (what a measurement would see)."""
    times = [collective_s(Collective("all-reduce", "tp", nproc, "", 1, size), Path("t", bandwidth, latency), C)
             for size in (4, 64 << 20)]  # fmt: skip
    return AllReduceMeasurement(nproc, "gloo", 4, times[0], 64 << 20, times[1], 10)


@pytest.mark.parametrize("nproc", [2, 4])
def test_the_link_gives_back_both_measured_times(nproc: int) -> None:
    link = loopback_link(_measured(nproc, 2e9, 40e-6), C)
    assert link.per_direction_bytes_per_s == pytest.approx(2e9, rel=1e-9)
    assert link.latency_s == pytest.approx(40e-6, rel=1e-9)


def test_no_link_when_the_large_message_is_not_slower() -> None:
    m = AllReduceMeasurement(2, "gloo", 4, 1e-3, 64 << 20, 1e-3, 10)
    link = loopback_link(m, C)
    assert (
        link.per_direction_bytes_per_s is None and link.latency_s is None and "not determined" in link.method
    )


def test_local_keeps_its_link_and_analyze_times_tp_over_it(cli: Any) -> None:
    first = local_device("cpu (1 threads, 2 cores)", "cpu", {"fp32": (4e10, "matmul")}, 1 << 34, (4e9, "copy"),
                         "2.x", link=(5e8, 1e-4, "all-reduce of 2 gloo processes"))  # fmt: skip
    assert first.interconnect is not None and first.interconnect.kind == "loopback"
    save_local(first)
    again = local_device("cpu (1 threads, 2 cores)", "cpu", {"fp32": (4e10, "matmul")}, 1 << 34, (4e9, "copy"),
                         "2.x", load_device("local"))  # fmt: skip
    assert again.interconnect == first.interconnect  # a --peak without --nproc keeps the measured link
    result = cli("analyze", "gpt2", "--hardware", "local", "--tp", "2", "--seq-len", "64", "--format", "json")
    assert result.exit_code == 0, result.stderr
    terms = json.loads(result.stdout)["results"][0]["time"]["terms"]["prefill"]
    assert terms["tensor/expert-parallel communication"] > 0


def test_peak_nproc_one_is_a_usage_error(cli: Any) -> None:
    result = cli("bench", "--peak", "--nproc", "1", "--device", "cpu")
    assert result.exit_code == 2 and "--nproc 2 or more" in result.stderr


@pytest.mark.slow  # two torchrun ranks and a 64 MiB all-reduce: about 40 s on 2 busy cores
def test_bench_peak_nproc_two_caches_the_loopback_link(cli: Any) -> None:
    result = cli("bench", "--peak", "--nproc", "2", "--device", "cpu", "--format", "json")
    assert result.exit_code == 0, result.stderr
    loopback = json.loads(result.stdout)["results"][0]["measurement"]["loopback"]
    assert loopback["nproc"] == 2 and loopback["backend"] == "gloo" and loopback["large_s"] > 0
    link = load_device("local").interconnect
    if loopback["per_direction_bytes_per_s"] is not None:
        assert link is not None and link.kind == "loopback"
        assert link.per_direction_bytes_per_s.value == loopback["per_direction_bytes_per_s"]
