"""``verify DIR --checkpoint`` on hybrid checkpoints (issue 23, item 5): every tensor of a recurrent-mixer layer is
filed under its ``mixer/...`` key, and each component holds exactly the parameters ``analyze`` counts.

Tiny variants (the small eager variants of tests/sources/hf/test_mixers_hf.py) of Granite 4.0-H (Mamba-2,
``mamba``), Nemotron-H (Mamba-2, ``mixer``; one block each of Mamba-2, MLP, attention and MoE), Jamba (Mamba-1),
Qwen3-Next (gated DeltaNet, ``linear_attn``; its ``q_proj`` carries the output gate), LFM2 and LFM2-MoE (short
convolution, ``conv``; LFM2-MoE's ``expert_bias`` a buffer), MiniMax (lightning attention, ``self_attn`` on its
linear layers) and Falcon-H1 (Mamba-2 ``mamba`` beside attention in every layer) are built on the CPU from their
transformers config class and written by ``save_pretrained`` (safetensors). Beside the per-component counts, the
mixer keys together must hold what transformers' mixer module of each recurrent layer holds, counted off the model's
own parameters (its module name read from transformers' modeling file).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hf_reference import hf_config, mapped_config, quiet_transformers, raw_fixture
from sources.hf.test_mixers_hf import CONV_TAIL_ONLY, STATE_PASSING

pytestmark = pytest.mark.torch

# the recurrent mixer's module in each family's decoder layer (transformers' modeling_<family>.py)
MIXER_MODULE = {"granite-4.0-h-small": "mamba", "nemotron-h-8b-base-8k": "mixer", "jamba-mini-1.7": "mamba",
                "qwen3-next-80b-a3b": "linear_attn", "lfm2-1.2b": "conv", "lfm2-8b-a1b": "conv",
                "minimax-m1-80k": "self_attn", "falcon-h1-34b-instruct": "mamba"}  # fmt: skip
SMALL = STATE_PASSING | CONV_TAIL_ONLY


@pytest.fixture(scope="module")
def transformers() -> Any:
    return quiet_transformers()


@pytest.mark.parametrize("name", sorted(MIXER_MODULE))
def test_a_hybrid_checkpoint_files_every_mixer_tensor_under_its_component(
    transformers: Any, cli: Any, tmp_path: Path, name: str
) -> None:
    import torch
    from safetensors import safe_open

    torch.manual_seed(0)
    raw = raw_fixture(name) | SMALL[name]
    model = transformers.AutoModelForCausalLM.from_config(hf_config(transformers, raw))
    model.save_pretrained(tmp_path / name)
    numel = sum(p.numel() for p in model.parameters())
    result = cli("verify", str(tmp_path / name), "--checkpoint", "--format", "json")
    assert result.exit_code == 0, result.stderr
    check = json.loads(result.stdout)["results"][0]
    assert check["agree"] and check["missing"] == [] and check["shape_errors"] == []
    assert check["stored_params"] == check["analytic_params"] == numel
    keys = {c["key"]: c for c in check["components"]}
    assert all(c["stored_params"] == c["analytic_params"] for c in keys.values())
    # the bytes on disk are the parameters' (Nemotron-H keeps its A_log and D in fp32 beside bf16 weights)
    on_disk = sum(p.numel() * p.element_size() for p in model.parameters())
    assert sum(c["stored_bytes"] for c in keys.values()) == on_disk
    # nothing left over but buffers (MiniMax's decay tables)
    assert all(e["reason"] == "a buffer, not a parameter" for e in check["extra"])
    # every tensor of the file once: in the total, or listed as extra (Qwen3-Next's split q_proj is in two
    # components, one tensor of the total)
    with safe_open(tmp_path / name / "model.safetensors", "pt") as f:
        in_file = len(list(f.keys()))
    assert check["stored_tensors"] + len(check["extra"]) == in_file
    # the components' tensor counts: Qwen3-Next's one q_proj (one attention layer) in attention/qkv and /gate
    twice = 1 if name == "qwen3-next-80b-a3b" else 0
    assert sum(c["tensors"] for c in keys.values()) == check["stored_tensors"] + twice

    # the same numbers as analyze's breakdown
    analyze = cli("analyze", str(tmp_path / name / "config.json"), "--format", "json")
    assert analyze.exit_code == 0, analyze.stderr
    breakdown = json.loads(analyze.stdout)["results"][0]["params"]["breakdown"]
    assert {k: c["stored_params"] for k, c in keys.items()} == breakdown

    # the mixer keys hold what transformers' mixer modules of the recurrent layers hold
    plan = mapped_config(raw).stack_plan("decoder")
    recurrent = [
        i for i in range(plan.num_layers) if plan.block_at(i).mixer_kind not in ("attention", "none")
    ]
    assert recurrent
    module = MIXER_MODULE[name]
    in_mixers = sum(
        p.numel() for n, p in model.named_parameters() if any(f"layers.{i}.{module}." in n for i in recurrent)
    )
    mixer = {k: c["stored_params"] for k, c in keys.items() if k.startswith("decoder/mixer/")}
    assert sum(v for k, v in mixer.items() if k != "decoder/mixer/norm") == in_mixers


def test_the_table_total_counts_qwen3_next_split_q_proj_once(
    transformers: Any, cli: Any, tmp_path: Path
) -> None:
    """The tensors column of the table: q_proj in attention/qkv and in attention/gate, once in the total row."""
    import torch
    from safetensors import safe_open

    torch.manual_seed(0)
    raw = raw_fixture("qwen3-next-80b-a3b") | SMALL["qwen3-next-80b-a3b"]
    transformers.AutoModelForCausalLM.from_config(hf_config(transformers, raw)).save_pretrained(tmp_path)
    with safe_open(tmp_path / "model.safetensors", "pt") as f:
        names = list(f.keys())
    assert sum(n.endswith("self_attn.q_proj.weight") for n in names) == 1
    result = cli("verify", str(tmp_path), "--checkpoint")
    assert result.exit_code == 0, result.stderr
    (total,) = [line for line in result.stdout.splitlines() if " total " in line]
    assert total.split("│")[2].strip() == str(len(names))


@pytest.mark.parametrize("name", sorted(MIXER_MODULE))
def test_a_reshaped_mixer_tensor_exits_3_naming_it(
    transformers: Any, cli: Any, tmp_path: Path, name: str
) -> None:
    """Every multi-dimensional tensor of the first recurrent layer's mixer stored with its dimensions reversed (the
    same elements, so every component's total still agrees): verify exits 3 naming each, and only those."""
    import torch
    from safetensors.torch import load_file, save_file

    torch.manual_seed(0)
    raw = raw_fixture(name) | SMALL[name]
    model = transformers.AutoModelForCausalLM.from_config(hf_config(transformers, raw))
    model.save_pretrained(tmp_path)
    # parameters, not MiniMax's decay buffers, which the file holds too (Nemotron-H saves model.* as backbone.*)
    params = {n[n.index("layers.") :] for n, _ in model.named_parameters() if "layers." in n}
    plan = mapped_config(raw).stack_plan("decoder")
    first = next(i for i in range(plan.num_layers) if plan.block_at(i).mixer is not None)
    tensors = load_file(tmp_path / "model.safetensors")
    prefix = f"layers.{first}.{MIXER_MODULE[name]}."
    reshaped = sorted(
        n
        for n, t in tensors.items()
        if prefix in n and n[n.index("layers.") :] in params and t.dim() > 1 and t.shape != t.shape[::-1]
    )
    assert reshaped
    for n in reshaped:
        tensors[n] = tensors[n].reshape(tuple(reversed(tensors[n].shape))).contiguous()
    save_file(tensors, tmp_path / "model.safetensors", metadata={"format": "pt"})
    result = cli("verify", str(tmp_path), "--checkpoint", "--format", "json")
    assert result.exit_code == 3
    check = json.loads(result.stdout)["results"][0]
    assert all(c["stored_params"] == c["analytic_params"] for c in check["components"])
    assert sorted(e["tensor"] for e in check["shape_errors"]) == reshaped
    shown = list(reversed(tensors[reshaped[0]].shape))
    said = " ".join(result.stderr.split())  # the console wraps long lines
    assert f"{reshaped[0]} has shape {list(tensors[reshaped[0]].shape)}: the config gives {shown}" in said
