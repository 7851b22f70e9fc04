"""Where ``fp4_gemm_fraction`` comes from (``embedcalc/devices/time_calibration.json``): how much of the FP4 peak
TensorRT-LLM's NVFP4 GEMMs reach, against how much of the bf16 peak its bf16 GEMMs reach, on the same shapes.

The measurements are NVIDIA aiconfigurator's kernel database (``pip install aiconfigurator``; 0.12.0 was used):
``aiconfigurator_core/systems/data/<system>/gemm/trtllm/<version>/gemm_perf.parquet``, one row per GEMM (M, N, K,
dtype) as TensorRT-LLM runs it (the nvfp4 op quantizes its input activations to NVFP4 itself). For every shape
measured in both dtypes with M >= 1,024 and N, K >= 4,096 (large GEMMs: the rows-dependence of the model's
``gemm_fraction`` is saturated there), the achieved fraction of each dtype's dense datasheet peak (the catalogue's
B200 / GB200 figures) is computed, and the constant is the median of their ratio, FP4 over bf16. The FP8 ratio is
printed beside it for information: it is not applied (Hopper's FP8 end-to-end rows are within 6-7% without it).

    /path/to/venv-with-aiconfigurator/bin/python benchmarks/fit_fp4_gemm.py
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from embedcalc.devices.calibration import load_calibration
from embedcalc.devices.resolve import load_device

SYSTEMS = {"b200_sxm": "b200", "gb200": "gb200"}  # aiconfigurator system -> embedcalc device
DTYPES = {"bfloat16": "bf16", "fp8": "fp8", "nvfp4": "fp4"}  # aiconfigurator dtype -> catalogue peak


def ratios(system: str, device: str) -> dict[str, list[float]]:
    """Per large shape measured in every dtype: achieved fraction of the dtype's peak over bf16's."""
    import aiconfigurator_core  # type: ignore[import-not-found]
    import pandas as pd  # type: ignore[import-untyped]

    root = Path(aiconfigurator_core.__file__).parent / "systems" / "data" / system / "gemm" / "trtllm"
    table = pd.read_parquet(sorted(root.glob("*/gemm_perf.parquet"))[-1])
    best = table.groupby(["gemm_dtype", "m", "n", "k"]).latency.min()  # ms
    peaks = {name: load_device(device).peak(peak) for name, peak in DTYPES.items()}
    out: dict[str, list[float]] = {"fp8": [], "nvfp4": []}
    shapes = {s[1:] for s in best.index if s[1] >= 1024 and s[2] >= 4096 and s[3] >= 4096}
    for m, n, k in sorted(shapes):
        keys = {dtype: (dtype, m, n, k) for dtype in DTYPES}
        if not all(key in best.index for key in keys.values()):
            continue
        achieved = {dtype: 2 * m * n * k / (best[key] / 1e3) / peaks[dtype] for dtype, key in keys.items()}
        for dtype in out:
            out[dtype].append(achieved[dtype] / achieved["bfloat16"])
    return out


def main() -> None:
    everything: list[float] = []
    for system, device in SYSTEMS.items():
        r = ratios(system, device)
        fp4, fp8 = r["nvfp4"], r["fp8"]
        deciles = statistics.quantiles(fp4, n=10)
        print(f"{system:<9} {len(fp4):>5} shapes: nvfp4 / bf16 fraction median {statistics.median(fp4):.3f} "
              f"(p10-p90 {deciles[0]:.2f}-{deciles[-1]:.2f}); fp8 / bf16 {statistics.median(fp8):.3f}")  # fmt: skip
        everything += fp4
    print(f"all: {statistics.median(everything):.3f}; shipped fp4_gemm_fraction: "
          f"{load_calibration().constants.fp4_gemm_fraction:g}")  # fmt: skip


if __name__ == "__main__":
    main()
