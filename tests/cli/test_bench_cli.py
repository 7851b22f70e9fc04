"""``embedcalc verify`` and ``embedcalc bench`` through the CLI (issue 3): exit codes, JSON fields, sanity.

Never a speed assertion: only structure and arithmetic identities between the reported numbers. Most runs are
in-process (``cli`` fixture, torch imported once); the process boundary is used where it matters (torch missing,
Ctrl-C).
"""

from __future__ import annotations

import functools
import json
import resource
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cli_process import cli_env, sigint_as_in_a_terminal

from embedcalc.analysis.memory import estimate_memory
from embedcalc.analysis.workload import Workload
from embedcalc.sources.loading import load_target

TINY_DECODER = {"architecture": "decoder", "vocab_size": 512, "embed_dim": 64, "num_heads": 4, "num_layers": 2,
                "max_seq_len": 64}  # fmt: skip
TINY_ENCODER_DECODER = {**TINY_DECODER, "architecture": "encoder-decoder"}
MEASUREMENT_FIELDS = {
    "median_s", "p10_s", "p90_s", "tokens_per_s", "sequences_per_s", "achieved_flops_per_s", "peak_flops_per_s",
    "utilization", "peak_memory_bytes", "peak_memory_method", "predicted_memory_bytes", "device",
}  # fmt: skip
BENCH_SMALL = ("--device", "cpu", "--repeat", "3", "--warmup", "1", "--seq-len", "32", "--batch-size", "2",
               "--format", "json")  # fmt: skip


@pytest.fixture
def torch() -> Any:
    return pytest.importorskip("torch")


