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
quantize it).

DP x EP (``DP_EP``): DeepSeek-R1's maximum-throughput runs with attention data parallelism and expert parallelism 8
on one node, from TensorRT-LLM's ``docs/source/blogs/Best_perf_practice_on_DeepSeek-R1_in_TensorRT-LLM.md`` (commit
01c4ece9; f0c873f5 has the same commands and figures): ``trtllm-bench throughput`` with ``--tp 8 --ep 8`` and
``enable_attention_dp: true`` (every rank the whole attention, dense layers and shared expert, its own requests and
KV cache, 32 of the 256 routed experts), no MTP (the blog: "max-throughput ... does not use MTP"), CUDA graphs,
``--concurrency`` requests kept in flight over the 8 ranks, ``--max_batch_size`` and ``--max_num_tokens`` per rank.
Three runs: 8 B200 with nvidia/DeepSeek-R1-0528-FP4 (``kv_cache_dtype: fp8``), 8 B200 with nvidia/DeepSeek-R1-FP4
("FP16 KV cache", here bf16: the same bytes), both TensorRT-LLM commit b6261862, and 8 H200 with
deepseek-ai/DeepSeek-R1 (DeepSeek's block FP8); the figure is the run's "Total Output Throughput" (its "Per GPU
Output Throughput" × 8). Each is the ``plan`` row DP 8 · EP 8 (:func:`judge.ep_row`;
``embedcalc/analysis/plan/expert_parallel.py``) of the ``deepseek-v3`` preset (DeepSeek-R1 has V3's shape; the MTP
module is not counted, as the runs do not use it) at a closed loop of the run's concurrency, its per-rank batch and
token limits, KV reserved. Where the page is silent: the H200 run's KV dtype (its command sets none and DeepSeek's
checkpoint quantizes no KV cache: the engine's ``auto`` is the model's bf16); the R1-0528 run's lengths (its section
names no dataset: 1,042 input and 2,048 output tokens are what its own report gives, (total token − output
throughput) / request throughput and output / request throughput; the other two runs' reports give exactly 1,024
and 2,048, their stated ISL/OSL); the FP4 checkpoints quantize the MoE layers to FP4 (tech blog 3, "Precision
strategy") while the plan runs one dtype (nvfp4) throughout; the plan measures the steady state, the runs count
their ramp and tail too (16 waves of the concurrency on B200, 5 on H200: their mean request latency × the waves is
within 2.2% of their total time, so this moves little). The blog's min-latency runs are left out: their layout is
TP 8 with EP 2 or 4 (no attention DP), at batch 1 with MTP whose acceptance on the blog's real dataset is not
stated. Tech blog 3's "4600 TPS/GPU on ISL/OSL 1K/2K" is the rounded FP16-KV run above, not another figure; the
perf overview (commit 00f37686) has no DeepSeek table (it links the blog).

Stated layouts (``STATED``, held out: printed after the rest with summary lines of its own): a later revision of the
same page (its "Performance Summary - All Networks": output tokens/s PER GPU, the ``Per GPU Output Throughput`` of
``trtllm-bench``, each column naming its layout). Its commit is unknown here (the repository's snapshot is too large
to fetch; the text was read from a stored copy of the file): it is the revision with ``--config $llm_options``,
per-model ``llm_options.yml`` (DeepSeek R1: ``kv_cache_config: dtype: fp8``; GPT-OSS: ``dtype: fp8  # Hopper: use
auto``), Llama 3.3 70B on H200 at TP 2 and Maverick and H100 columns still present (an earlier revision had Llama
3.3 at TP 1 on H200 and no KV settings; a later one, release/1.2, adds B300/GB300 and drops Maverick, H100 and
1000/1000). Lengths 1000/1000, 1024/1024, 1024/8192, 1024/32768, 8192/1024, 32768/1024; FP4 checkpoints
nvidia/DeepSeek-R1-0528-NVFP4-v2, Qwen3-235B-A22B-FP4, Qwen3-30B-A3B-FP4, Llama-3.3-70B-Instruct-FP4,
Llama-4-Maverick-17B-128E-Instruct-NVFP4 (``nvfp4``); FP8 deepseek-ai/DeepSeek-R1-0528 (DeepSeek's block FP8),
nvidia/Qwen3-235B-A22B-FP8, Llama-3.3-70B-Instruct-FP8, Llama-4-Maverick-17B-128E-Instruct-FP8 (``fp8``); GPT-OSS
is OpenAI's own checkpoint (MXFP4 experts; the page names no other), run as the model's own dtype: at the FP4 peak
on Blackwell, weight-only at the bf16 peak on Hopper (``embedcalc.analysis.time.capability.gemm_peak_dtype``; the
page labels those columns FP8). Models: the ``deepseek-v3`` preset (R1-0528 has V3's shape), the ``gpt-oss-20b``
preset, ``configs/gpt-oss-120b.json`` (openai/gpt-oss-120b's config.json, the copy aiconfigurator 0.12.0 ships; its
gpt-oss-20b copy has the same keys and values as our published fixture), ``llama-3.1-70b`` (Llama 3.3 70B's shape),
``qwen3-30b-a3b``, and the Qwen3-235B and Maverick configs above. A "DEPn" column is ``enable_attention_dp`` with
``--ep n``: the ``plan`` row DP n · EP n (:func:`judge.ep_row`, one replica); "TPn" the TP n row. Same closed loop
and engine defaults as the tables above (2,048 sequences and 8,192 tokens a step per engine, KV reserved; a DEP
row's 2,048 per rank: 2,048 × n in flight); the prediction is the row's total output tokens/s / its GPUs.
KV cache dtype (the page's MoE and dense commands set none except where said: ``trtllm-bench``'s ``auto`` takes
the checkpoint's own, hf_quant_config.json ``kv_cache_quant_algo``): DeepSeek R1 fp8 on every device (the page's
own ``dtype: fp8``); GPT-OSS fp8 on Blackwell (stated) and bf16 on Hopper ("use auto", and OpenAI's checkpoint
quantizes no KV: its quantization_config is MXFP4 weights only); Qwen3-235B, Qwen3-30B-A3B, Maverick and Llama 3.3
fp8 (NVIDIA's ModelOpt checkpoints quantize the KV cache to FP8: TensorRT-LLM's accuracy references,
``tests/integration/defs/accuracy/references/gsm8k.yaml`` at commit 0120c5c2, list these models' NVFP4 and FP8
checkpoints with ``kv_cache_quant_algo: FP8`` (Qwen3-235B-A22B and Qwen3-30B-A3B NVFP4 and FP8, Maverick FP8,
Llama-3.3-70B NVFP4 and FP8, the last also without), and the hf_quant_config.json of nvidia/Qwen3-235B-A22B-NVFP4
and nvidia/Llama-3.1-70B-Instruct-FP8 that aiconfigurator ships say FP8; the exact checkpoints' files were not at
hand). The choice moves Hopper rows most, so the Hopper (FP8-column) rows are also
printed, for information only, with the other KV dtype (fp8 <-> bf16): a what-if line per summary.

Prints each row's published and predicted tokens/s and published / predicted as a time ratio (> 1: the prediction
is slower than the run), then per device and for the perf-overview tables the median |error| and how many rows are
within 1.5×, and the DP x EP rows on a line of their own (not in "all": another source, another layout); then
the stated-layout table with its DEP, TP and overall lines and their what-if lines.

    python benchmarks/bench_throughput.py
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import NamedTuple

from judge import ep_row, summary, tp_row

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

EP_SOURCE = ("TensorRT-LLM docs/source/blogs/Best_perf_practice_on_DeepSeek-R1_in_TensorRT-LLM.md (commit 01c4ece9), "
             "trtllm-bench throughput, attention DP 8 + EP 8, no MTP")  # fmt: skip


class EpRun(NamedTuple):
    """One published attention-DP + EP run (module docstring): its GPUs, dtypes, lengths and engine limits, and its
    total output tokens/s."""

    name: str
    device: str
    ranks: int  # --tp N --ep N with enable_attention_dp: N attention-DP ranks, the experts over N
    dtype: str
    kv_dtype: str
    prompt: int
    output: int
    concurrency: int  # --concurrency: requests in flight over all ranks
    max_batch_size: int  # --max_batch_size, per rank
    max_num_tokens: int  # --max_num_tokens, per rank
    published: float  # Total Output Throughput (tokens/sec)


DP_EP: tuple[EpRun, ...] = (
    EpRun("DeepSeek-R1-0528", "b200", 8, "nvfp4", "fp8", 1042, 2048, 7168, 896, 2048, 43146.2042),
    EpRun("DeepSeek-R1", "b200", 8, "nvfp4", "bf16", 1024, 2048, 3072, 384, 1536, 36384.0838),
    EpRun("DeepSeek-R1", "h200", 8, "fp8", "bf16", 1024, 2048, 1024, 128, 1151, 11489.2671),
)  # fmt: skip
DEEPSEEK = "deepseek-v3"  # the preset: DeepSeek-R1 (and R1-0528) have V3's shape


def predict(model: str, device: str, tp: int, dtype: str, prompt: int, output: int) -> float:
    """The plan row's output tokens/s for TP ``tp`` on ``device`` (module docstring)."""
    result = embedcalc.plan(model, hardware=device, dtype=dtype, kv_dtype="fp8", seq_len=prompt, gen_tokens=output,
                            concurrency=IN_FLIGHT, max_devices=tp, kv_admission="reserve", max_num_seqs=IN_FLIGHT,
                            max_num_batched_tokens=8192)  # fmt: skip
    row = tp_row(result, tp)
    assert row.times is not None, row.reasons
    return row.times.tokens_per_s


def predict_dp_ep(run: EpRun) -> float:
    """The plan row DP ``run.ranks`` · EP ``run.ranks``'s total output tokens/s under the run's load and limits."""
    result = embedcalc.plan(DEEPSEEK, hardware=run.device, dtype=run.dtype, kv_dtype=run.kv_dtype,
                            seq_len=run.prompt, gen_tokens=run.output, concurrency=run.concurrency,
                            max_devices=run.ranks, kv_admission="reserve", max_num_seqs=run.max_batch_size,
                            max_num_batched_tokens=run.max_num_tokens)  # fmt: skip
    row = ep_row(result, run.ranks)
    assert row.times is not None and not row.reasons, row.reasons  # the KV holds the run's batch
    return row.times.tokens_per_s


def dp_ep_ratios() -> list[float]:
    """Print each DP x EP run against its plan row; return their time ratios."""
    print(f"Source: {EP_SOURCE}")
    print(f"{'model':<17} {'device':<6} {'layout':<9} {'dtype':<6} {'KV':<5} {'in/out':<10} {'in flight':>9} "
          f"{'published':>10} {'predicted':>10} {'time ratio':>10}")  # fmt: skip
    ratios = []
    for run in DP_EP:
        predicted = predict_dp_ep(run)
        ratios.append(run.published / predicted)
        layout = f"DP{run.ranks}·EP{run.ranks}"
        print(f"{run.name:<17} {run.device:<6} {layout:<9} {run.dtype:<6} {run.kv_dtype:<5} "
              f"{run.prompt}/{run.output:<5} {run.concurrency:>9,} {run.published:>10,.0f} {predicted:>10,.0f} "
              f"{ratios[-1]:>10.3f}")  # fmt: skip
    return ratios


STATED_SOURCE = ("TensorRT-LLM perf-overview.md, per-GPU revision with stated layouts (commit unknown), trtllm-bench "
                 "throughput, PyTorch backend")  # fmt: skip
GPT_OSS_120B = str(HERE / "configs" / "gpt-oss-120b.json")
GPT_OSS = {"gpt-oss-20b", GPT_OSS_120B}  # OpenAI's checkpoint: the model's own dtype (mxfp4), not a --dtype
HOPPER = {"h100-sxm", "h200"}  # the page's FP8 columns: the what-if swaps their KV dtype
STATED_LENGTHS = ("1000/1000", "1024/1024", "1024/8192", "1024/32768", "8192/1024", "32768/1024")
# (model, device, stated layout, dtype, KV dtype) -> output tokens/s per GPU for each of STATED_LENGTHS
STATED: dict[tuple[str, str, str, str, str], tuple[int | None, ...]] = {
    (DEEPSEEK, "b200", "DEP4", "nvfp4", "fp8"): (6463, 6430, 3862, 1451, 1168, None),
    (DEEPSEEK, "gb200", "DEP4", "nvfp4", "fp8"): (6939, 6924, 4379, 1465, 1192, None),
    (DEEPSEEK, "h200", "DEP8", "fp8", "fp8"): (1627, 1620, 1218, 438, None, None),
    (GPT_OSS_120B, "b200", "DEP2", "mxfp4", "fp8"): (25943, 25870, 17289, 6279, 6111, 1392),
    (GPT_OSS_120B, "gb200", "TP1", "mxfp4", "fp8"): (27198, 26609, 14800, 5556, 6835, 1645),
    (GPT_OSS_120B, "h200", "TP1", "mxfp4", "bf16"): (6868, 6798, 3543, None, 1828, 519),
    (GPT_OSS_120B, "h100-sxm", "DEP4", "mxfp4", "bf16"): (4685, 4715, None, 1177, 1169, 333),
    ("gpt-oss-20b", "b200", "TP1", "mxfp4", "fp8"): (53812, 53491, 34702, 14589, 11904, 2645),
    ("gpt-oss-20b", "gb200", "TP1", "mxfp4", "fp8"): (55823, 56528, 38100, 16463, 12941, 2905),
    ("gpt-oss-20b", "h200", "TP1", "mxfp4", "bf16"): (13858, 13890, 12743, None, 4015, 915),
    ("gpt-oss-20b", "h100-sxm", "TP1", "mxfp4", "bf16"): (11557, 11403, 8617, None, 3366, 785),
    ("llama-3.1-70b", "b200", "TP1", "nvfp4", "fp8"): (6920, 6842, 3242, None, 1362, 274),
    ("llama-3.1-70b", "gb200", "TP1", "nvfp4", "fp8"): (7769, 7751, 3805, None, 1491, 302),
    ("llama-3.1-70b", "h200", "TP2", "fp8", "fp8"): (2587, 2582, 2009, None, 537, 120),
    ("llama-3.1-70b", "h100-sxm", "TP2", "fp8", "fp8"): (2209, None, None, None, 398, None),
    (MAVERICK, "b200", "DEP4", "nvfp4", "fp8"): (11337, 11227, 5174, 2204, 3279, 859),
    (MAVERICK, "gb200", "DEP4", "nvfp4", "fp8"): (11828, 11905, 5508, 2300, 3444, 963),
    (MAVERICK, "h200", "DEP8", "fp8", "fp8"): (4146, 4180, 1157, 679, 1276, None),
    (QWEN3_235B, "b200", "DEP4", "nvfp4", "fp8"): (5764, 5756, 3389, 1255, 1410, 319),
    (QWEN3_235B, "gb200", "DEP4", "nvfp4", "fp8"): (6172, 5862, 3423, None, 1464, 333),
    (QWEN3_235B, "h200", "DEP4", "fp8", "fp8"): (3288, 3268, 1417, None, 627, 134),
    (QWEN3_235B, "h100-sxm", "DEP8", "fp8", "fp8"): (1932, 1935, 873, None, None, None),
    ("qwen3-30b-a3b", "b200", "TP1", "nvfp4", "fp8"): (26971, 26611, 13497, 4494, 5735, 1265),
    ("qwen3-30b-a3b", "gb200", "TP1", "nvfp4", "fp8"): (22856, 22201, 14272, 4925, 6201, 1380),
}  # fmt: skip


def stated_layout(layout: str) -> tuple[str, int]:
    """``"DEP4"`` -> ``("DEP", 4)``, ``"TP2"`` -> ``("TP", 2)``."""
    kind = layout.rstrip("0123456789")
    assert kind in ("DEP", "TP"), layout
    return kind, int(layout[len(kind) :])


def predict_stated(
    model: str, device: str, layout: str, dtype: str, kv_dtype: str, prompt: int, output: int
) -> float:
    """The stated layout's plan row: output tokens/s per GPU (module docstring)."""
    kind, n = stated_layout(layout)
    in_flight = IN_FLIGHT * n if kind == "DEP" else IN_FLIGHT  # every attention-DP rank its own 2,048
    result = embedcalc.plan(model, hardware=device, dtype=None if model in GPT_OSS else dtype, kv_dtype=kv_dtype,
                            seq_len=prompt, gen_tokens=output, concurrency=in_flight, max_devices=n,
                            kv_admission="reserve", max_num_seqs=IN_FLIGHT, max_num_batched_tokens=8192)  # fmt: skip
    row = ep_row(result, n) if kind == "DEP" else tp_row(result, n)
    assert row.times is not None, row.reasons
    return float(row.times.tokens_per_s) / n


def other_kv(kv_dtype: str) -> str:
    """The what-if's KV dtype: fp8 <-> bf16."""
    return "bf16" if kv_dtype == "fp8" else "fp8"


def stated_ratios() -> None:
    """Print every stated-layout row against its plan row, then the DEP, TP and overall summaries, each with its
    what-if (the Hopper rows with the other KV dtype)."""
    print(f"Source: {STATED_SOURCE}")
    print(f"{'model':<14} {'device':<9} {'layout':<6} {'dtype':<6} {'KV':<5} {'in/out':<11} {'published':>10} "
          f"{'predicted':>10} {'time ratio':>10} {'what-if':>8}")  # fmt: skip
    chosen: dict[str, list[float]] = {"DEP": [], "TP": []}
    what_if: dict[str, list[float]] = {"DEP": [], "TP": []}
    by_device: dict[str, list[float]] = {}
    for (model, device, layout, dtype, kv), figures in STATED.items():
        kind, _ = stated_layout(layout)
        for lengths, published in zip(STATED_LENGTHS, figures, strict=True):
            if published is None:
                continue
            prompt, output = map(int, lengths.split("/"))
            ratio = published / predict_stated(model, device, layout, dtype, kv, prompt, output)
            other = ratio
            if device in HOPPER:
                other = published / predict_stated(model, device, layout, dtype, other_kv(kv), prompt, output)
            chosen[kind].append(ratio)
            what_if[kind].append(other)
            by_device.setdefault(f"{kind}, {device}", []).append(ratio)
            name = Path(model).stem[:14] if model.endswith((".yaml", ".json")) else model
            swapped = f"{other:>8.3f}" if device in HOPPER else f"{'':>8}"
            print(f"{name:<14} {device:<9} {layout:<6} {dtype:<6} {kv:<5} {lengths:<11} {published:>10,} "
                  f"{published / ratio:>10,.0f} {ratio:>10.3f} {swapped}")  # fmt: skip
    for label, ratios in by_device.items():  # the per-device lines docs/published-runs.md quotes
        print(summary(label, ratios, 22))
    for label, ratios in (("DEP rows", chosen["DEP"]), ("TP rows", chosen["TP"]),
                          ("stated, all", chosen["DEP"] + chosen["TP"])):  # fmt: skip
        print(summary(label, ratios, 22))
    for label, ratios in (("DEP rows, what-if KV", what_if["DEP"]), ("TP rows, what-if KV", what_if["TP"]),
                          ("stated, what-if KV", what_if["DEP"] + what_if["TP"])):  # fmt: skip
        print(summary(label, ratios, 22) + "  (Hopper rows: the other KV dtype; information only)")


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
    print()
    print(summary("DP x EP", dp_ep_ratios(), 10))
    print()
    stated_ratios()


if __name__ == "__main__":
    main()
