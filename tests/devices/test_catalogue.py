"""The device catalogue (issue 11, part 1): every shipped device complete and sourced, loadable from a checkout
and by path, ``local`` from the cache (exit 4 before any measurement), and the ``hardware`` commands."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from embedcalc.cli.app import app
from embedcalc.devices.catalogue import (
    PEAK_DTYPES,
    Device,
    catalogue,
    datasheet_peak,
    hardware_dir,
    hardware_names,
    match_cuda_name,
)  # fmt: skip
from embedcalc.devices.local import local_device, save_local
from embedcalc.devices.resolve import load_device
from embedcalc.errors import ConfigError, EmbedcalcError, ExitCode, UnsupportedEnvironmentError

REQUIRED = ("a100-40gb", "a100-80gb", "h100-sxm", "h100-pcie", "h200", "b200", "gb200", "l4", "l40s", "a10",
            "rtx-4090", "mi250x", "mi300x", "tpu-v5e", "tpu-v5p", "h800", "tpu-v4", "mi250x-gcd")  # fmt: skip
# a multi-die package no process sees -> the entry torch's device name matches
PACKAGES = {"mi250x": "mi250x-gcd"}
runner = CliRunner()


def test_catalogue_has_every_required_device() -> None:
    assert set(REQUIRED) <= set(hardware_names())


@pytest.mark.parametrize("name", hardware_names())
def test_every_device_is_complete_and_every_number_sourced(name: str) -> None:
    raw = yaml.safe_load((hardware_dir() / f"{name}.yaml").read_text(encoding="utf-8"))
    device = Device.model_validate(raw)
    assert device.name == name
    assert device.peak("bf16") or device.peak("fp16"), "a half-precision peak"
    assert device.memory > 0 and device.bandwidth > 0
    assert device.interconnect is not None or device.host_link is not None
    if device.kind == "gpu":
        assert device.host_link is not None
        assert bool(device.cuda_name_pattern) is (name not in PACKAGES), "a package is never a torch device"
    for label, figure in device.figures():
        citation = device.citation(figure)
        assert figure.value > 0, label
        assert "http" in citation, f"{name} {label}: the source names a document with its URL"
    assert set(device.peak_flops_per_s) <= set(PEAK_DTYPES)


def test_spot_values_from_the_datasheets() -> None:
    h100 = load_device("h100-sxm")
    assert h100.peak("bf16") == 989.4e12  # dense: half of the datasheet's 1,979 with sparsity
    assert h100.bandwidth == 3.35e12 and h100.memory == 80 * 2**30
    assert h100.interconnect is not None and h100.interconnect.per_direction_bytes_per_s.value == 450e9
    h200 = load_device("h200")
    assert h200.memory == 141 * 2**30 and h200.bandwidth == 4.8e12
    assert load_device("a100-40gb").peak("fp8") is None  # Ampere has no FP8: absent, never zero


@pytest.mark.parametrize(
    ("cuda_name", "expected"),
    [("NVIDIA H100 80GB HBM3", "h100-sxm"), ("NVIDIA H100 PCIe", "h100-pcie"), ("NVIDIA H200", "h200"),
     ("NVIDIA A100-SXM4-40GB", "a100-40gb"), ("NVIDIA A100 80GB PCIe", "a100-80gb"), ("NVIDIA A10G", "a10"),
     ("NVIDIA L4", "l4"), ("NVIDIA L40S", "l40s"), ("NVIDIA B200", "b200"), ("NVIDIA GB200", "gb200"),
     ("NVIDIA GeForce RTX 4090", "rtx-4090"), ("AMD Instinct MI300X", "mi300x"), ("Tesla T4", "t4"),
     ("NVIDIA H800", "h800"), ("AMD Instinct MI250X", "mi250x-gcd"),
     ("NVIDIA H100 NVL", None), ("NVIDIA GeForce RTX 3090", None)],
)  # fmt: skip
def test_cuda_names_match_exactly_one_device(cuda_name: str, expected: str | None) -> None:
    import re

    matches = [
        d.name for d in catalogue() if d.cuda_name_pattern and re.search(d.cuda_name_pattern, cuda_name)
    ]
    assert matches == ([expected] if expected else [])
    found = match_cuda_name(cuda_name)
    assert (found.name if found else None) == expected


def test_new_devices_fp8_fp4_and_one_gcd() -> None:
    package, gcd = load_device("mi250x"), load_device("mi250x-gcd")
    assert gcd.memory * 2 == package.memory and gcd.bandwidth * 2 == package.bandwidth
    assert all(gcd.peak(d) * 2 == package.peak(d) for d in package.peak_flops_per_s)  # type: ignore[operator]
    assert "PACKAGE" in (hardware_dir() / "mi250x.yaml").read_text(encoding="utf-8")
    h800, h100 = load_device("h800"), load_device("h100-sxm")
    assert {d: h800.peak(d) for d in PEAK_DTYPES} == {d: h100.peak(d) for d in PEAK_DTYPES}
    assert h800.interconnect is not None and h800.interconnect.per_direction_bytes_per_s.value == 200e9
    tpu = load_device("tpu-v4")
    assert tpu.peak("bf16") == 275e12 and tpu.peak("fp8") is None
    assert load_device("b200").peak("fp4") == 2 * load_device("b200").peak("fp8")  # type: ignore[operator]
    assert load_device("h100-sxm").peak("fp4") is None  # Hopper has no FP4


def test_prices_are_dated_sourced_defaults_or_absent() -> None:
    priced = {d.name: d.price_per_hour for d in catalogue() if d.price_per_hour is not None}
    assert {"h100-sxm", "a100-80gb", "h200", "b200", "l40s"} <= set(priced)
    assert not {"h800", "mi250x", "mi250x-gcd"} & set(priced)  # no public hourly list: absent, never guessed
    for name, price in priced.items():
        assert 0 < price.value < 100 and price.date.count("-") == 2, name
        assert "override" in (price.note or ""), f"{name}: the price says it is a default to override"
    h100 = load_device("h100-sxm")
    assert h100.price_per_hour is not None and h100.price_per_hour.value == 3.99
    assert "lambda.ai/pricing" in h100.citation(h100.price_per_hour)


def test_a_repeated_hardware_is_a_usage_error() -> None:
    result = runner.invoke(app, ["analyze", "gpt2", "--hardware", "h100-sxm", "--hardware", "a100-80gb"])
    assert result.exit_code == 2 and "--hardware" in result.stderr and "2 times" in result.stderr
    one = runner.invoke(app, ["analyze", "gpt2", "--hardware", "h100-sxm", "--format", "json"])
    assert one.exit_code == 0 and json.loads(one.stdout)["results"][0]["time"]["hardware"] == "h100-sxm"


def test_datasheet_peak_never_borrows_another_dtype_or_device() -> None:
    assert datasheet_peak("Tesla V100-SXM2-16GB", "bfloat16") == (None, None)
    value, source = datasheet_peak("NVIDIA H100 80GB HBM3", "bfloat16")
    assert value == 989.4e12 and source is not None and "h100-sxm" in source
    assert datasheet_peak("Some Unknown GPU", "float32") == (None, None)


def test_user_device_file_by_path_and_its_errors(tmp_path: Path) -> None:
    raw = yaml.safe_load((hardware_dir() / "l4.yaml").read_text(encoding="utf-8"))
    raw["name"] = "my-l4"
    path = tmp_path / "my-l4.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    assert load_device(str(path)).name == "my-l4"
    raw["peak_flops_per_s"]["bf16"]["source"] = "nowhere"
    raw["memory_bytes"]["value"] = 1.5
    raw["extra_key"] = 1
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_device(str(path))
    text = err.value.message
    assert "extra_key" in text and "whole number" in text
    with pytest.raises(EmbedcalcError) as unknown:
        load_device("h100")
    assert unknown.value.exit_code is ExitCode.USAGE and "h100-sxm" in unknown.value.message


def test_local_before_and_after_a_measurement(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    with pytest.raises(UnsupportedEnvironmentError) as err:
        load_device("local")
    assert "embedcalc bench --peak" in err.value.message
    first = local_device("NVIDIA H100 80GB HBM3", "gpu", {"fp32": (50e12, "matmul")}, 80 * 2**30,
                         (3.0e12, "stream"), "2.5.0")  # fmt: skip
    save_local(first)
    second = local_device("NVIDIA H100 80GB HBM3", "gpu", {"bf16": (700e12, "matmul")}, 80 * 2**30,
                          (3.0e12, "stream"), "2.5.0", previous=load_device("local"))  # fmt: skip
    save_local(second)
    local = load_device("local")
    assert local.peak("fp32") == 50e12 and local.peak("bf16") == 700e12  # dtypes measured apart are merged
    assert local.measured is not None and local.measured.matches == "h100-sxm"
    assert local.measured.efficiency["bf16"] == pytest.approx(700 / 989.4)
    assert local.measured.efficiency["memory"] == pytest.approx(3.0 / 3.35)
    assert local.measured.torch_version == "2.5.0" and local.measured.measured_at.endswith("Z")


def test_hardware_commands() -> None:
    listed = runner.invoke(app, ["hardware", "--format", "json"])
    assert listed.exit_code == 0, listed.output
    names = [d["name"] for d in json.loads(listed.stdout)["results"]]
    assert set(REQUIRED) <= set(names)
    table = runner.invoke(app, ["hardware"], env={"COLUMNS": "200"})
    assert table.exit_code == 0 and "h100-sxm" in table.stdout and "989.4" in table.stdout
    shown = runner.invoke(app, ["hardware", "show", "h100-sxm"], env={"COLUMNS": "250"})
    assert shown.exit_code == 0 and "whitepaper" in shown.stdout and "3.35" in shown.stdout
    assert "$3.99 / h" in shown.stdout and "default" in shown.stdout
    shown_json = runner.invoke(app, ["hardware", "show", "h200", "--format", "json"])
    one = json.loads(shown_json.stdout)["results"][0]
    assert one["memory_bytes"]["value"] == 141 * 2**30
    assert all("http" in c for c in one["citations"].values())
    missing = runner.invoke(app, ["hardware", "show", "nope"])
    assert missing.exit_code == 2 and "no such device" in missing.stderr


def test_local_gemv_rates_are_kept_per_dtype(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    name = "cpu (2 threads, 2 cores)"
    save_local(local_device(name, "cpu", {"fp32": (7e10, "matmul")}, 1 << 34, (2e10, "stream"), "2.x",
                            gemv={"fp32": ([9e9, 8e9], "F.linear fp32")}))  # fmt: skip
    save_local(local_device(name, "cpu", {"bf16": (1e11, "matmul")}, 1 << 34, (2e10, "stream"), "2.x",
                            previous=load_device("local"), gemv={"bf16": ([6e9], "F.linear bf16")}))  # fmt: skip
    local = load_device("local")
    assert (local.gemv_rate("fp32"), local.gemv_rate("bf16"), local.gemv_rate("fp16")) == (9e9, 6e9, None)
    assert local.gemv_bytes_per_s["bf16"].note == "F.linear bf16" and local.gemv_rate("fp32", 2) == 8e9
    assert ("gemv_bytes_per_s.fp32", local.gemv_bytes_per_s["fp32"]) in local.figures()
    other = local_device("cpu (1 threads, 2 cores)", "cpu", {"fp32": (4e10, "matmul")}, 1 << 34, (2e10, "stream"),
                         "2.x", previous=local)  # fmt: skip
    assert not other.gemv_bytes_per_s  # another device's rates are not carried over
