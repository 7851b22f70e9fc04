"""Where ``moe_dispatch_bytes`` comes from (``embedcalc/devices/time_calibration.json``): TensorRT-LLM's measured MoE
layer latencies against the time model's MoE layer, without and with the dispatch term.

The measurements are NVIDIA aiconfigurator's kernel database (``pip install aiconfigurator``; 0.12.0 was used):
``aiconfigurator_core/systems/data/<system>/moe/trtllm/<version>/moe_perf.parquet``, one row per MoE layer shape
(hidden, expert width, top-k, experts), MoE TP and EP degrees, token count, dtype and routing distribution. Rows
used: balanced routing, 16 tokens or more, every expert count divisible by EP.

The model of one such layer on one rank, from the calibration and the catalogue device: the expert GEMMs at
max(FLOPs / (peak × ``gemm_fraction`` at the rows each reached expert receives; on FP4 tensor cores also
× ``fp4_gemm_fraction``), reached experts' weight bytes /
(bandwidth × ``memory_fraction``)), with FLOPs 6 × pairs × hidden × width / TP and pairs = tokens × top-k / EP, plus
the layer's seven kernels at ``kernel_overhead_s`` (router, top-k, two permutations, three expert kernels), plus the
dispatch: ``beta`` × pairs × hidden bytes at the streaming rate. ``beta`` is fitted by least squares on the rows of
1,024 tokens or more of the fit sets (H100 and H200, fp8 and bf16); the others (B200) are only judged.

    /path/to/venv-with-aiconfigurator/bin/python benchmarks/fit_moe_dispatch.py
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from embedcalc.analysis.roofline.traffic import experts_reached
from embedcalc.analysis.time.expected import device_constants
from embedcalc.analysis.time.model import gemm_fraction
from embedcalc.devices.calibration import load_calibration
from embedcalc.devices.resolve import load_device

# (aiconfigurator system, its dtype name) -> (embedcalc device, peak dtype, weight bytes per element); fit or judged
SETS = {
    ("h200_sxm", "fp8"): ("h200", "fp8", 1.0, True),
    ("h100_sxm", "fp8"): ("h100-sxm", "fp8", 1.0, True),
    ("h200_sxm", "bfloat16"): ("h200", "bf16", 2.0, True),
    ("h100_sxm", "bfloat16"): ("h100-sxm", "bf16", 2.0, True),
    ("b200_sxm", "fp8"): ("b200", "fp8", 1.0, False),
    ("b200_sxm", "nvfp4"): ("b200", "fp4", 0.5625, False),
    ("b200_sxm", "bfloat16"): ("b200", "bf16", 2.0, False),
}
MOE_KERNELS = (
    7  # analysis/time/model.kernels_per_layer: router, top-k, two permutations, three expert kernels
)


def _rows(system: str, dtype: str) -> list[tuple[float, float, float, int]]:
    """(measured s, modelled s without the dispatch, pairs x hidden / streaming rate, tokens) per measured layer."""
    import aiconfigurator_core  # type: ignore[import-not-found]
    import pandas as pd  # type: ignore[import-untyped]

    device_name, peak_dtype, weight_bytes, _ = SETS[(system, dtype)]
    device = load_device(device_name)
    c = device_constants(load_calibration().constants, device, inference=True)
    peak = device.peak(peak_dtype)  # type: ignore[arg-type]
    assert peak is not None, f"{device_name} has no {peak_dtype} peak"
    if peak_dtype == "fp4":  # FP4 tensor cores: fp4_gemm_fraction of the GEMM fraction, as the time model
        peak *= c.fp4_gemm_fraction
    bandwidth = device.bandwidth * c.memory_fraction
    root = Path(aiconfigurator_core.__file__).parent / "systems" / "data" / system / "moe" / "trtllm"
    frames = [pd.read_parquet(p) for p in sorted(root.glob("*/moe_perf.parquet"))]
    keys = ["num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size", "moe_ep_size"]
    data = pd.concat(frames).drop_duplicates([*keys, "kernel_source", "moe_dtype", "distribution"])
    data = data[(data.moe_dtype == dtype) & (data.distribution == "balanced") & (data.num_tokens >= 16)]
    out = []
    for r in data.itertuples():
        tokens, hidden, width, k, experts = r.num_tokens, r.hidden_size, r.inter_size, r.topk, r.num_experts
        tp, ep = r.moe_tp_size, r.moe_ep_size
        if experts % ep:
            continue
        reached = experts_reached(experts, k, tokens)
        pairs = tokens * k / ep
        compute = 6 * pairs * hidden * width / tp / (peak * gemm_fraction(tokens * k / reached, c))
        weights = reached / ep * 3 * hidden * width / tp * weight_bytes / bandwidth
        modelled = max(compute, weights) + MOE_KERNELS * c.kernel_overhead_s
        out.append((r.latency * 1e-3, modelled, pairs * hidden / bandwidth, tokens))
    return out


def _median(values: list[float]) -> float:
    s = sorted(values)
    return s[len(s) // 2] if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2


def main() -> None:
    try:
        import aiconfigurator_core  # noqa: F401
    except ImportError:
        print("aiconfigurator is not installed (pip install aiconfigurator): its kernel database is the data")
        return
    rows = {key: _rows(*key) for key in SETS}
    # least squares of measured - modelled = beta x (pairs x hidden / streaming rate) on the fit sets' rows of
    # 1,024 tokens or more, each weighted by 1 / measured (relative errors)
    big = [(t, m, x) for key, rs in rows.items() if SETS[key][3] for t, m, x, n in rs if n >= 1024]
    num = sum((t - m) * x / t**2 for t, m, x in big)
    den = sum(x * x / t**2 for t, m, x in big)
    fitted = num / den
    shipped = load_calibration().constants.moe_dispatch_bytes
    print(f"beta fitted on the H100/H200 sets: {fitted:.1f} bytes; shipped moe_dispatch_bytes: {shipped:g}")
    print(
        "measured / modelled, median (p10-p90), without and with the dispatch; all rows, then those of 1,024+ tokens"
    )
    for key, rs in rows.items():
        role = "fit" if SETS[key][3] else "judged"
        for label, part in (("all", rs), ("1,024+", [r for r in rs if r[3] >= 1024])):
            without = sorted(t / m for t, m, _, _ in part)
            with_ = sorted(t / (m + shipped * x) for t, m, x, _ in part)

            def spread(v: list[float]) -> str:
                return f"{_median(v):.2f} ({v[len(v) // 10]:.2f}-{v[9 * len(v) // 10]:.2f})"

            print(
                f"{key[0]:<10} {key[1]:<9} {role:<7} {label:<7} {len(part):>6} layers: without {spread(without)}, "
                f"with {spread(with_)}"
            )
    assert math.isfinite(fitted)


if __name__ == "__main__":
    main()
