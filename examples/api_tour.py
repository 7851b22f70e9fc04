"""A tour of embedcalc's Python API, notebook style: run it top to bottom (``python examples/api_tour.py``), or
paste the cells (``# %%``) into Jupyter. Nothing here needs torch except the last cell, which runs with
``--verify`` (importing torch takes seconds) when torch is installed.
"""

# %% Load a config: a preset, a file, a mapping of fields, with overrides as --set takes them
import importlib.util
import json
import sys

import embedcalc

bert = embedcalc.load("bert-base")
print(bert.config.name, bert.config.embed_dim, bert.config.num_heads, bert.config.num_layers)

wide = embedcalc.load("bert-base", overrides={"name": "bert-wide", "embed_dim": 1024, "num_heads": 16})
tiny = embedcalc.load(
    {"name": "tiny-decoder", "architecture": "decoder", "embed_dim": 256, "num_heads": 4, "num_layers": 4,
     "vocab_size": 8192, "max_seq_len": 1024}
)  # fmt: skip

# %% Analyze: params, FLOPs and memory for one workload; every count has a per-component breakdown
r = embedcalc.analyze(bert, batch_size=8, seq_len=512)
print(f"params {r.params.total:,}; forward {r.flops.forward / 1e12:.2f} TFLOPs; "
      f"attention scores {r.flops.attention_score_share:.1%} of them")  # fmt: skip
for component, params in r.params.group(1).items():
    print(f"  {component:<12} {params:>12,}")

train = embedcalc.analyze(bert, batch_size=8, seq_len=512, mode="training", dtype="bfloat16")
print(f"training memory per device: {train.memory.total_bytes / 2**30:.2f} GiB "
      f"(weights {train.memory.weights_bytes / 2**30:.2f} GiB)")  # fmt: skip

# %% The same numbers as the CLI's JSON: `embedcalc analyze bert-base --format json` has this as results[0]
entry = r.to_json()
print(json.dumps({k: entry[k] for k in ("target", "derived")}))

# %% Invalid configs raise ConfigError with every problem, each with a path and a stable code
try:
    embedcalc.load("bert-base", overrides={"num_heads": 7})
except embedcalc.ConfigError as exc:
    print("invalid:", [(p.path, p.code) for p in exc.problems])

# %% Compare several configs for one workload
for a in embedcalc.compare([bert, wide, tiny], seq_len=512):
    print(f"{a.target:<14} {a.params.total:>13,} params {a.memory.total_bytes / 2**20:>9.1f} MiB")

# %% Sweep: the cartesian product of axes (lists or the CLI's range strings), with the attention crossover
s = embedcalc.sweep(bert, seq_len="64:512:x2", num_heads=[8, 12])
print("crossover seq_len:", s.crossover_seq_len)
for p in s.points:
    print(
        f"  heads {p['num_heads']:>2} seq_len {p['seq_len']:>4}: {p['flops']['forward'] / 1e9:>8.1f} GFLOPs"
    )

# %% Verify against torch (needs `pip install 'embedcalc[torch]'`): analytic counts vs the real module's
if "--verify" in sys.argv and importlib.util.find_spec("torch") is not None:
    v = embedcalc.verify(tiny, seq_len=64)
    print("verify agrees:", v.agree, v.params.counted_total)
