"""The decode GEMV (issue 35, item 5): a matmul through a few rows is bound by the bytes it reads, so fewer weight
bytes make a faster step, and a weight-only format's dequantization is a term of its own. Relations between
predictions only: no speed is asserted."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from embedcalc.analysis.time.model import gemm_fraction
from embedcalc.cli.app import app
from embedcalc.devices.calibration import load_calibration

runner = CliRunner()
DEQUANT = "dequantization"


def _time(*args: str) -> dict[str, Any]:
    result = runner.invoke(app, ["analyze", *args, "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["results"][0]["time"]  # type: ignore[no-any-return]


def _decode(
    dtype: str, *extra: str, model: str = "llama-2-7b", hardware: str = "a100-80gb"
) -> dict[str, Any]:
    return _time(
        model, "--hardware", hardware, "--dtype", dtype, "--seq-len", "5", "--gen-tokens", "8", *extra
    )


def test_a_gemv_reaches_the_full_gemm_fraction_and_a_tiled_gemm_saturates() -> None:
    c = load_calibration().constants
    rows = int(c.gemv_max_rows)
    assert gemm_fraction(1, c) == gemm_fraction(rows, c) == c.gemm_fraction
    fractions = [gemm_fraction(r, c) for r in (rows + 1, 64, 512, 4096)]
    assert fractions == sorted(fractions) and fractions[-1] < c.gemm_fraction


def test_weight_only_decode_is_bound_by_its_bytes_int4_faster_than_int8() -> None:
    bf16, int8, int4 = (_decode(d)["decode_s_per_token"] for d in ("bf16", "int8", "int4"))
    assert int4 < int8 < bf16


@pytest.mark.parametrize(
    ("dtype", "hardware", "model", "has_term"),
    [
        ("bf16", "a100-80gb", "llama-2-7b", False),
        ("int8", "a100-80gb", "llama-2-7b", True),
        ("int4", "a100-80gb", "llama-2-7b", True),
        ("nvfp4", "b200", "llama-2-7b", False),  # FP4 tensor cores: no dequantization
        (None, "h100-sxm", "gpt-oss-20b", True),  # its own MXFP4 experts, weight-only on Hopper
    ],
)
def test_dequantization_is_a_term_of_weight_only_formats(
    dtype: str | None, hardware: str, model: str, has_term: bool
) -> None:
    args = ("--dtype", dtype) if dtype else ()
    time = _time(model, "--hardware", hardware, *args, "--seq-len", "5", "--gen-tokens", "8")
    term = time["terms"]["decode"].get(DEQUANT)
    assert (term is not None and term > 0) == has_term
    if has_term:
        assert time["terms"]["prefill"][DEQUANT] > 0
        assert DEQUANT not in time["lower_bound"].get("terms", {})


def test_dequantization_covers_only_the_quantized_matrices() -> None:
    """gpt-oss's own MXFP4 covers the experts: quantizing every layer matrix dequantizes more per step."""
    experts = _time("gpt-oss-20b", "--hardware", "h100-sxm", "--seq-len", "5", "--gen-tokens", "8")
    layers = _time("gpt-oss-20b", "--hardware", "h100-sxm", "--seq-len", "5", "--gen-tokens", "8", "--set",
                   "quantized=layers")  # fmt: skip
    assert layers["terms"]["decode"][DEQUANT] > experts["terms"]["decode"][DEQUANT]


# --- a measured GEMV rate (issue 35 item 7): local's decode GEMVs read their bytes at what bench --peak measured ---

STREAM = 4e10  # the local device's STREAM bandwidth in these tests, bytes/s


def _local(gemv: dict[str, float | list[float]] | None) -> Any:
    from embedcalc.devices.local import local_device

    rates = (
        None
        if gemv is None
        else {d: (v if isinstance(v, list) else [v], "F.linear") for d, v in gemv.items()}
    )
    return local_device("cpu (2 threads, 2 cores)", "cpu", {"fp32": (7e10, "matmul"), "bf16": (1.4e11, "matmul")},
                        1 << 34, (STREAM, "stream"), "2.x", gemv=rates)  # fmt: skip