@pytest.fixture
def small_peak(torch: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Measure the matmul peak on 256 x 256 matrices instead of 2048, the bandwidth on 1 Mi elements, the
    kernel overhead on 100 kernels, the GEMM rows on 128 x 128 and the GEMV rate on 64 KiB of 64 x 64 matrices: the
    bench tests check how the measurements are used, not their values, and the real sizes cost seconds on 2
    cores."""
    import embedcalc.modeling.bandwidth as bandwidth
    import embedcalc.modeling.timing as timing

    monkeypatch.setattr(
        timing, "measure_matmul_peak", functools.partial(timing.measure_matmul_peak, size=256)
    )
    monkeypatch.setattr(
        bandwidth,
        "measure_memory_bandwidth",
        functools.partial(bandwidth.measure_memory_bandwidth, elements=1 << 20, repeat=2),
    )
    monkeypatch.setattr(
        timing,
        "measure_kernel_overhead",
        functools.partial(timing.measure_kernel_overhead, kernels=100, repeat=2),
    )
    monkeypatch.setattr(
        timing, "measure_gemm_rows", functools.partial(timing.measure_gemm_rows, size=128, repeat=2)
    )
    monkeypatch.setattr(bandwidth, "measure_gemv_rate",
                        functools.partial(bandwidth.measure_gemv_rate, shape=(64, 64), repeat=2,
                                          total_bytes=1 << 16))  # fmt: skip


@pytest.fixture
def tiny(write_config: Callable[..., Path]) -> str:
    return str(write_config(TINY_DECODER, "tiny.yaml"))


def run_json(cli: Any, *args: str) -> dict[str, Any]:
    result = cli(*args)
    assert result.exit_code == 0, (result.stderr, result.exception)
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def peak_rss() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


# --- verify --------------------------------------------------------------------------------------------------------


@pytest.mark.torch
@pytest.mark.parametrize("name", ["bert-base", "gpt2", "transformer-base", "gpt3-175b"])
def test_verify_presets_agree(cli: Any, torch: Any, name: str) -> None:
    before, start = peak_rss(), time.perf_counter()
    data = run_json(cli, "verify", name, "--format", "json")
    elapsed = time.perf_counter() - start
    assert data["command"] == "verify"
    assert data["status"] == "ok"
    [result] = data["results"]
    assert result["agree"] is True
    for side in ("params", "flops"):
        rows = result[side]["rows"]
        assert rows
        assert all(r["difference"] == 0 for r in rows), rows
        assert result[side]["analytic_total"] == result[side]["counted_total"]
    # attention really counted: the n² rows are not a silent zero (PyTorch issue 195460)
    flops = {r["component"]: r["counted"] for r in result["flops"]["rows"]}
    scores = [v for k, v in flops.items() if k.endswith("attention/scores")]
    assert scores and all(v > 0 for v in scores)
    if name == "bert-base":
        assert result["params"]["counted_total"] == 109_482_240
        assert result["flops"]["counted_total"] == 22_348_431_360
    if name == "gpt3-175b":
        assert result["params"]["counted_total"] == 174_604_259_328
        assert elapsed < 60
        assert peak_rss() - before < 1 << 30  # 700 GB of fp32 weights were never allocated


@pytest.mark.torch
def test_verify_eager_attention(cli: Any, torch: Any) -> None:
    data = run_json(cli, "verify", "gpt2", "--attention", "eager", "--seq-len", "64", "--format", "json")
    assert data["status"] == "ok"
    assert data["results"][0]["attention"] == "eager"


@pytest.mark.torch
def test_verify_table(cli: Any, torch: Any) -> None:
    result = cli("verify", "bert-base")
    assert result.exit_code == 0
    assert "22,348,431,360" in result.stdout
    assert "109,482,240" in result.stdout
    assert "difference" in result.stdout


@pytest.mark.torch
def test_verify_mismatch_exits_1(cli: Any, torch: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import embedcalc.modeling as modeling

    real = modeling.component_params

    def off_by_one(model: Any) -> dict[str, int]:
        counted = dict(real(model))
        counted["embedding/token"] += 1
        return counted

    monkeypatch.setattr(modeling, "component_params", off_by_one)
    table = cli("verify", "bert-base")
    assert table.exit_code == 1
    assert "differ" in table.stderr
    [row] = [line for line in table.stdout.splitlines() if "embedding/token" in line and "│" in line]
    assert (
        table.stdout.strip().splitlines()[-1] == "verify bert-base: DIFFER on 1 component(s): embedding/token"
    )
    assert "23,440,896" in row and "23,440,897" in row  # 30522 x 768, and the tampered count
    assert row.split("│")[-2].strip() == "+1"  # the difference column

    data = json.loads(cli("verify", "bert-base", "--format", "json").stdout)
    assert data["status"] == "mismatch"
    assert data["results"][0]["agree"] is False
    bad = [r for r in data["results"][0]["params"]["rows"] if r["difference"]]
    assert bad == [{"component": "embedding/token", "analytic": 23_440_896, "counted": 23_440_897,
                    "difference": 1}]  # fmt: skip


# --- bench: measurements -------------------------------------------------------------------------------------------


def check_measurement(
    result: dict[str, Any], batch: int, tokens_per_sequence: int, mode: str
) -> dict[str, Any]:
    m: dict[str, Any] = result["measurement"]
    assert set(m) >= MEASUREMENT_FIELDS
    assert m["device"].startswith("cpu")
    assert 0 < m["p10_s"] <= m["median_s"] <= m["p90_s"]
    median = m["median_s"]
    assert m["tokens_per_s"] == pytest.approx(batch * tokens_per_sequence / median, rel=1e-9)
    assert m["sequences_per_s"] == pytest.approx(batch / median, rel=1e-9)
    flops = result["flops"]["training_step" if mode == "training" else "forward"]
    assert flops > 0
    assert m["achieved_flops_per_s"] == pytest.approx(flops / median, rel=1e-9)
    assert m["peak_flops_per_s"] > 0
    assert m["utilization"] == pytest.approx(m["achieved_flops_per_s"] / m["peak_flops_per_s"], rel=1e-9)
    assert isinstance(m["peak_memory_bytes"], int) and m["peak_memory_bytes"] >= 0
    assert isinstance(m["peak_memory_method"], str) and m["peak_memory_method"]
    memory = result["memory"]
    # bench runs whole-sequence steps: the prediction leaves the KV cache out
    assert m["predicted_memory_bytes"] == memory["total_bytes"] - memory["kv_cache_bytes"]
    assert m["predicted_memory_bytes"] > 0
    check_predicted(m, ("median_s", "tokens_per_s", "peak_memory_bytes"))
    assert m["predicted"]["peak_memory_bytes"] == m["predicted_memory_bytes"]
    assert "local" in m["prediction_note"] and m["predicted"]["median_s"] > 0
    return m


def check_predicted(m: dict[str, Any], keys: tuple[str, ...]) -> None:
    """Every measured key has its prediction beside it and the error against it, 100 (measured - predicted) /
    predicted (the one convention, embedcalc.reconcile.prediction)."""
    assert set(m["predicted"]) == set(m["error_pct"]) == set(keys)
    for key in keys:
        measured, predicted = m[key], m["predicted"][key]
        assert m["error_pct"][key] == pytest.approx(100 * (measured - predicted) / predicted, rel=1e-9), key


@pytest.mark.torch
def test_bench_tiny_inference(cli: Any, tiny: str, small_peak: None) -> None:
    data = run_json(cli, "bench", tiny, *BENCH_SMALL)
    assert data["command"] == "bench"
    assert data["status"] == "ok"
    assert data["workload"]["batch_size"] == 2 and data["workload"]["seq_len"] == 32
    [result] = data["results"]
    m = check_measurement(result, batch=2, tokens_per_sequence=32, mode="inference")
    assert m["repeat"] == 3
    # t = 64 tokens, d = 64, ffn 4d = 256, vocab 512; a layer: QKV, out, FFN in + out, Q·Kᵀ and A·V (b n² d each)
    b, n, d, f = 2, 32, 64, 256
    t = b * n
    per_layer = 2 * t * d * 3 * d + 2 * t * d * d + 2 * (2 * t * d * f) + 2 * (2 * b * n * n * d)
    assert result["flops"]["forward"] == 2 * per_layer + 2 * t * d * 512  # 2 layers + the LM head
    assert m["flops_per_step"] == result["flops"]["forward"]

    # the prediction is analyze's expected time on the local device bench measured (and cached) for it, with every
    # position's logits (bench's forward computes them all; a server's prefill, analyze's default, the last one's)
    def forward_s(*logits: str) -> float:
        args = (
            "analyze",
            tiny,
            "--batch-size",
            "2",
            "--seq-len",
            "32",
            "--dtype",
            "fp32",
            "--hardware",
            "local",
        )
        return float(run_json(cli, *args, "--format", "json", *logits)["results"][0]["time"]["forward_s"])

    assert m["predicted"]["median_s"] == pytest.approx(forward_s("--logits", "all"), rel=1e-12)
    assert forward_s() < forward_s("--logits", "all")


@pytest.mark.torch
def test_bench_tiny_training(cli: Any, tiny: str, small_peak: None) -> None:
    data = run_json(cli, "bench", tiny, *BENCH_SMALL, "--mode", "training")
    [result] = data["results"]
    assert data["workload"]["mode"] == "training"
    m = check_measurement(result, batch=2, tokens_per_sequence=32, mode="training")
    assert result["flops"]["training_step"] == 3 * result["flops"]["forward"]
    assert result["memory"]["gradients_bytes"] > 0 and result["memory"]["optimizer_bytes"] > 0
    assert m["predicted_memory_bytes"] == result["memory"]["total_bytes"]  # training has no KV cache


@pytest.mark.torch
def test_bench_tiny_encoder_decoder(cli: Any, write_config: Callable[..., Path], small_peak: None) -> None:
    path = str(write_config(TINY_ENCODER_DECODER, "tiny-ed.yaml"))
    data = run_json(cli, "bench", path, *BENCH_SMALL, "--tgt-len", "16")
    [result] = data["results"]
    check_measurement(result, batch=2, tokens_per_sequence=32 + 16, mode="inference")  # source + target


@pytest.mark.torch
def test_bench_table(cli: Any, tiny: str, small_peak: None) -> None:
    result = cli("bench", tiny, *BENCH_SMALL[:-2])
    assert result.exit_code == 0, result.stderr
    assert "tokens" in result.stdout.lower()
    assert result.stdout.strip()


@pytest.mark.torch
def test_bench_peak_cpu(cli: Any, torch: Any, small_peak: None) -> None:
    data = run_json(cli, "bench", "--peak", "--device", "cpu", "--format", "json")
    [entry] = data["results"]
    result = entry["measurement"]  # DESIGN §5: bench results carry a measurement object
    assert result["peak_flops_per_s"] > 0
    assert result["device"].startswith("cpu")
    assert result["spec_peak_flops_per_s"] is None  # no datasheet number for a CPU, never another device's
    assert result["kernel_overhead_s"] > 0 and "tiny dependent kernels" in result["kernel_overhead_method"]
    from embedcalc.devices.resolve import load_device

    local = load_device("local")  # the overhead is cached with the peaks, with its method
    assert local.kernel_overhead_s is not None
    assert local.kernel_overhead_s.value == result["kernel_overhead_s"]
    assert local.kernel_overhead_s.note == result["kernel_overhead_method"]
    if result["gemm_half_rows"] is not None:  # a CPU: the rows at half rate, when the law could be fitted
        assert local.gemm_half_rows is not None and local.gemm_half_rows.value == result["gemm_half_rows"]
    assert "least squares" in result["gemm_rows_method"]
    # fitted above the GEMV rows, which the GEMV rate prices
    assert "r = 8, 16," in result["gemm_rows_method"]
    # the GEMV rate of the dtype measured, cached with how it was measured, read back as the time model reads it
    assert result["gemv_bytes_per_s"] > 0 and "F.linear of 1 to 4 fp32 rows" in result["gemv_method"]
    from embedcalc.devices.calibration import load_calibration

    assert len(local.gemv_bytes_per_s["fp32"].by_rows) == int(load_calibration().constants.gemv_max_rows)
    assert local.gemv_rate("fp32") == result["gemv_bytes_per_s"] and local.gemv_rate("bf16") is None
    assert local.gemv_bytes_per_s["fp32"].note == result["gemv_method"]


# --- bench: refusals -----------------------------------------------------------------------------------------------


@pytest.fixture
def no_run(torch: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail loudly if bench gets as far as building and running the model."""
    import embedcalc.modeling.benchmark as benchmark

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("run_benchmark was called: the model was allocated")

    monkeypatch.setattr(benchmark, "run_benchmark", refuse)


@pytest.mark.torch
def test_bench_refuses_what_cannot_fit(cli: Any, no_run: None) -> None:
    before, start = peak_rss(), time.perf_counter()
    result = cli("bench", "gpt3-175b", "--device", "cpu")
    assert result.exit_code == 4, (result.stderr, result.exception)
    assert time.perf_counter() - start < 60
    assert peak_rss() - before < 1 << 30
    err = " ".join(result.stderr.split())
    assert "predicted peak" in err
    assert "free" in err
    assert "--force" in err
    assert "even batch 1" in err  # 700 GB of weights fit at no batch size
    assert result.stdout == ""


@pytest.mark.torch
def test_bench_refusal_json_envelope(cli: Any, no_run: None) -> None:
    result = cli("bench", "gpt3-175b", "--device", "cpu", "--format", "json")
    assert result.exit_code == 4
    data = json.loads(result.stdout)
    assert data["status"] == "error"
    assert data["problems"][0]["code"] == "does_not_fit"


@pytest.mark.torch
def test_bench_refusal_hints_a_batch_size_that_fits(
    cli: Any, no_run: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import embedcalc.modeling.device as device

    free = 2 << 30  # pretend 2 GiB are free
    monkeypatch.setattr(device, "free_memory_bytes", lambda device: free)
    result = cli("bench", "gpt2", "--device", "cpu", "--batch-size", "64", "--seq-len", "1024")
    assert result.exit_code == 4
    err = " ".join(result.stderr.split())
    assert f"({free:,} bytes) free" in err

    # bench predicts for the model it builds (no dropout layers): weights + peak activations of one forward
    config = load_target("gpt2", ["dropout=0.0"]).config

    def predicted(batch: int) -> int:
        m = estimate_memory(config, Workload(batch_size=batch, seq_len=1024))
        return m.weights_bytes + m.activations_bytes

    assert f"({predicted(64):,} bytes)" in err
    hinted = int(err.split("--batch-size ")[1].split()[0])
    assert predicted(hinted) <= free < predicted(hinted + 1)  # the largest batch that fits
    assert "--seq-len" in err


@pytest.mark.torch
def test_bench_force_overrides_the_refusal(
    cli: Any, tiny: str, small_peak: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import embedcalc.modeling.device as device

    monkeypatch.setattr(device, "free_memory_bytes", lambda device: 1)
    refused = cli("bench", tiny, *BENCH_SMALL)
    assert refused.exit_code == 4
    assert "even batch 1" in " ".join(refused.stderr.split())
    forced = cli("bench", tiny, *BENCH_SMALL, "--force")
    assert forced.exit_code == 0, forced.stderr
    assert json.loads(forced.stdout)["status"] == "ok"


@pytest.mark.torch
def test_bench_cuda_without_cuda_is_exit_4(cli: Any, tiny: str, torch: Any) -> None:
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    result = cli("bench", tiny, "--device", "cuda")
    assert result.exit_code == 4
    assert "--device cuda" in result.stderr
    assert "--device cpu" in result.stderr


# --- process boundary: torch missing, Ctrl-C -----------------------------------------------------------------------

BLOCK_TORCH = textwrap.dedent(
    """
    import sys

    class NoTorch:
        def find_spec(self, name, path=None, target=None):
            if name == "torch" or name.startswith("torch."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, NoTorch())
    sys.argv = ["embedcalc", *sys.argv[1:]]
    from embedcalc.cli.app import main
    main()
    """
)


@pytest.mark.parametrize(
    "args", [["verify", "bert-base"], ["bench", "bert-base", "--device", "cpu"], ["bench", "--peak"]]
)
def test_torch_missing_is_exit_4_with_the_install_command(args: list[str]) -> None:
    proc = subprocess.run([sys.executable, "-c", BLOCK_TORCH, *args], capture_output=True, text=True,
                          env=cli_env(COLUMNS="200"), timeout=60, stdin=subprocess.DEVNULL)  # fmt: skip
    assert proc.returncode == 4, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "PyTorch is not installed" in proc.stderr
    assert "pip install" in proc.stderr
    assert proc.stdout == ""


def test_torch_missing_json_envelope() -> None:
    proc = subprocess.run([sys.executable, "-c", BLOCK_TORCH, "verify", "gpt2", "--format", "json"],
                          capture_output=True, text=True, env=cli_env(), timeout=60)  # fmt: skip
    assert proc.returncode == 4
    data = json.loads(proc.stdout)
    assert data["status"] == "error"
    assert data["problems"][0]["code"] == "no_torch"


ANNOUNCE_TIMING = textwrap.dedent(
    """
    import sys
    import embedcalc.modeling.benchmark as benchmark

    real = benchmark.time_steps

    def announced(*args, **kwargs):
        sys.stderr.write("TIMING-STARTED\\n")
        sys.stderr.flush()
        return real(*args, **kwargs)

    benchmark.time_steps = announced
    sys.argv = ["embedcalc", *sys.argv[1:]]
    from embedcalc.cli.app import main
    main()
    """
)


# slow (issue 14: the subprocess Ctrl-C runs are in the slow suite). In full runs (twice in clean-clone CI) the child
# did not answer the SIGINT within 60 s and kept timing. That is what happens every time the test run has inherited
# SIGINT ignored, as a job started with `&` by a non-interactive shell has: so does its child, which never sees a
# KeyboardInterrupt (sigint_as_in_a_terminal). "background" runs the test from a process that ignores SIGINT: it
# failed every time before the child was started with the terminal's disposition. Whatever happens, the child is
# killed before the test ends, so a failure cannot leave it burning the suite's CPU.
@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.parametrize("inherited", ["foreground", "background"])
def test_ctrl_c_while_timing_exits_130(torch: Any, tiny: str, inherited: str) -> None:
    if inherited == "background":
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            _ctrl_c_while_timing(tiny)
        finally:
            signal.signal(signal.SIGINT, previous)
    else:
        _ctrl_c_while_timing(tiny)


def _ctrl_c_while_timing(tiny: str) -> None:
    with sigint_as_in_a_terminal():
        proc = subprocess.Popen(
            [sys.executable, "-c", ANNOUNCE_TIMING, "bench", tiny, "--repeat", "100000", "--device", "cpu",
             "--seq-len", "32", "--format", "json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(), stdin=subprocess.DEVNULL,
        )  # fmt: skip
    killer = threading.Timer(90, proc.kill)  # never hang the suite
    killer.start()
    try:
        assert proc.stderr is not None
        seen = []
        for line in proc.stderr:
            seen.append(line)
            if "TIMING-STARTED" in line:
                break
        assert any("TIMING-STARTED" in line for line in seen), "".join(seen)
        time.sleep(0.5)  # in the page-in miniature's steps or the model's
        assert proc.poll() is None, "bench finished 100000 steps before the interrupt"
        proc.send_signal(signal.SIGINT)
        stdout, rest = proc.communicate(timeout=60)
    finally:
        killer.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stderr = "".join(seen) + rest
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert "interrupted" in stderr
    assert stdout == ""  # no half-written JSON
