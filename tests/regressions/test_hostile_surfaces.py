"""Regression tests for issue 24 (the new surfaces under hostile input), one per bug class, each with the exact
input that reproduced it. The hub-cache classes are in tests/sources/hf/test_hub.py, the no-torch class in
tests/cli/test_cli.py (scripts/no_torch_check.py).

Time guards are blow-up guards (30 s on a shared CI core), not speed assertions.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

GUARD_S = 30.0
H100 = ["--hardware", "h100-sxm"]
TRAINING = [*H100, "--mode", "training", "--train-tokens", "1e9"]


def run(cli: Any, *args: str) -> Any:
    start = time.perf_counter()
    result = cli(*args)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.stderr + result.stdout
    assert time.perf_counter() - start < GUARD_S, args[:4]
    return result


def assert_refused(result: Any, code: int, *words: str) -> None:
    assert result.exit_code == code, (result.exit_code, result.stderr)
    for word in words:
        assert word in result.stderr, (word, result.stderr)


# --- non-finite numbers in the time model -------------------------------------------------------------------------


def test_price_per_hour_inf_is_refused(cli: Any) -> None:
    result = run(cli, "analyze", "gpt2", *TRAINING, "--price-per-hour", "inf", "--format", "json")
    assert_refused(result, 2, "--price-per-hour", "finite price")
    assert "Infinity" not in result.stdout


def test_efficiency_1e_320_is_refused(cli: Any) -> None:
    assert_refused(
        run(cli, "analyze", "gpt2", *H100, "--efficiency", "1e-320"), 2, "--efficiency", "[0.0001, 1]"
    )


def test_device_file_with_1e_300_flops_is_refused(cli: Any, tmp_path: Path) -> None:
    device = tmp_path / "slow.yaml"
    device.write_text(
        "name: slow\ntitle: Slow\nvendor: X\nkind: gpu\nsources: {d: me}\n"
        "peak_flops_per_s:\n  fp32: {value: 1.0e-300, source: d}\n"
        "memory_bytes: {value: 85899345920, source: d}\nmemory_bandwidth_bytes_per_s: {value: 3.35e12, source: d}\n"
    )
    result = run(cli, "analyze", "gpt2", "--hardware", str(device), "--format", "json")
    assert_refused(result, 3, "peak_flops_per_s", "below 1 MFLOP/s")
    assert json.loads(result.stdout)["status"] == "error"


def test_devices_with_400_digits_is_a_usage_error(cli: Any) -> None:
    assert_refused(
        run(cli, "analyze", "gpt2", *TRAINING, "--devices", "9" * 400), 2, "--devices", "30 digits"
    )


def test_time_request_applies_the_same_rules_to_python_callers() -> None:
    from embedcalc.analysis.roofline import Efficiency
    from embedcalc.analysis.time.estimate import TimeRequest
    from embedcalc.errors import WorkloadError

    for kwargs in ({"price_per_hour": math.inf}, {"devices": 10**400}, {"efficiency": Efficiency(1e-320, 1.0)},
                   {"train_tokens": 0}, {"price_per_hour": math.nan}):  # fmt: skip
        with pytest.raises(WorkloadError) as info:
            TimeRequest(**kwargs)  # type: ignore[arg-type]
        assert info.value.problems[0].code == "time_input_invalid"


def test_json_is_never_written_with_infinity(capsys: pytest.CaptureFixture[str]) -> None:
    from embedcalc.cli.output import emit_json
    from embedcalc.errors import WorkloadError

    with pytest.raises(WorkloadError, match=r"results\[0\]\.time\.cost"):
        emit_json("analyze", [{"time": {"cost": math.inf}}])
    assert capsys.readouterr().out == ""


# --- streams and terminals (real processes: the streams are the point) ----------------------------------------


def _embedcalc(
    *args: str, env: dict[str, str] | None = None, **kwargs: Any
) -> subprocess.CompletedProcess[str]:
    from cli_process import cli_env

    base = cli_env(COLUMNS="120") if env is None else env
    return subprocess.run([sys.executable, "-m", "embedcalc", *args], env=base, text=True, timeout=60,
                          check=False, **kwargs)  # fmt: skip


def test_closed_stdout_is_an_output_error() -> None:
    proc = _embedcalc("analyze", "gpt2", stderr=subprocess.PIPE, preexec_fn=lambda: os.close(1))  # `>&-`
    assert proc.returncode == 1, proc.stderr
    assert "cannot write output: stdout is closed" in proc.stderr and "Traceback" not in proc.stderr


def test_closed_stderr_still_answers() -> None:
    proc = _embedcalc("analyze", "gpt2", "--tp", "2", stdout=subprocess.PIPE, preexec_fn=lambda: os.close(2))
    assert proc.returncode == 0 and "embedding" in proc.stdout


def test_c_locale_without_utf8_mode_prints_ascii() -> None:
    from cli_process import cli_env

    env = {
        k: v for k, v in cli_env(COLUMNS="100").items() if k not in ("PYTHONIOENCODING", "LANG", "LC_CTYPE")
    }
    env.update(LC_ALL="C", PYTHONUTF8="0")
    proc = _embedcalc("analyze", "gpt2", env=env, capture_output=True, encoding="ascii", errors="strict")
    assert proc.returncode == 0, proc.stderr
    assert "embedding" in proc.stdout and "Traceback" not in proc.stderr


def test_columns_zero_prints_the_table() -> None:
    proc = _embedcalc("analyze", "gpt2", env={**os.environ, "COLUMNS": "0"}, capture_output=True)
    assert proc.returncode == 0 and "embedding" in proc.stdout and "39,383,808" in proc.stdout


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_broken_pipe_exits_0_silently(fmt: str) -> None:
    """The reader leaves before anything is written: exit 0, nothing on stderr (as when it leaves after)."""
    from cli_process import cli_env

    args = [sys.executable, "-m", "embedcalc", "sweep", "gpt2", "--seq-len", "1:1024:+1", "--format", fmt]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cli_env(), text=True)
    assert proc.stdout is not None
    proc.stdout.close()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "Broken pipe" not in err and "Exception ignored" not in err


# --- the Python API: wrong types are the package's own errors, sizes bounded as on the command line -----------


@pytest.mark.parametrize(
    ("call", "path", "code"),
    [
        (lambda e: e.load("gpt2", overrides=5), "overrides", 2),
        (lambda e: e.load("gpt2", overrides=[5]), "overrides", 2),
        (lambda e: e.analyze("gpt2", parallel=5), "parallel", 3),
        (lambda e: e.analyze("gpt2", batch_size=10**1000), "batch_size", 3),
        (lambda e: e.analyze("gpt2", parallel={"tp": 10**40}), "tp", 3),
    ],
)
def test_api_wrong_types_are_embedcalc_errors(call: Any, path: str, code: int) -> None:
    import embedcalc

    with pytest.raises(embedcalc.EmbedcalcError) as info:
        call(embedcalc)
    assert info.value.exit_code == code and info.value.problems[0].path == path


def test_workload_checks_its_own_fields() -> None:
    from embedcalc.analysis.workload import Parallelism, Workload
    from embedcalc.errors import WorkloadError

    assert Workload(parallel={"tp": 2}).parallel == Parallelism(tp=2)  # type: ignore[arg-type]
    for kwargs, path in (
        ({"dtype": 5}, "dtype"),
        ({"mode": "train"}, "mode"),
        ({"parallel": {"tpp": 2}}, "parallel"),
    ):
        with pytest.raises(WorkloadError) as info:
            Workload(**kwargs)  # type: ignore[arg-type]
        assert info.value.problems[0].path.lstrip("-").startswith(path)
    with pytest.raises(WorkloadError, match="did you mean 'tp'"):
        Workload(parallel={"tpp": 2})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("call", "path"),
    [
        (lambda e: e.analyze("gpt2", parallel={"foo": 2}), "parallel.foo"),
        (lambda e: e.analyze("gpt2", workload=5), "workload"),
        (lambda e: e.compare(None), "configs"),
        (lambda e: e.compare(5), "configs"),
        (lambda e: e.sweep("gpt2", seq_len=iter(int, 1)), "seq_len"),  # endless: refused after 100,001 values
        (lambda e: e.sweep("gpt2", seq_len=["x"]), "seq_len"),
        (lambda e: e.sweep("gpt2", embed_dim=[64] * 3), "embed_dim"),
    ],
)
def test_api_arguments_name_the_field(call: Any, path: str) -> None:
    import embedcalc

    with pytest.raises(embedcalc.EmbedcalcError) as info:
        call(embedcalc)
    assert info.value.problems[0].path == path, info.value.problems


def test_api_sweep_takes_an_int_shape_axis() -> None:
    import embedcalc

    assert [p["embed_dim"] for p in embedcalc.sweep("gpt2", embed_dim=768).points] == [768]


# --- fields that only mean something under another kind are refused, not ignored ---------------------------------

SMALL_YAML = (
    "architecture: decoder\nvocab_size: 1000\nmax_seq_len: 256\nembed_dim: 64\nnum_heads: 4\nnum_layers: 2\n"
)


@pytest.mark.parametrize(
    ("block", "words"),
    [
        ("ffn: {num_experts: 8, top_k: 2}", ["ffn.num_experts (8)", "add kind: moe"]),
        ("attention: {kv_lora_rank: 512, qk_rope_head_dim: 64}", ["attention.kv_lora_rank", "add kind: mla"]),
        (
            "ffn: {kind: moe, num_experts: 8, top_k: 2, ffn_dim: 128}",
            ["ffn.ffn_dim (128)", "expert_dim: 128"],
        ),
        ("ffn: {router_bias: true}", ["ffn.router_bias (true)", "add kind: moe"]),
    ],
)
def test_a_field_of_another_kind_is_refused(cli: Any, tmp_path: Path, block: str, words: list[str]) -> None:
    path = tmp_path / "model.yaml"
    path.write_text(SMALL_YAML + block + "\n")
    assert_refused(run(cli, "check", str(path)), 3, *words)


def test_a_dense_variant_of_a_moe_default_drops_the_moe_fields(cli: Any, tmp_path: Path) -> None:
    """A variant that changes the kind starts from that kind's defaults (DeepSeek's dense first layers)."""
    path = tmp_path / "model.yaml"
    path.write_text(SMALL_YAML + "ffn: {kind: moe, num_experts: 4, top_k: 2}\nblocks: {dense: {ffn: {kind: dense}}}\n"
                    "layers: [{pattern: [dense], repeat: 1}, {pattern: [default], repeat: 1}]\n")  # fmt: skip
    assert run(cli, "check", str(path)).exit_code == 0


# --- races on the local device cache ------------------------------------------------------------------------------


def test_concurrent_local_writers_and_a_reader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two `bench --peak` writers at once and a reader: no writer fails, the reader never sees a partial file."""
    import threading

    from embedcalc.devices.local import load_local, local_device, local_path, save_local

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    devices = [local_device(f"cpu {i}", "cpu", {"fp32": (1e11 * (i + 1), "matmul")}, 1 << 34, (1e10, "copy"), "2.x")
               for i in range(2)]  # fmt: skip
    save_local(devices[0])
    errors: list[BaseException] = []

    def write(device: Any) -> None:
        try:
            for _ in range(100):
                save_local(device)
        except BaseException as exc:  # the test reports every failure
            errors.append(exc)

    writers = [threading.Thread(target=write, args=(d,)) for d in devices]
    for t in writers:
        t.start()
    titles = set()
    while any(t.is_alive() for t in writers):
        titles.add(load_local().title)  # raises on an empty or partial file
    for t in writers:
        t.join()
    assert not errors, errors
    assert titles <= {"cpu 0", "cpu 1"}
    assert [p.name for p in local_path().parent.iterdir()] == ["local.json"]  # no temporary file left behind


