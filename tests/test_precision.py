"""Precision as users say it (issue 20, item 3): one dtype vocabulary with its aliases in flags, config files, JSON
and the Python API."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from typer.testing import CliRunner

import embedcalc
from embedcalc.cli.app import app
from embedcalc.config.dtypes import ALIASES, DTYPES, DtypeError, canonical_dtype

runner = CliRunner()


def _json(*args: str) -> dict[str, Any]:
    result = runner.invoke(app, [*args, "--format", "json"])
    assert result.exit_code == 0, result.output
    return dict(json.loads(result.stdout))


def test_long_names_are_aliases_of_the_short_ones() -> None:
    assert [canonical_dtype(d) for d in DTYPES] == list(DTYPES)
    assert {long: canonical_dtype(long) for long in ALIASES} == {"float32": "fp32", "bfloat16": "bf16",
                                                                 "float16": "fp16"}  # fmt: skip
    with pytest.raises(DtypeError, match=re.escape("fp32|bf16")):
        canonical_dtype("float64")


def test_bf16_and_bfloat16_give_the_same_json() -> None:
    short = _json("analyze", "llama-2-7b", "--dtype", "bf16")
    long = _json("analyze", "llama-2-7b", "--dtype", "bfloat16")
    assert short == long
    assert short["workload"]["dtype"] == "bf16" and short["workload"]["dtype_source"] == "flag"


def test_kv_dtype_takes_the_same_names() -> None:
    a = _json("analyze", "llama-2-7b", "--dtype", "bf16", "--kv-dtype", "float16", "--gen-tokens", "8")
    b = _json("analyze", "llama-2-7b", "--dtype", "bf16", "--kv-dtype", "fp16", "--gen-tokens", "8")
    assert a == b
    bad = runner.invoke(app, ["analyze", "llama-2-7b", "--kv-dtype", "int4"])
    assert bad.exit_code == 2 and "--kv-dtype" in bad.stderr


def test_python_api_takes_aliases_and_writes_short_names() -> None:
    a = embedcalc.analyze("llama-2-7b", dtype="bfloat16")
    b = embedcalc.analyze("llama-2-7b", dtype="bf16")
    assert a.to_json() == b.to_json() and a.workload.dtype == "bf16"
    with pytest.raises(embedcalc.EmbedcalcError) as err:
        embedcalc.analyze("gpt2", dtype="float64")
    assert err.value.exit_code == 2 and "fp32" in err.value.message


def test_bench_refuses_what_the_torch_model_cannot_run() -> None:
    result = runner.invoke(app, ["bench", "gpt2", "--dtype", "fp8"])
    assert result.exit_code == 2
    assert "--dtype fp8 --hardware" in " ".join(result.stderr.split())  # the fix: predict it with analyze


# --- fp8 and the weight-only formats: what each tensor is stored in ------------------------------------------------

# llama-2-7b: 32 layers of q, k, v, o (4096 x 4096) and gate, up (11008 x 4096), down (4096 x 11008); untied
# embedding and LM head (32000 x 4096); 65 RMSNorm weights of 4096 (two a layer and the final one)
LINEAR = 32 * (4 * 4096 * 4096 + 3 * 4096 * 11008)  # 6,476,005,376 parameters in the layers' matrices
OTHER = 2 * 32000 * 4096 + 65 * 4096  # 262,410,240: embedding, head, norms
GROUPS_128 = 32 * (4 * 4096 * (4096 // 128) + 2 * 11008 * (4096 // 128) + 4096 * -(-11008 // 128))


def test_llama_weights_in_every_format_exactly() -> None:
    assert LINEAR + OTHER == 6_738_415_616 == embedcalc.analyze("llama-2-7b").params.total
    weights = {d: embedcalc.analyze("llama-2-7b", dtype=d).memory.weights_bytes for d in DTYPES}
    assert weights["fp32"] == 4 * (LINEAR + OTHER) and weights["bf16"] == weights["fp16"] == 2 * (LINEAR + OTHER)
    assert weights["fp8"] == LINEAR + 2 * OTHER == 7_000_825_856  # embedding, head and norms stay bf16
    assert GROUPS_128 == 50_593_792  # down_proj: 11008 inputs make 86 groups a row, the last one of 0 values short
    assert weights["int8"] == LINEAR + 4 * GROUPS_128 + 2 * OTHER == 7_203_201_024
    assert weights["int4"] == LINEAR // 2 + 4 * GROUPS_128 + 2 * OTHER == 3_965_198_336


def test_int4_scales_and_zeros_at_group_size_32_add_a_quarter() -> None:
    at = {g: embedcalc.analyze("llama-2-7b", dtype="int4", quant_group_size=g).memory.weights_bytes
          for g in (32, 128)}  # fmt: skip
    packed, high = LINEAR // 2, 2 * OTHER
    assert at[32] - high == packed + packed // 4 == 4_047_503_360  # +25 %: 4 bytes a group of 16 bytes
    assert at[32] - at[128] == 4 * (LINEAR // 32 - GROUPS_128)
    flag = _json("analyze", "llama-2-7b", "--dtype", "int4", "--quant-group-size", "32")
    assert flag["results"][0]["memory"]["weights_bytes"] == at[32]
    bad = runner.invoke(app, ["analyze", "llama-2-7b", "--dtype", "int4", "--quant-group-size", "0"])
    assert bad.exit_code == 2 and "--quant-group-size" in bad.stderr


def test_a_group_that_does_not_divide_a_row_is_rounded_up_per_row() -> None:
    from embedcalc.analysis.memory_inference import stored_bytes
    from embedcalc.analysis.workload import Workload

    w = Workload(dtype="int4", quant_group_size=128)
    assert stored_bytes("decoder/ffn/out", (4096, 11008), 1, w) == 4096 * 11008 // 2 + 4096 * 86 * 4
    assert stored_bytes("decoder/ffn/out", (3, 5), 2, w) == 2 * (8 + 3 * 1 * 4)  # 15 values: 7.5 -> 8 bytes
    assert stored_bytes("embedding/token", (32000, 4096), 1, w) == 2 * 32000 * 4096  # fp16: not quantized
    assert stored_bytes("decoder/moe/router", (8, 4096), 1, w) == 2 * 8 * 4096


def test_decode_reads_the_stored_weights_with_their_scales() -> None:
    def decode_weight_bytes(*flags: str) -> int:
        time = _json("analyze", "llama-2-7b", "--hardware", "h100-sxm", "--gen-tokens", "4", *flags)["results"][0]
        return sum(c["weight_bytes"] for c in time["time"]["breakdown"]["decode"].values())

    int4 = embedcalc.analyze("llama-2-7b", dtype="int4").memory.weights_bytes
    embedding_rows_not_read = 2 * (32000 - 1) * 4096  # decode looks up one token's row of the table
    assert decode_weight_bytes("--dtype", "int4") == int4 - embedding_rows_not_read
    fp8 = embedcalc.analyze("llama-2-7b", dtype="fp8").memory.weights_bytes
    assert decode_weight_bytes("--dtype", "fp8") == fp8 - embedding_rows_not_read


def test_fp8_gemms_run_at_the_fp8_peak_and_the_rest_at_bf16() -> None:
    def prefill(dtype: str) -> dict[str, Any]:
        r = _json("analyze", "llama-2-7b", "--hardware", "h100-sxm", "--dtype", dtype, "--seq-len", "4096")
        return dict(r["results"][0]["time"]["breakdown"]["prefill"])

    bf16, fp8 = prefill("bf16"), prefill("fp8")
    for key in ("decoder/attention/qkv", "decoder/attention/out", "decoder/ffn/in", "decoder/ffn/out", "head/lm"):
        assert bf16[key]["bound"] == fp8[key]["bound"] == "compute", key
    for key in ("decoder/attention/qkv", "decoder/attention/out", "decoder/ffn/in", "decoder/ffn/out"):
        assert fp8[key]["time_s"] == pytest.approx(bf16[key]["time_s"] * 989.4 / 1978.9)  # H100 SXM dense peaks
    assert fp8["head/lm"]["time_s"] == bf16["head/lm"]["time_s"]  # the LM head stays in bf16
    for key in ("decoder/attention/scores", "decoder/attention/context"):  # attention's cores: bf16 activations
        assert fp8[key] == bf16[key]


def test_fp8_on_a_device_without_fp8_is_exit_3_naming_it() -> None:
    result = runner.invoke(app, ["analyze", "llama-2-7b", "--dtype", "fp8", "--hardware", "v100-sxm2"])
    assert result.exit_code == 3
    assert "v100-sxm2" in result.stderr and "no FP8" in result.stderr
    assert runner.invoke(app, ["analyze", "llama-2-7b", "--dtype", "fp8", "--hardware", "h800"]).exit_code == 0
