"""``verify DIR --checkpoint`` checks every tensor's shape from the block of its layer (issue 23, item 5):
per-layer blocks, MoE experts (per-expert modules and fused 3-D tensors), latent attention, Gemma 4's per-layer
inputs, KV-shared and values-from-keys layers.

Small variants written by transformers' ``save_pretrained``: Gemma 4 dense (31B-like: full layers with values from
keys and their own head_dim / KV heads, KV-shared layers with double-wide MLPs, per-layer inputs) and MoE
(26B-A4B-like: router, fused experts, dense MLP as the shared branch, branch norms), a Gemma 4 multimodal model
(text under ``model.language_model.``, vision tower beside it), Qwen3-MoE, DeepSeek-V3 (latent attention, shared
experts, a dense first layer), DeepSeek-V2-Lite (latent attention with one full-rank ``q_proj``), Mixtral (``w1`` /
``w2`` / ``w3`` experts), GPT-OSS (input-major fused experts with biases, sinks), ERNIE 4.5 (its router's correction
bias a parameter), HunYuan-A13B (router ``gate.wg``, ``shared_mlp``, query/key layernorms) and OLMo-2 (norms after
attention and after the MLP, no pre-norms). Each places every tensor with the shape the config gives it; with every
multi-dimensional tensor stored with its dimensions reversed (the same elements, so every total still agrees),
verify exits 3 naming each.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hf_reference import hf_config, quiet_transformers, raw_fixture
from sources.hf.test_hf_gemma4 import _TINY_MOE
from sources.hf.test_hf_layer_families import _small
from sources.hf.test_hf_moe_families import _small as moe_small

from embedcalc.reconcile.checkpoint import LayerKinds
from embedcalc.reconcile.checkpoint_names import outside_text_model, tensor_role
from embedcalc.reconcile.checkpoint_shapes import ShapeRules, refile
from embedcalc.sources.checkpoint import read_checkpoint
from embedcalc.sources.loading import load_target

pytestmark = pytest.mark.torch

GEMMA4_DENSE = _TINY_MOE | {"enable_moe_block": False}
RAW = {"gemma4-dense": GEMMA4_DENSE, "gemma4-moe": _TINY_MOE,
       **{name: _small(raw_fixture(name)) for name in ("qwen3-30b-a3b", "deepseek-v3", "deepseek-v2-lite",
                                                        "mixtral-8x7b", "gpt-oss-20b", "olmo-2-1124-7b")},
       **{name: moe_small(raw_fixture(name)) for name in ("ernie-4.5-21b-a3b", "hunyuan-a13b")}}  # fmt: skip
MULTIMODAL = "gemma4-multimodal"
BUFFER = "a buffer, not a parameter"


@pytest.fixture(scope="module")
def transformers() -> Any:
    return quiet_transformers()


def _save(transformers: Any, name: str, directory: Path) -> Any:
    """The small model ``name`` saved to ``directory`` (fp32); returns it."""
    import torch

    torch.manual_seed(0)
    if name == MULTIMODAL:
        config = transformers.Gemma4Config(
            text_config=GEMMA4_DENSE,
            vision_config={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                           "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 16},
            audio_config=None,
        )  # fmt: skip
        model = transformers.Gemma4ForConditionalGeneration(config)
    else:
        model = transformers.AutoModelForCausalLM.from_config(hf_config(transformers, RAW[name]))
    model.save_pretrained(directory)
    return model


def _verify(cli: Any, directory: Path) -> tuple[int, dict[str, Any], str]:
    result = cli("verify", str(directory), "--checkpoint", "--format", "json")
    return result.exit_code, json.loads(result.stdout)["results"][0], result.stderr


def placed(cli: Any, directory: Path, numel: Any) -> dict[str, Any]:
    """verify's result for ``directory``, asserting exit 0 with nothing missing, no shape error, every component's
    count agreeing and the total equal to ``numel``, the saved model's."""
    code, check, stderr = _verify(cli, directory)
    assert code == 0, stderr
    assert check["agree"] and check["missing"] == [] and check["shape_errors"] == []
    assert all(c["stored_params"] == c["analytic_params"] for c in check["components"])
    assert check["stored_params"] == check["analytic_params"] == numel
    return check


def _text_numel(model: Any) -> int:
    return sum(p.numel() for n, p in model.named_parameters() if outside_text_model(n) is None)


