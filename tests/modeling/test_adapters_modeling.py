"""Real adapters on embedcalc's torch model: their counts equal the analytic (peft's) ones, and the activations a
fine-tuning step saves (measured with saved-tensor hooks) are within 10% of ``analyze --peft``'s prediction."""

from __future__ import annotations

from typing import Any

import pytest

from embedcalc.analysis.finetune.adapters import FinetuneSpec, count_finetune
from embedcalc.analysis.finetune.memory import finetune_memory
from embedcalc.analysis.workload import Workload
from embedcalc.config.schema import ModelConfig
from embedcalc.sources.loading import load_target

pytestmark = pytest.mark.torch

TINY = ModelConfig.model_validate({
    "name": "tiny-llama", "family": "llama", "architecture": "decoder", "vocab_size": 2000, "max_seq_len": 512,
    "embed_dim": 256, "num_heads": 4, "num_layers": 2, "ffn_dim": 704, "activation": "swiglu", "norm": "rmsnorm",
    "norm_placement": "pre", "position": "rope", "bias": False, "tie_embeddings": False, "lm_head": True,
    "dropout": 0.0,
})  # fmt: skip


@pytest.mark.parametrize(
    ("preset", "spec"),
    [
        ("llama-2-7b", FinetuneSpec("lora", 8, targets=("q_proj", "v_proj"))),
        ("gpt2", FinetuneSpec("lora", 8)),
        ("gpt2", FinetuneSpec("dora", 4, targets=("all-linear",), modules_to_save=("lm_head",))),
        ("bert-base", FinetuneSpec("lora", 8, targets=("all-linear",), modules_to_save=("pooler.dense",))),
        ("t5-small", FinetuneSpec("dora", 8, targets=("all-linear",))),
        ("phi-3-mini", FinetuneSpec("lora", 8, targets=("all-linear",))),
    ],
)
def test_torch_counts_equal_the_analytic_ones(preset: str, spec: FinetuneSpec) -> None:
    from embedcalc.api.finetune_torch import torch_counts

    config = load_target(preset).config
    counts = count_finetune(config, spec)
    assert torch_counts(config, counts) == (counts.trainable_total, counts.all_total)


@pytest.mark.parametrize(
    "spec",
    [
        FinetuneSpec(),
        FinetuneSpec("lora", 16, targets=("all-linear",)),
        FinetuneSpec("lora", 8, targets=("q_proj", "v_proj")),
        FinetuneSpec("dora", 8, targets=("q_proj", "v_proj")),
    ],
    ids=["full", "lora-all-linear", "lora-qv", "dora-qv"],
)
def test_saved_activations_within_ten_percent(spec: FinetuneSpec) -> None:
    import torch

    from embedcalc.api.finetune_torch import adapter_sites, saved_paths
    from embedcalc.modeling.adapters import attach_adapters, saved_tensor_bytes
    from embedcalc.modeling.model import build_model
    from embedcalc.modeling.steps import make_inputs, training_loss

    torch.manual_seed(0)
    model = build_model(TINY, device=torch.device("cpu"))
    counts = count_finetune(TINY, spec)
    if spec.adapters:
        attach_adapters(model, adapter_sites(counts), saved_paths(TINY, counts))
    model.train()
    batch, seq = 2, 256
    ids, _ = make_inputs(TINY, batch, seq, None, torch.device("cpu"))

    def step() -> Any:
        return training_loss(model(ids), ids)

    measured = saved_tensor_bytes(model, step)
    predicted = finetune_memory(TINY, Workload(batch_size=batch, seq_len=seq, mode="training"), counts)
    assert abs(measured - predicted.activations_bytes) <= 0.10 * predicted.activations_bytes


@pytest.mark.slow  # a real fine-tuning step, in a process of its own (the CPU peak is the process's RSS)
def test_bench_lora_peak_within_ten_percent_of_the_prediction(tmp_path: Any) -> None:
    """bench --mode training --peft lora on a small llama: the measured peak (RSS growth, blocks of 128 KiB or more
    mmapped) within 10% of analyze --peft's device memory (weights, adapters' state, saved activations, the loss's
    backward working set)."""
    import json
    import subprocess
    import sys

    import yaml

    path = tmp_path / "small-llama.yaml"
    small = TINY.model_dump(exclude_defaults=True) | {"name": "small-llama", "vocab_size": 32000, "embed_dim": 512,
                                                       "num_heads": 8, "num_layers": 8, "ffn_dim": 1408}  # fmt: skip
    path.write_text(yaml.safe_dump(small), encoding="utf-8")
    run = subprocess.run([sys.executable, "-m", "embedcalc", "bench", str(path), "--mode", "training", "--peft",
                          "lora", "--seq-len", "256", "--device", "cpu", "--warmup", "1", "--repeat", "1",
                          "--format", "json"], capture_output=True, text=True, check=False)  # fmt: skip
    assert run.returncode == 0, run.stderr
    m = json.loads(run.stdout)["results"][0]["measurement"]
    assert "mmapped" in m["peak_memory_method"]
    assert abs(m["memory_error_pct"]) <= 10, m
