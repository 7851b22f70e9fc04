"""Roofline prediction for ``local`` vs measurement: prefill (time to first token) and decode for 3 sizes on this CPU.

Models: a small GPT (d 256, 4 layers), gpt2 (124M) and gpt2-medium (355M), float32, SDPA, batch 1, a
``--prompt`` token prompt, ``--gen-tokens`` greedy decode steps through embedcalc's static KV cache, projections
fused as ``bench`` runs them. Predicted: :func:`~embedcalc.analysis.time.estimate.estimate_time` on the
``local`` device (``embedcalc bench --peak`` must have measured it), efficiency 1; prefill_s against the median
time to first token, the mean decode step over the generation against the median measured step.
Error = (measured − predicted) / predicted. Each size runs ``--repeat`` generations after one warm-up.

    python benchmarks/bench_roofline.py [--prompt 128] [--gen-tokens 32] [--repeat 3] [--threads 2]
"""

from __future__ import annotations

import argparse
import statistics

import torch

from embedcalc.analysis.time.estimate import TimeRequest, estimate_time
from embedcalc.analysis.workload import Workload
from embedcalc.config.schema import ModelConfig
from embedcalc.devices.resolve import load_device
from embedcalc.modeling import build_model
from embedcalc.modeling.fusion import fuse_projections
from embedcalc.modeling.generate import allocate_cache, greedy_generate
from embedcalc.sources.loading import load_target


def _sizes() -> list[tuple[str, ModelConfig]]:
    gpt2 = load_target("gpt2").config
    small = ModelConfig.model_validate(
        gpt2.model_dump(exclude_unset=True) | {"name": "gpt-small", "embed_dim": 256, "num_layers": 4,
                                               "num_heads": 4, "ffn_dim": 1024}
    )  # fmt: skip
    return [
        ("gpt-small (d256 L4)", small),
        ("gpt2", gpt2),
        ("gpt2-medium", load_target("gpt2-medium").config),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--gen-tokens", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = load_device("local")
    print(f"local: {device.title}, torch {torch.__version__}; float32, sdpa, batch 1, prompt {args.prompt}, "
          f"{args.gen_tokens} decode steps, {args.repeat} timed generations")  # fmt: skip
    header = (f"{'model':<20} {'phase':<8} {'predicted ms':>12} {'measured ms':>12} {'error':>8} "
              f"{'bound':>8}")  # fmt: skip
    print(header)
    for name, config in _sizes():
        w = Workload(batch_size=1, seq_len=args.prompt, gen_tokens=args.gen_tokens)
        estimate = estimate_time(config, w, TimeRequest(device=device))
        model = build_model(config, attention="sdpa", device="cpu")
        fuse_projections(model)
        prompt = torch.randint(0, config.vocab_size, (1, args.prompt))
        cache = allocate_cache(model, 1, args.prompt + args.gen_tokens)
        greedy_generate(model, prompt, args.gen_tokens, cache)  # warm-up
        runs = [greedy_generate(model, prompt, args.gen_tokens, cache) for _ in range(args.repeat)]
        ttft = statistics.median(r.ttft_s for r in runs)
        decode = statistics.median(s for r in runs for s in r.decode_s)
        rows = [
            ("prefill", estimate.phases["prefill"].time_s, ttft, estimate.phases["prefill"].bound),
            ("decode", estimate.decode_s_per_token_mean or 0.0, decode, estimate.phases["decode"].bound),
        ]
        for phase, predicted, measured, bound in rows:
            error = 100.0 * (measured - predicted) / predicted
            print(f"{name:<20} {phase:<8} {predicted * 1e3:>12.3f} {measured * 1e3:>12.3f} {error:>+7.1f}% "
                  f"{bound:>8}")  # fmt: skip
        del model, cache


if __name__ == "__main__":
    main()
