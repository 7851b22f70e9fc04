"""The time model against published, measured runs (issue 20; /work/shared/time/published_runs.md and more).

Each run is an ``embedcalc analyze`` command as a user would write it, the figure its authors measured and
published, and whether the shipped calibration (``embedcalc/devices/time_calibration.json``) was fitted on it
(``fit``) or is judged on it (``held-out``). Offline: only shipped presets and ``benchmarks/configs/*.yaml``.

Prints each run's published and predicted figure, predicted / published, and the lower bound (the roofline at
peak, which must never be slower than the measurement), then the median |error| and the largest ratio separately
for fitted and held-out runs.

    python benchmarks/bench_published.py            # the table
    python benchmarks/bench_published.py --fit      # refit the fitted constants on the `fit` runs, rewrite the file
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from embedcalc.cli.app import app
from embedcalc.devices import calibration as cal_module

HERE = Path(__file__).resolve().parent
CONFIGS = HERE / "configs"
FITTED = ("gemm_fraction", "gemm_half_rows", "attention_fraction", "memory_fraction", "backward_fraction",
          "kernel_overhead_s")  # fmt: skip


@dataclass(frozen=True)
class Run:
    """One published, measured run."""

    id: str
    source: str
    args: tuple[str, ...]
    metric: (
        str  # days | device_hours | tokens_per_s | prefill_ms | batch_tokens_per_s | per_device_tokens_per_s
    )
    published: float
    role: str  # fit | held-out


def _gen(model: str, hardware: str, *extra: str) -> tuple[str, ...]:
    return ("analyze", model, "--hardware", hardware, *extra)


GPT_FAST = "pytorch-labs/gpt-fast README (commit 0f925b5), Benchmarks and Tensor Parallelism tables, A100-80GB, batch 1"


# gpt-fast's quantize.py: int8 is per output channel (one scale a row: a group as wide as the row), int4 in groups
# of 32 inputs (the README's "4-bit (G=32)")
_GPT_FAST_GROUPS = {"bf16": (), "int8": ("--quant-group-size", "65536"), "int4": ("--quant-group-size", "32")}


def _gpt_fast(run_id: str, model: str, tp: int, tokens_per_s: float, role: str, dtype: str = "bf16") -> Run:
    """A gpt-fast row: batch 1, a 5-token prompt, 200 new tokens on ``tp`` A100-80GB, bf16 or weight-only."""
    args = _gen(model, "a100-80gb", "--dtype", dtype, *_GPT_FAST_GROUPS[dtype], "--tp", str(tp), "--seq-len", "5",
                "--gen-tokens", "200")  # fmt: skip
    return Run(
        run_id,
        f"{GPT_FAST}: {model} {dtype} on {tp} GPU(s) {tokens_per_s} tokens/s",
        args,
        "tokens_per_s",
        tokens_per_s,
        role,
    )


AMD_PERF = (
    "AMD ROCm performance results page, AI inference, MI300X (docker rocm/vllm:rocm6.4.1_vllm_0.9.1_20250715, "
    "8 x MI300X 750 W; amd/Llama-3.1-*-Instruct-FP8-KV), https://www.amd.com/en/developer/resources/rocm-hub/"
    "dev-ai/performance-results.html"
)


def _amd(run_id: str, model: str, batch: int, gen: int, tokens_per_s: float, row: str) -> Run:
    """A row of AMD's MI300X vLLM tables: FP8 weights and KV cache, TP 8, 128-token prompts. A throughput row's
    "tokens/s" is read as vLLM benchmark_throughput's first figure, total (prompt + output) tokens/s, and given
    here as output tokens/s (× 2048 / 2176; were it output tokens/s already, the figure would be 6% higher); its
    prompts all fit in flight at once (max-num-seqs = prompts): a static batch."""
    args = _gen(model, "mi300x", "--dtype", "fp8", "--kv-dtype", "fp8", "--tp", "8", "--batch-size", str(batch),
                "--seq-len", "128", "--gen-tokens", str(gen))  # fmt: skip
    return Run(run_id, f"{AMD_PERF}: {row}", args, "batch_tokens_per_s", tokens_per_s, "held-out")


OCI = (
    "Oracle Cloud Infrastructure blog, 'Serving Llama 3.1 405B model with AMD Instinct MI300X Accelerators' "
    "(2024-10-10), latency table: vLLM benchmark_latency.py, Llama 3.1 405B FP8 on BM.GPU.MI300X.8 (TP 8), "
    "128 in / 128 out, https://blogs.oracle.com/cloud-infrastructure/post/serving-llama-31-405b-model-with-"
    "amd-mi300x-gpus"
)


def _oci(batch: int, seconds: float) -> Run:
    """A row of OCI's 405B MI300X latency table (four of its nine batch sizes, 1 to 256): the batch's end-to-end
    generate time, as output tokens/s."""
    args = _gen(str(CONFIGS / "llama-3.1-405b.yaml"), "mi300x", "--dtype", "fp8", "--tp", "8", "--batch-size",
                str(batch), "--seq-len", "128", "--gen-tokens", "128")  # fmt: skip
    label = f"{OCI}: batch {batch}, {seconds} s"
    return Run(f"OCI405-B{batch}", label, args, "batch_tokens_per_s", batch * 128 / seconds, "held-out")


TRT = "NVIDIA TensorRT-LLM performance table"
LLAMA2 = "Touvron et al. 2023, Llama 2 model card / paper Table 2 (A100-80GB GPU-hours)"
RUNS: tuple[Run, ...] = (
    Run("T1", "Narayanan et al. 2021 (SC21) §5.1: GPT-3 175B on 1024 A100-80GB, 34 days",
        _gen("gpt3-175b", "a100-80gb", "--mode", "training", "--dtype", "bf16", "--seq-len", "2048", "--tp", "8",
             "--pp", "8", "--dp", "16", "--batch-size", "1", "--global-batch", "1536", "--recompute", "full",
             "--train-tokens", "300B"), "days", 34, "fit"),
    Run("T4", LLAMA2 + ", 7B: 184,320",
        _gen("llama-2-7b", "a100-80gb", "--mode", "training", "--dtype", "bf16", "--seq-len", "4096", "--dp", "256",
             "--zero", "3", "--batch-size", "4", "--global-batch", "1024", "--train-tokens", "2T"),
        "device_hours", 184_320, "fit"),
    _gpt_fast("I1", "llama-2-7b", 1, 104.9, "fit"),
    _gpt_fast("I7B-TP8", "llama-2-7b", 8, 328.43, "fit"),
    Run("P1", TRT + " (v0.5): LLaMA 7B FP16, batch 1, input 128, first-token latency 16 ms",
        _gen("llama-2-7b", "a100-80gb", "--dtype", "fp16", "--seq-len", "128", "--gen-tokens", "1"),
        "prefill_ms", 16, "fit"),
    Run("P2", TRT + " (v0.5): LLaMA 7B FP16, batch 1, input 2048, first-token latency 133 ms",
        _gen("llama-2-7b", "a100-80gb", "--dtype", "fp16", "--seq-len", "2048", "--gen-tokens", "1"),
        "prefill_ms", 133, "fit"),
    Run("B1", TRT + " (v0.6.1): LLaMA 7B FP16, batch 384, 128 in / 128 out, 5,586 output tokens/s",
        _gen("llama-2-7b", "a100-80gb", "--dtype", "fp16", "--batch-size", "384", "--seq-len", "128",
             "--gen-tokens", "128"), "batch_tokens_per_s", 5586, "fit"),
    # --- judged on, not fitted on
    Run("T3", "Chowdhery et al. 2022 (PaLM) §4, App. B: 540B on TPU v4, 8,404,992 chip-hours",
        _gen(str(CONFIGS / "palm-540b.yaml"), "tpu-v4", "--mode", "training", "--dtype", "bf16", "--seq-len", "2048",
             "--tp", "12", "--dp", "512", "--batch-size", "1", "--global-batch", "2048", "--recompute", "full",
             "--train-tokens", "780B"), "device_hours", 8_404_992, "held-out"),
    Run("T5", LLAMA2 + ", 13B: 368,640",
        _gen(str(CONFIGS / "llama-2-13b.yaml"), "a100-80gb", "--mode", "training", "--dtype", "bf16", "--seq-len",
             "4096", "--dp", "256", "--zero", "3", "--batch-size", "4", "--global-batch", "1024",
             "--train-tokens", "2T"), "device_hours", 368_640, "held-out"),
    Run("T6", LLAMA2 + ", 70B: 1,720,320",
        _gen("llama-2-70b", "a100-80gb", "--mode", "training", "--dtype", "bf16", "--seq-len", "4096", "--tp", "8",
             "--dp", "128", "--zero", "1", "--batch-size", "1", "--global-batch", "1024", "--train-tokens", "2T"),
        "device_hours", 1_720_320, "held-out"),
    Run("T13", "karpathy/nanoGPT README: GPT-2 124M on 8 x A100-40GB, about 4 days for 300B tokens",
        _gen("gpt2", "a100-40gb", "--mode", "training", "--dtype", "bf16", "--seq-len", "1024", "--dp", "8",
             "--batch-size", "12", "--global-batch", "480", "--train-tokens", "300B"), "days", 4, "held-out"),
    _gpt_fast("I4", "llama-2-70b", 2, 21.32, "held-out"),
    _gpt_fast("I7B-TP2", "llama-2-7b", 2, 168.84, "held-out"),
    _gpt_fast("I7B-TP4", "llama-2-7b", 4, 254.02, "held-out"),
    _gpt_fast("I70B-TP4", "llama-2-70b", 4, 38.01, "held-out"),
    _gpt_fast("I70B-TP8", "llama-2-70b", 8, 62.50, "held-out"),
    # weight-only int8 / int4 decode (issue 35: bound by the bytes a GEMV reads, dequantization its own cost)
    _gpt_fast("I7B-INT8", "llama-2-7b", 1, 155.58, "held-out", "int8"),
    _gpt_fast("I7B-INT4", "llama-2-7b", 1, 196.80, "held-out", "int4"),
    _gpt_fast("I70B-INT8", "llama-2-70b", 1, 19.13, "held-out", "int8"),
    _gpt_fast("I70B-INT4", "llama-2-70b", 1, 25.25, "held-out", "int4"),
    _gpt_fast("I70B-TP8-INT8", "llama-2-70b", 8, 80.44, "held-out", "int8"),
    _gpt_fast("I70B-TP8-INT4", "llama-2-70b", 8, 90.77, "held-out", "int4"),
    Run("I-GCD-INT8", "pytorch-labs/gpt-fast README (commit 0f925b5), AMD table: Llama-2-7B int8 on one MI250X "
        "GCD 101.86 tokens/s",
        _gen("llama-2-7b", "mi250x-gcd", "--dtype", "int8", "--quant-group-size", "65536", "--seq-len", "5",
             "--gen-tokens", "200"), "tokens_per_s", 101.86, "held-out"),
    Run("I-GCD", "pytorch-labs/gpt-fast README (commit 0f925b5), AMD table: Llama-2-7B on one MI250X GCD "
        "76.33 tokens/s",
        _gen("llama-2-7b", "mi250x-gcd", "--dtype", "bf16", "--seq-len", "5", "--gen-tokens", "200"),
        "tokens_per_s", 76.33, "held-out"),
    Run("B2", TRT + " (v0.6.1): LLaMA 7B FP16, batch 52, 2048 in / 128 out, 591 output tokens/s",
        _gen("llama-2-7b", "a100-80gb", "--dtype", "fp16", "--batch-size", "52", "--seq-len", "2048",
             "--gen-tokens", "128"), "batch_tokens_per_s", 591, "held-out"),
    Run("M1", "MLPerf Inference v4.0 closed, NVIDIA DGX H100 (TensorRT-LLM, FP8): Llama 2 70B Offline 21,805.8 "
        "tokens/s on 8 GPUs, as TP 2 pairs at batch 256",
        _gen("llama-2-70b", "h100-sxm", "--dtype", "fp8", "--kv-dtype", "fp8", "--tp", "2", "--batch-size", "256",
             "--seq-len", "256", "--gen-tokens", "294"),
        "per_device_tokens_per_s", 2725.7, "held-out"),
    # AMD Instinct MI300X (issue 35, item 6): vLLM on ROCm, TP 8 over the xGMI mesh, FP8 weights
    _amd("A70-B1", "llama-3.1-70b", 1, 2048, 2048 / 17.236, "latency table: Llama 3.1 70B FP8 TP8 batch 1, "
         "128 in / 2048 out, 17.236 s"),
    _amd("A70-THR", "llama-3.1-70b", 3200, 2048, 12_638.9 * 2048 / 2176, "throughput table: Llama 3.1 70B FP8 "
         "TP8, 128 in / 2048 out, 3200 prompts at max-num-seqs 3200, 12,638.9 tokens/s"),
    _amd("A405-THR", str(CONFIGS / "llama-3.1-405b.yaml"), 1500, 2048, 3_912.8 * 2048 / 2176, "throughput table: "
         "Llama 3.1 405B FP8 TP8, 128 in / 2048 out, 1500 prompts at max-num-seqs 1500, 3,912.8 tokens/s"),
    *(_oci(batch, seconds) for batch, seconds in ((1, 3.530), (8, 3.974), (64, 6.919), (256, 17.750))),
)  # fmt: skip


def _option(args: tuple[str, ...], flag: str, default: int) -> int:
    return int(args[args.index(flag) + 1]) if flag in args else default


def figure(time: dict[str, Any], run: Run) -> float:
    """The run's metric from a ``time`` JSON object (expected, or its ``lower_bound``)."""
    gen = _option(run.args, "--gen-tokens", 0)
    batch = _option(run.args, "--batch-size", 1)
    if run.metric == "days":
        return float(time["train"]["wall_s"]) / 86400
    if run.metric == "device_hours":
        return float(time["train"]["device_hours"])
    if run.metric == "prefill_ms":
        return float(time["prefill_s"]) * 1e3
    # prefill included, as the runs measured it
    tokens_per_s = batch * gen / float(time["total_generation_s"])
    if run.metric == "per_device_tokens_per_s":
        return tokens_per_s / _option(run.args, "--tp", 1)
    return tokens_per_s