def test_an_empty_local_json_is_not_measured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: Any
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    (tmp_path / "embedcalc").mkdir()
    (tmp_path / "embedcalc" / "local.json").write_text("")
    assert_refused(run(cli, "analyze", "gpt2", "--hardware", "local"), 4, "is empty", "bench --peak")


# --- one rule for check and analyze; closed forms where the answer is one -------------------------------------


def test_check_refuses_the_tp_analyze_refuses(cli: Any) -> None:
    check, analyze = (
        run(cli, "check", "bert-base", "--tp", "5"),
        run(cli, "analyze", "bert-base", "--tp", "5"),
    )
    assert check.exit_code == analyze.exit_code == 3
    assert (
        "--tp 5 must divide num_heads (12)" in check.stderr
        and "--tp 5 must divide num_heads (12)" in analyze.stderr
    )


def test_a_billion_layers_under_zero3_is_counted_in_closed_form(cli: Any) -> None:
    for zero in ("3", "0"):
        result = run(cli, "analyze", "gpt2", "--set", "num_layers=1000000000", "--dp", "2", "--zero", zero, "--mode",
                     "training", "--format", "json")  # fmt: skip
        assert result.exit_code == 0, result.stderr
        counts = [c["count"] for c in json.loads(result.stdout)["results"][0]["communication"]["collectives"]]
        # a block each, + root
        assert counts == ([10**9 + 1, 10**9, 10**9 + 1] if zero == "3" else [10**9 + 1])