def _estimate(device: Any, batch: int = 1, dtype: str = "fp32", efficiency: Any = None) -> Any:
    from embedcalc.analysis.time.estimate import TimeRequest, estimate_time
    from embedcalc.analysis.workload import Workload
    from embedcalc.sources.loading import load_target

    w = Workload(batch_size=batch, seq_len=64, gen_tokens=4, dtype=dtype, dtype_source="flag")
    return estimate_time(load_target("gpt2").config, w, TimeRequest(device=device, efficiency=efficiency))


def _memory_s(estimate: Any, phase: str) -> dict[str, tuple[float, int]]:
    return {c.key: (c.memory_s, c.traffic.bytes) for c in estimate.phases[phase].components}


GEMVS = ("decoder/attention/qkv", "decoder/attention/out", "decoder/ffn/in", "decoder/ffn/out", "head/lm")


def test_a_measured_gemv_rate_prices_the_decode_gemvs_bytes() -> None:
    c = load_calibration().constants
    rate = 1e10
    with_rate, without = _estimate(_local({"fp32": rate})), _estimate(_local(None))
    measured, calibrated = _memory_s(with_rate, "decode"), _memory_s(without, "decode")
    for (
        key
    ) in GEMVS:  # each GEMV's bytes at the measured rate, in place of the calibration's fraction of STREAM
        seconds, num_bytes = measured[key]
        assert seconds == pytest.approx(num_bytes / rate, rel=1e-12)
        assert calibrated[key][0] == pytest.approx(num_bytes / (STREAM * c.memory_fraction), rel=1e-12)
    for key in ("decoder/attention/scores", "decoder/attention/context"):  # KV reads stream as before
        assert measured[key] == calibrated[key]
    assert _memory_s(with_rate, "prefill") == _memory_s(without, "prefill")  # a tiled GEMM: not a GEMV
    assert with_rate.decode_s_per_token > without.decode_s_per_token  # 1e10 B/s is below 0.8 x 4e10
    assert with_rate.lower_bound.to_json() == without.lower_bound.to_json()  # the roofline keeps the peak


def test_the_gemv_rate_applies_where_it_was_measured_only() -> None:
    device, plain = _local({"fp32": 1e10}), _local(None)
    rows = int(load_calibration().constants.gemv_max_rows)
    # a batch beyond the GEMV rows runs a tiled GEMM; bf16 was not measured; --efficiency replaces every fraction
    for kwargs in ({"batch": rows + 1}, {"dtype": "bf16"}, {"efficiency": _efficiency()}):
        assert _estimate(device, **kwargs).to_json() == _estimate(plain, **kwargs).to_json()
    assert _estimate(device, batch=rows).to_json() != _estimate(plain, batch=rows).to_json()
    # a GEMV is never faster than memory: a rate above STREAM (a cache-resident sweep) reads at the bandwidth
    fast = _memory_s(_estimate(_local({"fp32": 10 * STREAM})), "decode")
    seconds, num_bytes = fast["head/lm"]
    assert seconds == pytest.approx(num_bytes / STREAM, rel=1e-12)


def _efficiency() -> Any:
    from embedcalc.analysis.roofline.estimate import Efficiency

    return Efficiency(0.5, 0.5, "test")


def test_catalogue_devices_have_no_gemv_rate() -> None:
    from embedcalc.devices.catalogue import hardware_names
    from embedcalc.devices.resolve import load_device

    assert all(not load_device(name).gemv_bytes_per_s for name in hardware_names())


def test_the_gemv_rate_of_a_batch_is_the_rate_measured_through_its_rows() -> None:
    by_rows = [1e10, 1e10, 9e9, 5e9]  # a BLAS packing the weights from 4 rows: fewer bytes per second
    device = _local({"fp32": by_rows})
    for batch in (1, 3, 4):
        seconds, num_bytes = _memory_s(_estimate(device, batch=batch), "decode")["decoder/ffn/in"]
        assert seconds == pytest.approx(num_bytes / by_rows[batch - 1], rel=1e-12)
    figure = device.gemv_bytes_per_s["fp32"]
    assert figure.at(2.5) == pytest.approx(
        1 / (0.5 / 1e10 + 0.5 / 9e9), rel=1e-12
    )  # seconds per byte between
    assert figure.at(0.2) == figure.at(1) == 1e10 and figure.at(7) == 5e9  # clamped to the rows measured
    assert _local({"fp32": 8e9}).gemv_bytes_per_s["fp32"].at(3) == 8e9
