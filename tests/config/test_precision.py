"""Precision as users say it (issue 20, item 3): one dtype vocabulary with its aliases in flags, config files, JSON
and the Python API."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from paths import HF_FIXTURES
from typer.testing import CliRunner

import embedcalc
from embedcalc.cli.app import app
from embedcalc.config.dtypes import ALIASES, DTYPES, DtypeError, canonical_dtype

runner = CliRunner()
FIXTURES = HF_FIXTURES


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
    assert weights["fp32"] == 4 * (LINEAR + OTHER) and weights["bf16"] == weights["fp16"] == 2 * (
        LINEAR + OTHER
    )
    assert weights["fp8"] == LINEAR + 2 * OTHER == 7_000_825_856  # embedding, head and norms stay bf16
    # down_proj: 11008 inputs make 86 groups a row, the last one of 0 values short
    assert GROUPS_128 == 50_593_792
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
    from embedcalc.analysis.memory import stored_bytes
    from embedcalc.analysis.workload import Workload

    w = Workload(dtype="int4", quant_group_size=128)
    assert stored_bytes("decoder/ffn/out", (4096, 11008), 1, w) == 4096 * 11008 // 2 + 4096 * 86 * 4
    assert stored_bytes("decoder/ffn/out", (3, 5), 2, w) == 2 * (8 + 3 * 1 * 4)  # 15 values: 7.5 -> 8 bytes
    assert stored_bytes("embedding/token", (32000, 4096), 1, w) == 2 * 32000 * 4096  # fp16: not quantized
    assert stored_bytes("decoder/moe/router", (8, 4096), 1, w) == 2 * 8 * 4096


def test_decode_reads_the_stored_weights_with_their_scales() -> None:
    def decode_weight_bytes(*flags: str) -> int:
        time = _json("analyze", "llama-2-7b", "--hardware", "h100-sxm", "--gen-tokens", "4", *flags)[
            "results"
        ][0]
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
    for key in (
        "decoder/attention/qkv",
        "decoder/attention/out",
        "decoder/ffn/in",
        "decoder/ffn/out",
    ):
        assert bf16[key]["bound"] == fp8[key]["bound"] == "compute", key
    for key in ("decoder/attention/qkv", "decoder/attention/out", "decoder/ffn/in", "decoder/ffn/out"):
        # H100 SXM dense peaks
        assert fp8[key]["time_s"] == pytest.approx(bf16[key]["time_s"] * 989.4 / 1978.9)
    assert fp8["head/lm"]["time_s"] == bf16["head/lm"]["time_s"]  # the LM head stays in bf16
    # attention's cores: bf16 activations
    for key in (
        "decoder/attention/scores",
        "decoder/attention/context",
    ):
        assert fp8[key] == bf16[key]


def test_fp8_on_a_device_without_fp8_is_exit_3_naming_it() -> None:
    result = runner.invoke(app, ["analyze", "llama-2-7b", "--dtype", "fp8", "--hardware", "v100-sxm2"])
    assert result.exit_code == 3
    assert "v100-sxm2" in result.stderr and "no FP8" in result.stderr
    assert (
        runner.invoke(app, ["analyze", "llama-2-7b", "--dtype", "fp8", "--hardware", "h800"]).exit_code == 0
    )


# --- the default dtype is the model's own, and the output says where it came from ----------------------------------


def test_a_preset_runs_in_its_published_dtype_and_says_so() -> None:
    r = _json("analyze", "llama-3.1-8b")
    assert (r["workload"]["dtype"], r["workload"]["dtype_source"]) == ("bf16", "preset")
    assert (r["results"][0]["dtype"], r["results"][0]["dtype_source"]) == ("bf16", "preset")
    assert r["results"][0]["memory"]["weights_bytes"] == 2 * r["results"][0]["params"]["total"]
    chosen = _json("analyze", "llama-3.1-8b", "--dtype", "fp32")
    assert (chosen["workload"]["dtype"], chosen["workload"]["dtype_source"]) == ("fp32", "flag")
    assert _json("analyze", "gpt2")["workload"]["dtype_source"] == "preset"  # fp32, published so
    assert _json("analyze", "gpt3-175b")["workload"]["dtype_source"] == "default"  # no checkpoint: fp32
    table = runner.invoke(app, ["analyze", "llama-3.1-8b"], env={"COLUMNS": "120"})
    assert "bf16 (preset)" in table.stdout


def test_every_preset_dtype_is_sourced() -> None:
    from embedcalc.sources.presets import preset_names

    for name in preset_names():
        text = (Path(embedcalc.__file__).parent.parent / "presets" / f"{name}.yaml").read_text(
            encoding="utf-8"
        )
        config = embedcalc.load(name).config
        if config.dtype is None:  # a new preset records its published dtype (its config.json's torch_dtype)
            assert "# No dtype:" in text, f"{name}: add `dtype:` with its source, or say why there is none"
        else:
            assert "# dtype, the published weights'" in text, f"{name}: cite where {config.dtype} comes from"
    assert embedcalc.load("llama-2-7b").config.dtype == "fp16"  # Llama-2-7b-hf's torch_dtype
    assert embedcalc.load("deepseek-v3").config.dtype == "fp8"  # its quantization_config


@pytest.mark.parametrize(("fixture", "dtype", "key"), [
    ("llama-3.1-8b.json", "bf16", "torch_dtype"),  # transformers 4 writes torch_dtype
    ("llama-3-8b.v5.json", "bf16", "dtype"),  # transformers 5 writes dtype
    ("gemma-2-9b.json", "fp32", "torch_dtype"),
    ("llama-2-7b.json", "fp16", "torch_dtype"),
    ("deepseek-v3.json", "fp8", "quantization_config"),  # the weights are FP8 whatever torch_dtype says
    ("gpt2.json", None, None),  # names none: the default
])  # fmt: skip
def test_a_config_json_gives_its_dtype(fixture: str, dtype: str | None, key: str | None) -> None:
    path = str(FIXTURES / fixture)
    loaded = embedcalc.load(path)
    assert loaded.config.dtype == dtype
    if key is not None:
        assert loaded.user_keys["dtype"] == key
    r = _json("analyze", path)
    assert r["workload"]["dtype"] == (dtype or "fp32")
    assert r["workload"]["dtype_source"] == ("config" if dtype else "default")


def test_a_config_file_dtype_takes_aliases_and_refuses_others(tmp_path: Path) -> None:
    base = {"architecture": "decoder", "vocab_size": 1000, "max_seq_len": 256, "embed_dim": 64, "num_heads": 4,
            "num_layers": 2}  # fmt: skip
    good = tmp_path / "good.json"
    good.write_text(json.dumps(base | {"dtype": "bfloat16"}), encoding="utf-8")
    r = _json("analyze", str(good))
    assert (r["workload"]["dtype"], r["workload"]["dtype_source"]) == ("bf16", "config")
    assert r["results"][0]["config"]["dtype"] == "bf16"  # written as the short name
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(base | {"dtype": "float64"}), encoding="utf-8")
    result = runner.invoke(app, ["analyze", str(bad)])
    assert result.exit_code == 3 and "dtype" in result.stderr and "fp32" in result.stderr
    over = _json("analyze", str(good), "--set", "dtype=fp16")
    assert (over["workload"]["dtype"], over["workload"]["dtype_source"]) == ("fp16", "config")


def test_compare_says_each_targets_dtype() -> None:
    r = _json("compare", "gpt2", "llama-3.1-8b")
    assert [(x["dtype"], x["dtype_source"]) for x in r["results"]] == [("fp32", "preset"), ("bf16", "preset")]
    assert r["workload"]["dtype"] == r["workload"]["dtype_source"] == "per-result"
    same = _json("compare", "gpt2", "llama-3.1-8b", "--dtype", "bf16")
    assert (same["workload"]["dtype"], same["workload"]["dtype_source"]) == ("bf16", "flag")


def test_the_python_api_defaults_to_the_models_dtype() -> None:
    a = embedcalc.analyze("llama-3.1-8b")
    assert (a.workload.dtype, a.workload.dtype_source) == ("bf16", "preset")
    b = embedcalc.analyze("llama-3.1-8b", dtype="fp32")
    assert (b.workload.dtype, b.workload.dtype_source) == ("fp32", "flag")
    train = embedcalc.analyze("llama-3.1-8b", mode="training")
    assert train.memory.weights_bytes == 2 * train.params.total  # bf16 mixed precision, as it was trained


@pytest.mark.torch
def test_bench_keeps_fp32_whatever_the_models_dtype(tmp_path: Path, measured_local: Path) -> None:
    pytest.importorskip("torch")
    tiny = tmp_path / "tiny.json"
    tiny.write_text(json.dumps({"architecture": "decoder", "vocab_size": 256, "max_seq_len": 32, "embed_dim": 32,
                                "num_heads": 2, "num_layers": 1, "dtype": "bf16"}), encoding="utf-8")  # fmt: skip
    r = _json("bench", str(tiny), "--device", "cpu", "--seq-len", "8", "--warmup", "0", "--repeat", "1")
    assert (r["workload"]["dtype"], r["workload"]["dtype_source"]) == ("fp32", "default")
    assert r["results"][0]["memory"]["weights_bytes"] == 4 * r["results"][0]["params"]["total"]
