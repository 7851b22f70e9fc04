"""``plan``'s maximum serving throughput against TensorRT-LLM's published performance overview (issue 35), none of
it fitted on.

Source: NVIDIA TensorRT-LLM, ``docs/source/performance/perf-overview.md`` (github.com/NVIDIA/TensorRT-LLM at
commit 00f37686, the v1.0 tables), "Throughput Measurements": ``trtllm-bench throughput`` with the PyTorch backend,
a local client feeding requests at an infinite rate (no delay between them), uniform lengths (input and output
standard deviation 0), 1,000 to 30,000 requests per length pair, CUDA graphs padded up to batch 8,192, the KV cache
at 0.90–0.95 of the memory left by the weights; ModelOpt's FP8 checkpoints on H100 SXM 80GB and H200 SXM 141GB, its
NVFP4 checkpoints on B200 180GB and GB200; the figure is the total output tokens per second of the deployment. The
rows here are the dense Llama tables (3.1 8B, 3.3 70B = the llama-3.1-70b shape, 3.1 405B) and the MoE tables
(Qwen3-30B-A3B, Qwen3-235B-A22B, Llama 4 Scout and Maverick: their published config.json files, the shapes NVIDIA's
aiconfigurator ships as ``model_configs``). The MoE tables' command adds ``--ep`` and attention data parallelism
with degrees the page does not state; their rows are the TP layout the table's header names (every rank a slice of
every expert), so where the engine ran expert parallelism the prediction is of another layout (``plan``'s DP x EP
row of the same GPUs is faster for Qwen3-235B on 8 H200s: 1.2-1.8x the published figure, the TP row 0.5-1.1x).

Each row is the ``plan`` row of its layout (TP over the table's GPUs, one replica) at a closed loop of 2,048
requests in flight (more than any engine here runs at once: the queue never empties, as at an infinite rate) with
TensorRT-LLM's scheduler defaults: 8,192 tokens per step, its capacity scheduler's KV reservation
(GUARANTEED_NO_EVICT: ``kv_admission="reserve"``), at most 2,048 sequences; an FP8 KV cache (ModelOpt's checkpoints
quantize it). Prints each row's published and predicted tokens/s and published / predicted as a time ratio
(> 1: the prediction is slower than the run), then per device and overall the median |error| and how many rows
are within 1.5×.

    python benchmarks/bench_throughput.py
"""

from __future__ import annotations

import time
from pathlib import Path

from judge import summary, tp_row

import embedcalc

HERE = Path(__file__).resolve().parent
LLAMA_405B = str(HERE / "configs" / "llama-3.1-405b.yaml")
QWEN3_235B = str(HERE / "configs" / "qwen3-235b-a22b.json")
SCOUT = str(HERE.parent / "tests" / "fixtures" / "hf" / "llama-4-scout-17b-16e.json")
MAVERICK = str(HERE / "configs" / "llama-4-maverick-17b-128e.json")
SOURCE = "TensorRT-LLM perf-overview.md (commit 00f37686), trtllm-bench throughput, PyTorch backend"
LENGTHS = ("128/128", "128/2048", "128/4096", "500/2000", "1000/1000", "1000/2000", "2048/128", "2048/2048",
           "5000/500", "20000/2000")  # fmt: skip
