"""Our model vs Hugging Face transformers', same config, same machine, same settings, one run: a BERT forward and
a GPT-2 greedy generation.

Forward: both models from the bert-base shape (no download: transformers builds from a BertConfig), float32,
``torch.set_num_threads(THREADS)``, SDPA attention in both, inference mode, batch 8 x seq 128 by default; ours with
its projections fused as ``bench`` runs it (:func:`embedcalc.modeling.fusion.fuse_projections`: one QKV GEMM).
Pairs alternate (ours, theirs, theirs, ours, ...) so that machine noise hits both; each pair reports the
throughput ratio ours/theirs, and the median ratio is the headline. Also reports our achieved FLOP/s (analytic
forward FLOPs / median time) as a fraction of the measured float32 GEMM peak, timed the same way.

Generation (``--gen-tokens``, 0 to skip): gpt2's shape (GPT2LMHeadModel from a GPT2Config), batch 1, a
``--gen-prompt`` token prompt, greedy; ours is :func:`embedcalc.modeling.generate.greedy_generate` with its static
cache, theirs ``generate(do_sample=False, cache_implementation="static")`` with the same prompt and
``max_new_tokens = gen_tokens + 1`` (ours decodes G steps after the prefill's token). Decode tokens/s = G / (time
of the whole generation − time of the prefill alone), each measured the same way for both; pairs alternate.

    python benchmarks/bench_model.py [--pairs 7] [--repeat 5] [--batch-size 8] [--seq-len 128] [--threads 2]
                                     [--gen-tokens 32] [--gen-prompt 32]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from transformers import BertConfig, BertModel, GPT2Config, GPT2LMHeadModel

from embedcalc.analysis.flops import forward_flops
from embedcalc.analysis.workload import Workload
from embedcalc.modeling import build_model
from embedcalc.modeling.fusion import fuse_projections
from embedcalc.modeling.generate import allocate_cache, greedy_generate
from embedcalc.modeling.timing import measure_matmul_peak
from embedcalc.sources.loading import load_target


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
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pairs", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--gen-tokens", type=int, default=32)
    parser.add_argument("--gen-prompt", type=int, default=32)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    forward_pairs(args)
    if args.gen_tokens:
        generation_pairs(args)


def forward_pairs(args: argparse.Namespace) -> None:
    config = load_target("bert-base").config
    ours = build_model(config, attention="sdpa", device="cpu")
    fuse_projections(ours)
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
        # alternate who goes first, so that neither always runs on a warmer (or noisier) machine
        if i % 2 == 1:
            t_ours = _time(run_ours, args.repeat)
            t_theirs = _time(run_theirs, args.repeat)
        else:
            t_theirs = _time(run_theirs, args.repeat)
            t_ours = _time(run_ours, args.repeat)
        ratios.append(t_theirs / t_ours)
        our_times.append(t_ours)
        print(f"{i + 1:>4} {tokens / t_ours:>12,.0f} {tokens / t_theirs:>12,.0f} {t_theirs / t_ours:>7.3f}x")
    peak = measure_matmul_peak(torch.device("cpu"), "fp32")
    achieved = flops / statistics.median(our_times)
    print(f"median throughput ratio ours/HF: {statistics.median(ratios):.3f}x (min {min(ratios):.3f}, "
          f"max {max(ratios):.3f})")  # fmt: skip
    print(f"ours: {achieved / 1e9:.1f} GFLOP/s achieved = {achieved / peak.flops_per_s:.1%} of the measured "
          f"float32 GEMM peak ({peak.flops_per_s / 1e9:.1f} GFLOP/s, {peak.size}x{peak.size})")  # fmt: skip


def generation_pairs(args: argparse.Namespace) -> None:
    config = load_target("gpt2").config
    ours = build_model(config, attention="sdpa", device="cpu")
    fuse_projections(ours)
    hf_config = GPT2Config(
        vocab_size=config.vocab_size, n_positions=config.max_seq_len, n_embd=config.embed_dim,
        n_layer=config.num_layers, n_head=config.num_heads, n_inner=config.resolved_ffn_dim,
        activation_function="gelu_new", attn_implementation="sdpa",
    )  # fmt: skip
    theirs = GPT2LMHeadModel(hf_config).eval()
    prompt = torch.randint(0, config.vocab_size, (1, args.gen_prompt))
    gen = args.gen_tokens
    cache = allocate_cache(ours, 1, args.gen_prompt + gen)

    def ours_run(steps: int) -> None:
        greedy_generate(ours, prompt, steps, cache)

    def theirs_run(steps: int) -> None:
        with torch.inference_mode():
            theirs.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                            max_new_tokens=steps + 1, min_new_tokens=steps + 1, cache_implementation="static",
                            pad_token_id=0)  # fmt: skip

    def decode_rate(run: object) -> float:
        assert callable(run)
        whole = _time(lambda: run(gen), args.repeat)
        prefill = _time(lambda: run(0), args.repeat)
        return gen / max(whole - prefill, 1e-9)

    print(f"\ngpt2 greedy generation, float32, sdpa, batch 1, prompt {args.gen_prompt}, {gen} decode steps, "
          f"static caches, {args.threads} threads")  # fmt: skip
    print(f"{'pair':>4} {'ours tok/s':>12} {'HF tok/s':>12} {'ours/HF':>8}")
    ratios = []
    for i in range(args.pairs):
        if i % 2 == 0:
            r_ours, r_theirs = decode_rate(ours_run), decode_rate(theirs_run)
        else:
            r_theirs, r_ours = decode_rate(theirs_run), decode_rate(ours_run)
        ratios.append(r_ours / r_theirs)
        print(f"{i + 1:>4} {r_ours:>12,.1f} {r_theirs:>12,.1f} {r_ours / r_theirs:>7.3f}x")
    print(f"median decode tokens/s ratio ours/HF: {statistics.median(ratios):.3f}x (min {min(ratios):.3f}, "
          f"max {max(ratios):.3f})")  # fmt: skip


if __name__ == "__main__":
    main()