def predict(run: Run) -> tuple[float, float]:
    """(expected, lower bound) of ``run`` from ``embedcalc analyze --format json``."""
    result = CliRunner().invoke(app, [*run.args, "--format", "json"])
    if result.exit_code != 0:
        raise RuntimeError(f"{run.id}: exit {result.exit_code}: {result.output[-400:]}")
    time = json.loads(result.stdout)["results"][0]["time"]
    return figure(time, run), figure(time["lower_bound"], run)


def _higher_is_faster(run: Run) -> bool:
    return run.metric.endswith("tokens_per_s")


def ratio(run: Run, predicted: float) -> float:
    """predicted / published, as the time it stands for: > 1 when the prediction is slower than measured."""
    return run.published / predicted if _higher_is_faster(run) else predicted / run.published


def evaluate(runs: tuple[Run, ...]) -> list[tuple[Run, float, float, float]]:
    return [(run, *(p := predict(run)), ratio(run, p[0])) for run in runs]


def summary(rows: list[tuple[Run, float, float, float]], role: str) -> tuple[float, float]:
    """(median |time ratio − 1|, the largest max(r, 1/r)) of the runs of ``role``."""
    chosen = [r for run, _, _, r in rows if run.role == role]
    return statistics.median(abs(r - 1) for r in chosen), max(max(r, 1 / r) for r in chosen)


