"""FP4 weights (issue 35, item 4): mxfp4 / nvfp4 block scales counted exactly, which matrices a checkpoint's
``quantization_config`` covers, the FP4 tensor cores where a device has them (NVFP4 at the FP4 peak, MXFP4 as W4A8 at
the FP8 peak), weight-only elsewhere, and a refusal (exit 3,
naming the device) for an FP4 ``--dtype`` asked of a device without FP4."""

from __future__ import annotations

import json
from typing import Any

import pytest
from paths import ROOT
from typer.testing import CliRunner

from embedcalc.analysis.memory.inference import stored_bytes
from embedcalc.analysis.workload import Workload
from embedcalc.cli.app import app
from embedcalc.sources.loading import load_target

runner = CliRunner()
GPT_OSS_JSON = str(ROOT / "tests" / "fixtures" / "hf" / "gpt-oss-20b.json")


def _analyze(*args: str) -> dict[str, Any]:
    result = runner.invoke(app, ["analyze", *args, "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def _llama_2_7b_bytes(per_value: float, matrices_per_layer: int, per_matrix: int) -> int:
    """Llama-2-7B's bytes with its layers' linear matrices in a block format, the rest (embeddings, head, norms)
    in bf16: 32 layers of 4 · 4096² + 3 · 4096 · 11008 values."""
    layer_values = 32 * (4 * 4096 * 4096 + 3 * 4096 * 11008)
    other = 2 * 32000 * 4096 + (2 * 32 + 1) * 4096
    return int(layer_values * per_value) + 32 * matrices_per_layer * per_matrix + 2 * other


@pytest.mark.parametrize(
    ("dtype", "expected"),
    [
        ("mxfp4", _llama_2_7b_bytes(17 / 32, 4, 0)),  # 32 E2M1 + one E8M0 per 32 values
        ("nvfp4", _llama_2_7b_bytes(9 / 16, 4, 8)),  # 16 E2M1 + one E4M3 per 16; two fp32 per matrix
    ],
)
def test_llama_2_7b_weights_in_fp4_with_their_block_scales(dtype: str, expected: int) -> None:
    out = _analyze("llama-2-7b", "--dtype", dtype)
    assert out["workload"]["dtype"] == dtype and out["workload"]["dtype_source"] == "flag"
    assert out["results"][0]["memory"]["weights_bytes"] == expected
    assert expected == {"mxfp4": 3_965_198_336, "nvfp4": 4_167_574_528}[dtype]


def test_a_row_not_a_multiple_of_the_block_is_padded_to_whole_blocks() -> None:
    w = Workload(dtype="mxfp4")
    # 3 rows of 33 inputs: 2 blocks of 17 bytes each per row
    assert stored_bytes("decoder/ffn/in", (3, 33), 1, w) == 3 * 2 * 17
    assert stored_bytes("decoder/ffn/in", (3, 64), 2, Workload(dtype="nvfp4")) == 2 * (3 * 4 * 9 + 8)
    # a vector (norm, bias) and the head stay in bf16
    assert stored_bytes("decoder/ffn/norm", (64,), 1, w) == 128
    assert stored_bytes("head/lm", (10, 64), 1, w) == 10 * 64 * 2


def test_gpt_oss_default_weights_are_its_configs_mxfp4_experts() -> None:
    """gpt-oss-20b's config.json: quant_method mxfp4, attention, router, embeddings and head not converted. Its
    safetensors index gives total_size 13,761,264,768."""
    for target, source in (("gpt-oss-20b", "preset"), (GPT_OSS_JSON, "config")):
        out = _analyze(target)
        assert (out["workload"]["dtype"], out["workload"]["dtype_source"]) == ("mxfp4", source)
        assert out["results"][0]["memory"]["weights_bytes"] == 13_761_264_768
    loaded = load_target(GPT_OSS_JSON)
    assert loaded.config.quantized == "experts"
    assert loaded.hf is not None
    mapped = {m.field: m for m in loaded.hf.mapped}
    assert mapped["dtype"].key == "quantization_config" and "mxfp4" in mapped["dtype"].note
    assert "self_attn" in mapped["quantized"].note


def test_quantized_layers_covers_attention_too() -> None:
    experts = _analyze("gpt-oss-20b")["results"][0]["memory"]["weights_bytes"]
    layers = _analyze("gpt-oss-20b", "--set", "quantized=layers")["results"][0]["memory"]["weights_bytes"]
    assert layers < experts


def test_fp4_runs_at_the_fp4_peak_where_the_device_has_one() -> None:
    time = _analyze("llama-2-7b", "--dtype", "nvfp4", "--hardware", "b200", "--gen-tokens", "4")["results"][
        0
    ]["time"]
    assert time["dtype"] == "fp4"


def test_mxfp4_runs_w4a8_at_the_fp8_peak_where_the_device_has_fp4() -> None:
    """MXFP4 weights on Blackwell multiply MXFP8 activations (TensorRT-LLM's gpt-oss support matrix: "Blackwell |
    mxfp8 | mxfp4"): the FP8 peak, not the FP4 one NVFP4's W4A4 reaches; the output says so."""
    for args in (("gpt-oss-20b",), ("llama-2-7b", "--dtype", "mxfp4")):
        time = _analyze(*args, "--hardware", "b200", "--gen-tokens", "4")["results"][0]["time"]
        assert time["dtype"] == "fp8"
        assert time["peak_flops_per_s"] == 4.5e15  # B200's dense FP8, half its FP4
    text = runner.invoke(app, ["analyze", "gpt-oss-20b", "--hardware", "b200", "--gen-tokens", "4"]).stdout
    assert "activations in MXFP8 (W4A8" in text and "weight-only" not in text
    # the MMA applies the block scales itself: no dequantization term, as there is weight-only on Hopper
    b200 = _analyze("gpt-oss-20b", "--hardware", "b200", "--gen-tokens", "4")["results"][0]["time"]["terms"]
    h100 = _analyze("gpt-oss-20b", "--hardware", "h100-sxm", "--gen-tokens", "4")["results"][0]["time"][
        "terms"
    ]
    assert "dequantization" not in b200["decode"] and h100["decode"]["dequantization"] > 0


def test_an_fp4_dtype_asked_of_a_device_without_fp4_exits_3_naming_it() -> None:
    result = runner.invoke(app, ["analyze", "llama-2-7b", "--dtype", "mxfp4", "--hardware", "h100-sxm"])
    assert result.exit_code == 3
    assert "h100-sxm" in result.stderr and "FP4" in result.stderr and "b200" in result.stderr.lower()
    assert "Traceback" not in result.output


def test_a_models_own_fp4_runs_weight_only_on_a_device_without_fp4() -> None:
    out = _analyze("gpt-oss-20b", "--hardware", "h100-sxm", "--gen-tokens", "4")
    assert out["results"][0]["time"]["dtype"] == "bf16"
    text = runner.invoke(
        app, ["analyze", "gpt-oss-20b", "--hardware", "h100-sxm", "--gen-tokens", "4"]
    ).stdout
    assert "weight-only: dequantized to bf16" in text


def test_fp4_is_not_trained() -> None:
    result = runner.invoke(app, ["analyze", "llama-2-7b", "--dtype", "mxfp4", "--mode", "training"])
    assert result.exit_code == 3 and "FP4 inference format" in result.stderr


def test_fp4_gemms_reach_their_share_of_the_gemm_fraction() -> None:
    """A GEMM on FP4 tensor cores (W4A4: nvfp4 on B200) reaches ``fp4_gemm_fraction`` of the GEMM fraction the
    calibration fitted on bf16 GEMMs (TensorRT-LLM's measured NVFP4 GEMMs: 0.58 of bf16's share of peak); the
    matmuls that stay in bf16 (attention's cores, the LM head), MXFP4's W4A8 at the FP8 peak and weight-only FP4
    on a device without FP4 keep the plain fractions."""
    from embedcalc.analysis.roofline import weights_of
    from embedcalc.analysis.time.expected import ExpectedModel, device_constants
    from embedcalc.analysis.time.model import component_fractions
    from embedcalc.devices.calibration import load_calibration
    from embedcalc.devices.resolve import load_device

    config = load_target("llama-2-7b").config
    for device, dtype, scaled in (
        ("b200", "nvfp4", True),
        ("b200", "mxfp4", False),
        ("h100-sxm", "bf16", False),
    ):
        w = Workload(batch_size=64, seq_len=128, dtype=dtype)  # type: ignore[arg-type]
        hw = load_device(device)
        c = device_constants(load_calibration().constants, hw, True)
        weights = weights_of(config, w)
        model = ExpectedModel(c, hw).fractions(config, w, weights, False)
        plain = component_fractions(config, w, weights, False, c, None)
        share = c.fp4_gemm_fraction if scaled else 1.0
        for key in ("decoder/ffn/in", "decoder/attention/qkv"):
            assert model(key) == (plain(key)[0] * share, plain(key)[1])
        for key in ("head/lm", "decoder/attention/scores"):
            assert model(key) == plain(key)
    assert load_calibration().constants.fp4_gemm_fraction == 0.58
