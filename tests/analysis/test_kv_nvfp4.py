"""An NVFP4 KV cache and the KV dtype as a choice per plan layout (issue 35, item 4): the cache's bytes are exact
(9 bytes per 16 values), in memory and in what a decode step reads; a device without FP4 tensor cores and a model
whose cached vectors are not whole 16-value blocks are refused naming --kv-dtype (exit 3); plan compares several KV
dtypes, each row with its own and equal to analyze's numbers for that layout. Exact integers, never a speed."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

import embedcalc
from embedcalc.analysis.plan.rows import PlanResult, ServingRow
from embedcalc.cli.app import app

runner = CliRunner()
COMMON = ("llama-3.1-8b", "--hardware", "b200", "--dtype", "fp8", "--seq-len", "4096", "--gen-tokens", "256",
          "--batch-size", "16")  # fmt: skip


def _analyze(*args: str) -> dict[str, Any]:
    result = runner.invoke(app, ["analyze", *args, "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["results"][0]  # type: ignore[no-any-return]


def _decode_kv_read(r: dict[str, Any]) -> int:
    return sum(c["kv_read_bytes"] for c in r["time"]["breakdown"]["decode"].values())


def test_nvfp4_cache_is_nine_sixteenths_of_fp8_in_memory_and_decode_reads() -> None:
    fp8 = _analyze(*COMMON, "--kv-dtype", "fp8")
    fp4 = _analyze(*COMMON, "--kv-dtype", "nvfp4")
    assert fp4["time"]["kv_dtype"] == "nvfp4"
    # 16 cached values in 8 bytes of E2M1 and one E4M3 scale byte; every llama width is whole blocks: exact
    assert fp8["memory"]["kv_cache_bytes"] % 16 == 0
    assert fp4["memory"]["kv_cache_bytes"] * 16 == fp8["memory"]["kv_cache_bytes"] * 9
    assert fp4["memory"]["total_bytes"] == (
        fp8["memory"]["total_bytes"] - fp8["memory"]["kv_cache_bytes"] + fp4["memory"]["kv_cache_bytes"]
    )
    assert _decode_kv_read(fp4) * 16 == _decode_kv_read(fp8) * 9
    assert fp4["time"]["max_batch_size"] > fp8["time"]["max_batch_size"]


def test_nvfp4_cache_on_a_latent_attention_model_is_exact_too() -> None:
    args = (
        "deepseek-v3",
        "--hardware",
        "b200",
        "--dtype",
        "bf16",
        "--seq-len",
        "1024",
        "--gen-tokens",
        "64",
    )
    bf16 = _analyze(*args)
    fp4 = _analyze(*args, "--kv-dtype", "nvfp4")
    # the compressed latent (512) and its RoPE key (64): whole blocks; bf16 is 2 bytes a value
    assert fp4["memory"]["kv_cache_bytes"] * 32 == bf16["memory"]["kv_cache_bytes"] * 9


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (("llama-3.1-8b", "--hardware", "h100-sxm"), ("h100-sxm", "FP4 tensor cores", "--kv-dtype fp8")),
        (("gpt2", "--set", "embed_dim=780"), ("head_dim = 65", "multiple of 16", "--kv-dtype fp8")),
    ],
)
def test_a_cache_nvfp4_cannot_hold_is_refused_naming_kv_dtype(
    args: tuple[str, ...], names: tuple[str, ...]
) -> None:
    result = runner.invoke(app, ["analyze", *args, "--kv-dtype", "nvfp4", "--format", "json"])
    assert result.exit_code == 3, result.output
    [problem] = json.loads(result.stdout)["problems"]
    assert problem["path"] == "--kv-dtype" and problem["code"] == "kv_dtype_unsupported"
    for name in names:
        assert name in problem["message"]
    assert "Traceback" not in result.output


@pytest.fixture(scope="module")
def both() -> PlanResult:
    return embedcalc.plan("llama-3.1-70b", hardware=["h100-sxm", "b200"], dtype="fp8", kv_dtype=["fp8", "nvfp4"],
                          seq_len=4096, gen_tokens=256, concurrency=64, max_devices=8)  # fmt: skip


def _key(r: ServingRow) -> tuple[Any, ...]:
    return (r.layout, r.kv_dtype)


def test_plan_rows_per_kv_dtype_are_the_single_dtype_plans(both: PlanResult) -> None:
    assert both.settings["kv_dtype"] == ["fp8", "nvfp4"]
    rows: dict[Any, ServingRow] = {_key(r): r for r in both.rows}  # type: ignore[misc]
    assert len(rows) == len(both.rows)
    for kv in ("fp8", "nvfp4"):
        one = embedcalc.plan("llama-3.1-70b", hardware=["h100-sxm", "b200"], dtype="fp8", kv_dtype=kv,
                             seq_len=4096, gen_tokens=256, concurrency=64, max_devices=8)  # fmt: skip
        assert one.settings["kv_dtype"] == kv
        for r in one.rows:
            assert rows[_key(r)] == r  # type: ignore[index]
        assert sum(r.kv_dtype == kv for r in both.rows) == len(one.rows)
    # nvfp4 only where the device has FP4 tensor cores: one row says why for the H100
    [h100] = [r for r in both.rows if r.layout.device == "h100-sxm" and r.kv_dtype == "nvfp4"]
    assert not h100.ok and "FP4 tensor cores" in h100.reasons[0]
    assert any(r.ok for r in both.rows if r.layout.device == "b200" and r.kv_dtype == "nvfp4")
    assert ", KV " in both.recommendation


def test_an_nvfp4_plan_row_equals_analyze(both: PlanResult) -> None:
    [row] = [r for r in both.rows if r.layout.device == "b200" and r.kv_dtype == "nvfp4" and r.layout.tp == 2
             and r.layout.replicas == 1 and r.layout.ep == 1]  # fmt: skip
    assert row.ok and row.times is not None
    common = ("llama-3.1-70b", "--hardware", "b200", "--tp", "2", "--dtype", "fp8", "--kv-dtype", "nvfp4",
              "--seq-len", "4096", "--gen-tokens", "256")  # fmt: skip
    one = _analyze(*common, "--batch-size", "1")
    batch = _analyze(*common, "--batch-size", str(row.times.batch))
    assert row.times.prefill_s == one["time"]["prefill_s"]
    assert row.times.decode_step_s == batch["time"]["decode_s_per_token_mean"]
    assert row.memory.kv_cache_bytes == batch["memory"]["kv_cache_bytes"]


def test_cli_plans_a_comma_list_and_shows_each_rows_kv_dtype() -> None:
    args = ["plan", "llama-3.1-8b", "--hardware", "b200", "--dtype", "fp8", "--kv-dtype", "fp8,NVFP4",
            "--concurrency", "16", "--max-devices", "1"]  # fmt: skip
    result = runner.invoke(app, [*args, "--format", "json"])
    assert result.exit_code == 0, result.output
    [plan] = json.loads(result.stdout)["results"]
    assert plan["settings"]["kv_dtype"] == ["fp8", "nvfp4"]
    assert {row["kv_dtype"] for row in plan["layouts"]} == {"fp8", "nvfp4"}
    table = runner.invoke(app, args, env={"COLUMNS": "250"})
    assert table.exit_code == 0 and "KV dtype" in table.output
    bad = runner.invoke(app, [*args[:-6], "--kv-dtype", "fp8,fp3"])
    assert bad.exit_code == 2 and "fp3" in bad.output


def test_one_kv_dtype_shows_no_extra_column() -> None:
    result = runner.invoke(app, ["plan", "llama-3.1-8b", "--hardware", "h100-sxm", "--kv-dtype", "fp8",
                                 "--concurrency", "8", "--max-devices", "1"])  # fmt: skip
    assert result.exit_code == 0 and "KV dtype" not in result.output
