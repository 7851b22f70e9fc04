"""The training time model against MosaicML's measured MPT training throughput (llm-foundry), none of it fitted on.

``benchmarks/data/llm_foundry_mpt.csv`` holds every row of the five tables of llm-foundry's
``scripts/train/benchmarking/README.md`` (github.com/mosaicml/llm-foundry at commit 495218376, 2024-04-22): MPT
models of 125M to 70B parameters trained with Composer's FSDP on 8 to 512 GPUs (H100-80GB in bf16 and fp8,
A100-80GB and A100-40GB in bf16), sequences of 512 to 65,536 tokens, with the micro-batch, gradient accumulation,
sharding strategy (FULL_SHARD = ZeRO-3, SHARD_GRAD_OP = ZeRO-2) and activation checkpointing (full) of each run,
and its measured tokens per second per GPU. The models are the MPT shapes of llm-foundry's
``scripts/train/yamls/pretrain/mpt-*.yaml`` as those runs built them: GELU MLP of 4 × d_model, LayerNorm, learned
positions, biases, tied embeddings, vocabulary 50,368; embedcalc's parameter count of each must equal the table's
``NumParams`` (checked first: the shape is the published one before its time is judged).

Each row becomes ``embedcalc analyze CONFIG --hardware H --mode training --dtype bf16|fp8 --seq-len S --dp G
--zero 3|2 --batch-size MICRO --global-batch GLOBAL [--recompute full]``; the prediction is global × S /
(step_s × G). Prints each row's published and predicted tokens/s/GPU and predicted / published as a time ratio
(> 1: the prediction is slower than the run), then per table and overall: the median |error|, the worst ratio and
how many rows are within 1.5×; and any row whose lower bound (the roofline at peak) is slower than the run.

    python benchmarks/bench_training.py            # the summary
    python benchmarks/bench_training.py --rows     # every row
"""

from __future__ import annotations

import argparse
import csv
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from judge import summary
from typer.testing import CliRunner

from embedcalc.cli.app import app

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" / "llm_foundry_mpt.csv"
HARDWARE = {"h100_80gb": "h100-sxm", "a100_80gb": "a100-80gb", "a100_40gb": "a100-40gb"}
# d_model, n_heads, n_layers of llm-foundry's scripts/train/yamls/pretrain/mpt-<size>.yaml
SHAPES = {"125m": (768, 12, 12), "350m": (1024, 16, 24), "760m": (1536, 12, 24), "1b": (2048, 16, 24),
          "3b": (2560, 20, 32), "7b": (4096, 32, 32), "13b": (5120, 40, 40), "30b": (7168, 56, 48),
          "70b": (8192, 64, 80)}  # fmt: skip


@dataclass(frozen=True)
class Row:
    table: str
    model: str
    seq_len: int
    gpus: int
    gpu: str
    micro_batch: int
    global_batch: int
    published: float  # tokens/s per GPU
    precision: str
    sharding: str
    checkpointing: bool
    num_params: int

    @property
    def label(self) -> str:
        ac = " AC" if self.checkpointing else ""
        return f"{self.table} {self.model} s{self.seq_len} x{self.gpus} mb{self.micro_batch}{ac}"


def rows() -> list[Row]:
    with DATA.open(encoding="utf-8") as handle:
        return [_row(r) for r in csv.DictReader(handle)]


def _row(r: dict[str, str]) -> Row:
    return Row(r["table"], r["model"], int(r["seq_len"]), int(r["gpus"]), r["gpu"], int(r["micro_batch"]),
               int(r["global_batch"]), float(r["tokens_per_s_per_gpu"]), r["precision"], r["sharding"],
               r["activation_checkpointing"] == "True", int(r["num_params"]))  # fmt: skip


def mpt_config(model: str, seq_len: int) -> dict[str, Any]:
    """The MPT shape of ``model`` built for ``seq_len`` positions (its learned position table is that long)."""
    d, heads, layers = SHAPES[model]
    return {"name": f"mpt-{model}", "architecture": "decoder", "vocab_size": 50368, "max_seq_len": seq_len,
            "embed_dim": d, "num_heads": heads, "num_kv_heads": heads, "num_layers": layers, "ffn_dim": 4 * d,
            "activation": "gelu", "norm": "layernorm", "norm_placement": "pre", "position": "learned",
            "bias": True, "tie_embeddings": True, "lm_head": True, "dropout": 0.0}  # fmt: skip


def _invoke(args: list[str]) -> dict[str, Any]:
    result = CliRunner().invoke(app, [*args, "--format", "json"])
    if result.exit_code != 0:
        raise RuntimeError(f"{' '.join(args)}: exit {result.exit_code}: {result.output[-400:]}")
    data: dict[str, Any] = json.loads(result.stdout)["results"][0]
    return data


def predict(row: Row, workdir: Path) -> tuple[float, int, float]:
    """(predicted tokens/s per GPU, embedcalc's parameter count, the lower bound's tokens/s per GPU) of ``row``."""
    path = workdir / f"mpt-{row.model}-{row.seq_len}.yaml"
    if not path.exists():
        path.write_text(yaml.safe_dump(mpt_config(row.model, row.seq_len)), encoding="utf-8")
    args = ["analyze", str(path), "--hardware", HARDWARE[row.gpu], "--mode", "training",
            "--dtype", "fp8" if "fp8" in row.precision else "bf16", "--seq-len", str(row.seq_len),
            "--dp", str(row.gpus), "--zero", "3" if row.sharding == "FULL_SHARD" else "2",
            "--batch-size", str(row.micro_batch), "--global-batch", str(row.global_batch)]  # fmt: skip
    if row.checkpointing:
        args += ["--recompute", "full"]
    data = _invoke(args)
    per_gpu = row.global_batch * row.seq_len / row.gpus
    bound_s = float(data["time"]["lower_bound"]["step_s"])
    return per_gpu / float(data["time"]["step_s"]), int(data["params"]["total"]), per_gpu / bound_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", action="store_true", help="print every row, not only the summary")
    args = parser.parse_args()
    results: list[tuple[Row, float, float]] = []
    miscounts, beaten = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for row in rows():
            predicted, params, bound = predict(row, Path(tmp))
            if params != row.num_params:
                miscounts.append(f"{row.label}: embedcalc {params:,} vs NumParams {row.num_params:,}")
            if bound < row.published:
                beaten.append(f"{row.label}: bound {bound:,.0f} < published {row.published:,.0f} tokens/s")
            results.append((row, predicted, row.published / predicted))
    if args.rows:
        print(f"{'run':<44} {'published':>10} {'predicted':>10} {'time ratio':>10}")
        for row, predicted, r in results:
            print(f"{row.label:<44} {row.published:>10,.0f} {predicted:>10,.0f} {r:>10.3f}")
    for table in dict.fromkeys(row.table for row, _, _ in results):
        print(summary(table, [r for row, _, r in results if row.table == table]))
    print(summary("all", [r for *_, r in results]))
    print(f"parameter counts: {len(results) - len(miscounts)} of {len(results)} equal the table's NumParams")
    print(f"lower bound (the roofline at peak) never slower than the run: {len(results) - len(beaten)} of "
          f"{len(results)}")  # fmt: skip
    for line in miscounts + beaten:
        print("  " + line)


if __name__ == "__main__":
    main()