@pytest.mark.parametrize("seed", range(30))
def test_ddp_bucket_count_equals_the_written_out_sequence(seed: int) -> None:
    import random

    from embedcalc.analysis.comm.gradient_buckets import ddp_bucket_count, ddp_buckets

    rng = random.Random(seed)
    runs = [([rng.choice([0, 1, 3 << 18, 5 << 20, 9 << 20, 30 << 20]) for _ in range(rng.randint(1, 5))],
             rng.randint(1, 60)) for _ in range(rng.randint(1, 4))]  # fmt: skip
    assert ddp_bucket_count(runs) == ddp_buckets([s for period, n in runs for _ in range(n) for s in period])


@pytest.mark.parametrize(
    "command", [["verify", "gpt2"], ["verify", "gpt2", "--tp", "2"], ["diff", "gpt2", "gpt2"]]
)
def test_building_100000_layers_is_refused_before_torch(cli: Any, command: list[str]) -> None:
    result = run(cli, *command, "--set", "num_layers=100000")
    assert_refused(result, 4, "100,000 layers", "--set num_layers=2", "analyze")


def test_sweep_is_bounded_by_its_output_cost(cli: Any) -> None:
    """110,592 points: the table answers by default; JSON (15 x the memory a point) needs --max-points."""
    axes = ["--seq-len", "16:768:+16", "--embed-dim", "64:3072:+64", "--num-layers", "1:48:+1"]
    assert run(cli, "sweep", "gpt2", *axes, "--max-rows", "3").exit_code == 0
    result = run(cli, "sweep", "gpt2", *axes, "--format", "json")
    assert_refused(result, 2, "110,592 points", "GiB", "--max-points 110592")
    big = run(cli, "sweep", "gpt2", "--seq-len", "1:100000:+1", "--batch-size", "1,2,3", "--max-points", "300000",
              "--format", "json")  # fmt: skip
    assert_refused(big, 2, "250,000", "--format table")