# (model, device, TP, dtype) -> total output tokens/s for each of LENGTHS (None: not in the table)
TABLES: dict[tuple[str, str, int, str], tuple[int | None, ...]] = {
    ("llama-3.1-8b", "h200", 1, "fp8"): (27911, 26221, 18027, 20770, 17744, 16828, 3538, 12194, 3902, 1804),
    ("llama-3.1-8b", "h100-sxm", 1, "fp8"): (28312, 22714, 14325, 17660, 15220, 13899, 3450, 9305, 3459, 1351),
    ("llama-3.1-70b", "b200", 1, "nvfp4"): (11147, 9922, 6831, 7762, 7007, 6271, 1339, 4783, 1459, 665),
    ("llama-3.1-70b", "gb200", 1, "nvfp4"): (12189, 11309, 7849, 9028, 7326, 6513, 1450, 5646, 1602, 755),
    ("llama-3.1-70b", "h200", 1, "fp8"): (3803, 4336, 2872, 3666, 2909, 2994, 442, 2003, 566, 283),
    ("llama-3.1-70b", "h100-sxm", 2, "fp8"): (6378, 6651, 4199, 5222, 4205, 4146, 762, 3082, 898, 437),
    (LLAMA_405B, "b200", 4, "nvfp4"): (6281, 8020, 6345, 6244, 5209, 4933, 749, 4212, 1048, 672),
    (LLAMA_405B, "gb200", 4, "nvfp4"): (6740, 8151, 6608, 6540, 5389, 5135, 797, 4407, 1112, 739),
    (LLAMA_405B, "h200", 8, "fp8"): (3814, 5348, 4741, 4724, 3330, 3722, 456, 2948, 650, 505),
    (LLAMA_405B, "h100-sxm", 8, "fp8"): (3627, 4340, 3116, 3994, 2919, 2895, 453, 2296, 610, 345),
    ("qwen3-30b-a3b", "b200", 1, "nvfp4"): (39827, 37844, 24953, 27817, 25828, 22051, 6251, 17554, 6142, 2944),
    ("qwen3-30b-a3b", "gb200", 1, "nvfp4"): (24107, 31311, 26337, 20604, 17481, 17177, 6595, 14719, 5908, 3203),
    (QWEN3_235B, "b200", 8, "nvfp4"): (63362, 66057, 39496, 57117, 42391, 34105, 7329, 26854, 8190, 4453),
    (QWEN3_235B, "h200", 8, "fp8"): (30429, 42821, 26852, 28026, 23789, 22061, 3331, 16672, 3623, 1876),
    (QWEN3_235B, "h100-sxm", 8, "fp8"): (None, 19658, 12447, 18351, 14898, 15136, None, 9924, 3225, None),
    (SCOUT, "b200", 1, "nvfp4"): (25342, 14699, 8932, 11977, 10591, 9356, 3137, 7152, 2937, 1644),
    (SCOUT, "gb200", 1, "nvfp4"): (19954, 15238, 9556, 11795, 7738, 8581, 3295, 7464, 3107, 1767),
    (SCOUT, "h200", 4, "fp8"): (30354, 34316, 21332, 24630, 21636, 18499, 3699, 14949, 4605, 2105),
    (SCOUT, "h100-sxm", 4, "fp8"): (None, 15130, 8603, 12399, 12129, 9838, 3253, 7972, 3342, None),
    (MAVERICK, "b200", 8, "nvfp4"): (124323, 112676, 68170, None, 79617, 63766, 18088, 52195, None, 12678),
    (MAVERICK, "h200", 8, "fp8"): (63994, 40572, 24616, 37835, 31782, 34734, 7307, 20957, 8456, 4106),
    (MAVERICK, "h100-sxm", 8, "fp8"): (None, 10829, 6744, 10108, 9677, 9151, None, 6916, 3457, None),
}  # fmt: skip
MOE = {"qwen3-30b-a3b", QWEN3_235B, SCOUT, MAVERICK}
IN_FLIGHT = 2048


def predict(model: str, device: str, tp: int, dtype: str, prompt: int, output: int) -> float:
    """The plan row's output tokens/s for TP ``tp`` on ``device`` (module docstring)."""
    result = embedcalc.plan(model, hardware=device, dtype=dtype, kv_dtype="fp8", seq_len=prompt, gen_tokens=output,
                            concurrency=IN_FLIGHT, max_devices=tp, kv_admission="reserve", max_num_seqs=IN_FLIGHT,
                            max_num_batched_tokens=8192)  # fmt: skip
    row = tp_row(result, tp)
    assert row.times is not None, row.reasons
    return row.times.tokens_per_s


def main() -> None:
    print(f"Source: {SOURCE}")
    print(f"{'model':<14} {'device':<9} {'TP':>2} {'dtype':<6} {'in/out':<11} {'published':>10} {'predicted':>10} "
          f"{'time ratio':>10}")  # fmt: skip
    by_device: dict[str, list[float]] = {}
    started = time.perf_counter()
    for (model, device, tp, dtype), figures in TABLES.items():
        for lengths, published in zip(LENGTHS, figures, strict=True):
            if published is None:
                continue
            prompt, output = map(int, lengths.split("/"))
            predicted = predict(model, device, tp, dtype, prompt, output)
            ratio = published / predicted
            by_device.setdefault(f"{device} MoE" if model in MOE else device, []).append(ratio)
            name = Path(model).stem[:14] if model.endswith((".yaml", ".json")) else model
            print(f"{name:<14} {device:<9} {tp:>2} {dtype:<6} {lengths:<11} {published:>10,} {predicted:>10,.0f} "
                  f"{ratio:>10.3f}")  # fmt: skip
    for device, ratios in by_device.items():
        print(summary(device, ratios, 10))
    dense = [r for device, ratios in by_device.items() if not device.endswith("MoE") for r in ratios]
    everything = [r for ratios in by_device.values() for r in ratios]
    print(summary("dense", dense, 10))
    print(summary("all", everything, 10) + f"; planned in {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