@pytest.mark.parametrize("name", [*sorted(RAW), MULTIMODAL])
def test_every_tensor_is_placed_with_the_shape_its_block_gives(
    transformers: Any, cli: Any, tmp_path: Path, name: str
) -> None:
    model = _save(transformers, name, tmp_path)
    check = placed(cli, tmp_path, _text_numel(model))
    # nothing left over but buffers (Gemma 4's layer_scalar, DeepSeek's e_score_correction_bias) and the towers
    towers = [e for e in check["extra"] if e["reason"] != BUFFER]
    assert all("not part of the text model" in e["reason"] for e in towers)
    assert bool(towers) is (name == MULTIMODAL)
    assert all(outside_text_model(e["tensor"]) is not None for e in towers)
    # every parameter of the text model had a shape rule, and its stored shape is that one
    checkpoint = read_checkpoint(tmp_path)
    config = load_target(str(tmp_path / "config.json")).config
    kinds = LayerKinds(config, "decoder")
    raw = checkpoint.raw_config
    rules = ShapeRules(config, "decoder", raw.get("model_type"))
    # (save_pretrained writes Qwen3-MoE's, Mixtral's and DeepSeek's fused experts as per-expert modules: names of
    # the file, not of the model's parameters)
    buffers = {n for n, _ in model.named_buffers()}
    text = [t for t in checkpoint.tensors if t.name not in buffers and outside_text_model(t.name) is None]
    for tensor in text:
        sandwich = config.resolved_norm_placement != "pre" or "olmo" in name
        role = tensor_role(tensor.name, "decoder", sandwich, kinds)
        expected = rules.tensor_shape(refile(role, rules.block(role.layer)), tensor.name.rsplit(".", 1)[-1])
        assert expected is not None and expected[0] == tensor.shape, (tensor.name, expected)
    assert sum(t.numel for t in text) == _text_numel(model)


@pytest.mark.parametrize("name", sorted(RAW))
def test_a_reversed_tensor_exits_3_naming_it_and_the_shape(
    transformers: Any, cli: Any, tmp_path: Path, name: str
) -> None:
    """Every multi-dimensional parameter whose reversed shape differs is stored reversed: each is named with the
    shape the config gives, and nothing else is."""
    from safetensors.torch import load_file, save_file

    model = _save(transformers, name, tmp_path)
    buffers = {n for n, _ in model.named_buffers()}
    path = tmp_path / "model.safetensors"
    tensors = load_file(path)
    reversed_ = sorted(
        n for n, t in tensors.items() if n not in buffers and t.dim() > 1 and t.shape != t.shape[::-1]
    )
    assert reversed_
    shapes = {n: list(tensors[n].shape) for n in reversed_}
    for n in reversed_:
        tensors[n] = tensors[n].reshape(tuple(reversed(tensors[n].shape))).contiguous()
    save_file(tensors, path, metadata={"format": "pt"})
    code, check, stderr = _verify(cli, tmp_path)
    assert code == 3
    assert all(c["stored_params"] == c["analytic_params"] for c in check["components"])
    assert sorted(e["tensor"] for e in check["shape_errors"]) == reversed_
    said = " ".join(stderr.split())  # the console wraps long lines
    for n in reversed_:
        assert f"{n} has shape {shapes[n][::-1]}: the config gives {shapes[n]}" in said


@pytest.mark.parametrize(
    ("tensor", "stored", "expected"),
    [
        ("model.layers.0.experts.gate_up_proj", [4, 64, 64], [4, 64, 64]),  # numel kept, reshaped below
        ("model.layers.1.self_attn.k_proj.weight", [32, 64], [32, 64]),
    ],
)
def test_one_reshaped_gemma4_tensor_is_named_with_exact_shapes(
    transformers: Any, cli: Any, tmp_path: Path, tensor: str, stored: list[int], expected: list[int]
) -> None:
    """Gemma 4 MoE: the fused experts (E, 2 I, d) = (4, 64, 64) stored as (4, 32, 128), a full layer's k_proj
    (values from keys: num_global_key_value_heads 1 x global_head_dim 32, hidden 64) stored as (64, 32)."""
    from safetensors.torch import load_file, save_file

    _save(transformers, "gemma4-moe", tmp_path)
    path = tmp_path / "model.safetensors"
    tensors = load_file(path)
    assert list(tensors[tensor].shape) == stored
    wrong = (4, 32, 128) if tensor.endswith("gate_up_proj") else (64, 32)
    tensors[tensor] = tensors[tensor].reshape(wrong).contiguous()
    save_file(tensors, path, metadata={"format": "pt"})
    code, check, stderr = _verify(cli, tmp_path)
    assert code == 3
    assert [e["tensor"] for e in check["shape_errors"]] == [tensor]
    assert f"{tensor} has shape {list(wrong)}: the config gives {expected}" in " ".join(stderr.split())


def test_a_k_proj_in_a_kv_shared_layer_is_extra(transformers: Any, cli: Any, tmp_path: Path) -> None:
    """Gemma 4's layers 2 and 3 reuse earlier layers' K/V (num_kv_shared_layers 2): they build no k_proj, v_proj or
    k_norm; one stored there is listed as extra, not counted, and the components still agree."""
    import torch
    from safetensors.torch import load_file, save_file

    _save(transformers, "gemma4-dense", tmp_path)
    path = tmp_path / "model.safetensors"
    tensors = load_file(path)
    assert not any(n.startswith("model.layers.2.self_attn.k_") for n in tensors)
    tensors["model.layers.2.self_attn.k_proj.weight"] = torch.zeros(32, 64)
    save_file(tensors, path, metadata={"format": "pt"})
    code, check, _ = _verify(cli, tmp_path)
    assert code == 0 and check["agree"]
    (extra,) = [e for e in check["extra"] if e["reason"] != BUFFER]
    assert extra["tensor"] == "model.layers.2.self_attn.k_proj.weight" and "kv_shared" in extra["reason"]