def print_table(rows: list[tuple[Run, float, float, float]]) -> None:
    print(f"{'run':<9} {'role':<8} {'metric':<24} {'published':>12} {'predicted':>12} {'time ratio':>10} "
          f"{'lower bound':>12}  bound ok")  # fmt: skip
    for run, predicted, bound, r in rows:
        ok = ratio(run, bound) <= 1.0
        print(f"{run.id:<9} {run.role:<8} {run.metric:<24} {run.published:>12,.4g} {predicted:>12,.4g} {r:>10.3f} "
              f"{bound:>12,.4g}  {'yes' if ok else 'NO'}")  # fmt: skip
    for role in ("fit", "held-out"):
        median, worst = summary(rows, role)
        print(f"{role:>8}: median |error| {100 * median:.1f}%, worst {worst:.2f}x "
              f"({sum(run.role == role for run, *_ in rows)} runs)")  # fmt: skip


_SHIPPED = cal_module.CALIBRATION_PATH


def _set(values: dict[str, float]) -> None:
    """Use ``values`` for the calibration's constants in this process (the fit): a trial file the loader reads."""
    data = json.loads(_SHIPPED.read_text(encoding="utf-8"))
    for name, value in values.items():
        data["constants"][name]["value"] = value
    trial = Path(tempfile.gettempdir()) / "embedcalc_trial_calibration.json"
    trial.write_text(json.dumps(data), encoding="utf-8")
    cal_module.CALIBRATION_PATH = trial
    cal_module.load_calibration.cache_clear()


