"""Our BERT vs Hugging Face transformers' BertModel, same config, same machine, same settings, one run.

Builds both models from the bert-base shape (no download: transformers builds from a BertConfig), float32,
``torch.set_num_threads(THREADS)``, SDPA attention in both, inference mode, batch 8 x seq 128 by default. Pairs
alternate (ours, theirs, ours, theirs, ...) so that machine noise hits both; each pair reports the throughput
ratio ours/theirs, and the median ratio is the headline. Also reports our achieved FLOP/s (analytic forward
FLOPs / median time) as a fraction of the measured float32 GEMM peak, timed the same way.

    python benchmarks/bench_model.py [--pairs 7] [--repeat 5] [--batch-size 8] [--seq-len 128] [--threads 2]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from transformers import BertConfig, BertModel

from embedcalc.analysis.flops import forward_flops
from embedcalc.analysis.workload import Workload
from embedcalc.config.loading import load_target
from embedcalc.modeling import build_model
from embedcalc.modeling.timing import measure_matmul_peak


def _time(fn: object, repeat: int) -> float:
    """Median seconds of ``repeat`` calls after one warm-up call."""
    assert callable(fn)
    fn()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    config = load_target("bert-base").config
    ours = build_model(config, attention="sdpa", device="cpu")
    hf_config = BertConfig(
        vocab_size=config.vocab_size, hidden_size=config.embed_dim, num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads, intermediate_size=config.resolved_ffn_dim,
        max_position_embeddings=config.max_seq_len, type_vocab_size=config.type_vocab_size,
        attn_implementation="sdpa",
    )  # fmt: skip
    theirs = BertModel(hf_config).eval()
    ids = torch.randint(0, config.vocab_size, (args.batch_size, args.seq_len))

    def run_ours() -> None:
        with torch.inference_mode():
            ours(ids)

    def run_theirs() -> None:
        with torch.inference_mode():
            theirs(ids)

    flops = forward_flops(config, Workload(batch_size=args.batch_size, seq_len=args.seq_len)).forward
    tokens = args.batch_size * args.seq_len
    print(f"bert-base, float32, sdpa, batch {args.batch_size} x seq {args.seq_len}, {args.threads} threads, "
          f"torch {torch.__version__}")  # fmt: skip
    print(f"{'pair':>4} {'ours tok/s':>12} {'HF tok/s':>12} {'ours/HF':>8}")
    ratios, our_times = [], []
    for i in range(args.pairs):
        if i % 2 == 0:  # alternate who goes first, so that neither always runs on a warmer (or noisier) machine
            t_ours = _time(run_ours, args.repeat)
            t_theirs = _time(run_theirs, args.repeat)
        else:
            t_theirs = _time(run_theirs, args.repeat)
            t_ours = _time(run_ours, args.repeat)
        ratios.append(t_theirs / t_ours)
        our_times.append(t_ours)
        print(f"{i + 1:>4} {tokens / t_ours:>12,.0f} {tokens / t_theirs:>12,.0f} {t_theirs / t_ours:>7.3f}x")
    peak = measure_matmul_peak(torch.device("cpu"), "float32")
    achieved = flops / statistics.median(our_times)
    print(f"median throughput ratio ours/HF: {statistics.median(ratios):.3f}x (min {min(ratios):.3f}, "
          f"max {max(ratios):.3f})")  # fmt: skip
    print(f"ours: {achieved / 1e9:.1f} GFLOP/s achieved = {achieved / peak.flops_per_s:.1%} of the measured "
          f"float32 GEMM peak ({peak.flops_per_s / 1e9:.1f} GFLOP/s, {peak.size}x{peak.size})")  # fmt: skip


if __name__ == "__main__":
    main()