def _reverse_all(path: Path, skip: set[str]) -> tuple[list[str], dict[str, list[int]]]:
    """Every multi-dimensional tensor of the safetensors file ``path`` (but ``skip`` and the towers) whose reversed
    shape differs, stored reversed; returns their names and stored shapes."""
    from safetensors.torch import load_file, save_file

    tensors = load_file(path)
    names = sorted(
        n
        for n, t in tensors.items()
        if n not in skip and outside_text_model(n) is None and t.dim() > 1 and t.shape != t.shape[::-1]
    )
    shapes = {n: list(tensors[n].shape) for n in names}
    for n in names:
        tensors[n] = tensors[n].reshape(tuple(reversed(tensors[n].shape))).contiguous()
    save_file(tensors, path, metadata={"format": "pt"})
    return names, shapes


def test_heterogeneous_nemotron_nas_blocks_name_each_reversed_tensor(cli: Any, tmp_path: Path) -> None:
    """DeciLM's blocks differ layer by layer (2 or 4 KV heads of 32; MLPs of 512 or 256 at hidden 256, ffn_mult
    2.625 / 1.3125 rounded up to a multiple of 256; no-op and linear sublayers): each k_proj / v_proj / gate / up /
    down is checked against its own block; layer 2's square MLP stored as (512, 128) is named too."""
    from safetensors.torch import save_file
    from sources.hf.test_hf_nemotron_nas import _decilm, _tiny

    raw = _tiny()
    tensors = {name: t.contiguous() for name, t in _decilm(raw, "cpu").state_dict().items()}
    assert tuple(tensors["model.layers.0.self_attn.k_proj.weight"].shape) == (64, 256)
    assert tuple(tensors["model.layers.3.self_attn.k_proj.weight"].shape) == (128, 256)
    assert tuple(tensors["model.layers.0.mlp.gate_proj.weight"].shape) == (512, 256)
    assert tuple(tensors["model.layers.2.mlp.gate_proj.weight"].shape) == (256, 256)
    gate = "model.layers.2.mlp.gate_proj.weight"
    tensors[gate] = tensors[gate].reshape(512, 128)
    (tmp_path / "config.json").write_text(json.dumps(raw), encoding="utf-8")
    save_file(tensors, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    names, shapes = _reverse_all(tmp_path / "model.safetensors", {gate})
    assert (
        "model.layers.3.self_attn.k_proj.weight" in names and "model.layers.0.mlp.down_proj.weight" in names
    )
    code, check, stderr = _verify(cli, tmp_path)
    assert code == 3
    assert sorted(e["tensor"] for e in check["shape_errors"]) == sorted([*names, gate])
    said = " ".join(stderr.split())
    assert f"{gate} has shape [512, 128]: the config gives [256, 256] (intermediate_size, hidden)" in said
    for n in names:
        assert f"{n} has shape {shapes[n][::-1]}: the config gives {shapes[n]}" in said


def test_llama_vision_text_layers_name_each_reversed_tensor(
    transformers: Any, cli: Any, tmp_path: Path
) -> None:
    """Llama-3.2-Vision's text model (self-attention layers and cross-attention layers 1 and 3, 4 heads / 2 KV of
    16 at hidden 64, vocab 300 + 8 rows): every reversed text tensor named, the vision tower left out."""
    import torch
    from sources.hf.test_hf_mllama import NAME
    from sources.hf.test_hf_mllama import _small as mllama_small

    small = mllama_small(raw_fixture(NAME))
    small["vision_config"] |= {"hidden_size": 32, "num_hidden_layers": 2, "num_global_layers": 1,
                               "attention_heads": 2, "intermediate_size": 64, "vision_output_dim": 96,
                               "intermediate_layers_indices": [0, 1]}  # fmt: skip
    torch.manual_seed(0)
    model = transformers.MllamaForConditionalGeneration(transformers.MllamaConfig.from_dict(small)).float()
    model.save_pretrained(tmp_path)
    code, check, stderr = _verify(cli, tmp_path)
    assert code == 0 and check["shape_errors"] == [], stderr
    names, shapes = _reverse_all(tmp_path / "model.safetensors", {n for n, _ in model.named_buffers()})
    assert any(".cross_attn.k_proj." in n for n in names)
    code, check, stderr = _verify(cli, tmp_path)
    assert code == 3
    assert sorted(e["tensor"] for e in check["shape_errors"]) == names
    said = " ".join(stderr.split())
    for n in names:
        assert f"{n} has shape {shapes[n][::-1]}: the config gives {shapes[n]}" in said