def fit() -> dict[str, float]:
    """Coordinate search over the fitted constants in log space, minimising Σ log² (time ratio) on the fit runs."""
    fitting = tuple(r for r in RUNS if r.role == "fit")
    values = {k: getattr(cal_module.load_calibration().constants, k) for k in FITTED}

    def loss(trial: dict[str, float]) -> float:
        _set(trial)
        return sum(math.log(r) ** 2 for *_, r in evaluate(fitting))

    best = loss(values)
    for step in (1.4, 1.15, 1.05):
        for name in FITTED:
            for factor in (step, 1 / step):
                trial = dict(values, **{name: values[name] * factor})
                if name.endswith("fraction") and trial[name] > 1:
                    continue
                trial_loss = loss(trial)
                if trial_loss < best:
                    best, values = trial_loss, trial
                    print(f"  {name} = {values[name]:.4g}: loss {best:.4f}", file=sys.stderr)
    return values


def write_calibration(values: dict[str, float], rows: list[tuple[Run, float, float, float]]) -> None:
    data = json.loads(_SHIPPED.read_text(encoding="utf-8"))
    for name, value in values.items():
        data["constants"][name]["value"] = value
        data["constants"][name]["source"] = (
            "fitted by benchmarks/bench_published.py --fit on the runs in fitted_on"
        )
    median, worst = summary(rows, "held-out")
    data["fitted_on"] = [run.id for run in RUNS if run.role == "fit"]
    data["held_out"] = [run.id for run in RUNS if run.role == "held-out"]
    data["held_out_median_error"] = round(median, 4)
    data["held_out_max_ratio"] = round(worst, 3)
    _SHIPPED.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fit", action="store_true", help="refit the fitted constants and rewrite the file")
    args = parser.parse_args()
    if args.fit:
        values = {name: float(f"{value:.4g}") for name, value in fit().items()}  # as the file stores them
        _set(values)
        rows = evaluate(RUNS)
        write_calibration(values, rows)
    else:
        rows = evaluate(RUNS)
    print_table(rows)


if __name__ == "__main__":
    main()
