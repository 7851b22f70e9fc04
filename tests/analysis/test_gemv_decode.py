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
