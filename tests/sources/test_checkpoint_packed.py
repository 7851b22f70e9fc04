"""``verify DIR --checkpoint`` on checkpoints whose weights are packed FP4 (issue 31): two E2M1 values per byte, the
parameters counted unpacked, the scales reported as quantization metadata, every shape checked unpacked.

Each checkpoint is a tiny model built by transformers, its quantized weights replaced by zero tensors of the packed
layout the format's published checkpoints carry (headers are all verify reads):

- gpt-oss in MXFP4 (openai/gpt-oss-20b's layout, ``quant_method: mxfp4``): each layer's experts as
  ``gate_up_proj_blocks`` uint8 (E, 2 I, d / 32, 16) and ``gate_up_proj_scales`` uint8 (E, 2 I, d / 32),
  ``down_proj_blocks`` (E, d, I / 32, 16) and ``down_proj_scales``; attention, router, biases and sinks BF16;
- an NVFP4 mixture of experts (NVIDIA's ModelOpt exports, ``quant_method: modelopt``, ``quant_algo: NVFP4``):
  each quantized linear's ``weight`` uint8 (out, in / 2), ``weight_scale`` FP8 (out, in / 16), ``weight_scale_2``
  and ``input_scale`` FP32 scalars; the head unquantized;
- DeepSeek-V4 with FP4 experts (``expert_dtype: fp4`` beside an FP8 ``quantization_config``): each routed expert's
  ``w1`` / ``w2`` / ``w3`` int8 (out, in / 2) with one UE8M0 ``scale`` per 32 values.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hf_reference import quiet_transformers

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def transformers() -> Any:
    return quiet_transformers()


def _save(directory: Path, model: Any, tensors: dict[str, Any], quant: dict[str, Any], **extra: Any) -> int:
    """``tensors`` written as the checkpoint of ``model``'s config with ``quant`` as its quantization_config;
    returns the model's parameter count (what the packed checkpoint stands for)."""
    from safetensors.torch import save_file

    directory.mkdir()
    save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})
    raw = model.config.to_dict() | {"quantization_config": quant} | extra
    (directory / "config.json").write_text(json.dumps(raw))
    return sum(p.numel() for p in model.parameters())


def _verify(cli: Any, directory: Path) -> dict[str, Any]:
    result = cli("verify", str(directory), "--checkpoint", "--format", "json")
    assert result.exit_code == 0, result.stderr
    check: dict[str, Any] = json.loads(result.stdout)["results"][0]
    assert check["agree"] and check["missing"] == [] and check["shape_errors"] == []
    assert {e["reason"] for e in check["extra"]} <= {"a buffer, not a parameter"}
    return check


def test_gpt_oss_mxfp4_blocks_are_counted_unpacked(transformers: Any, cli: Any, tmp_path: Path) -> None:
    import torch

    config = transformers.GptOssConfig(vocab_size=256, hidden_size=64, intermediate_size=64, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                       num_local_experts=4, num_experts_per_tok=2,
                                       tie_word_embeddings=False)  # fmt: skip
    model = transformers.AutoModelForCausalLM.from_config(config)
    tensors: dict[str, Any] = {}
    for name, param in model.state_dict().items():
        if name.endswith(("experts.gate_up_proj", "experts.down_proj")):
            e, inp, out = param.shape  # GptOssExperts: input-major (E, in, out); MXFP4 stores (E, out, in)
            tensors[f"{name}_blocks"] = torch.zeros(e, out, inp // 32, 16, dtype=torch.uint8)
            tensors[f"{name}_scales"] = torch.zeros(e, out, inp // 32, dtype=torch.uint8)
        else:
            tensors[name] = param.to(torch.bfloat16).contiguous()
    quant = {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn",
             "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}  # fmt: skip
    numel = _save(tmp_path / "mxfp4", model, tensors, quant)
    check = _verify(cli, tmp_path / "mxfp4")
    assert check["stored_params"] == check["analytic_params"] == numel
    experts = next(c for c in check["components"] if c["key"] == "decoder/moe/experts")
    # per layer: gate_up (4 x 128 x 64) + down (4 x 64 x 64) values in blocks, one scale byte per 32 values
    assert experts["stored_params"] == 2 * (4 * 128 * 64 + 4 * 64 * 64 + 4 * 128 + 4 * 64)  # with the biases
    assert experts["scale_bytes"] == 2 * (4 * 128 * 64 + 4 * 64 * 64) // 32
    assert experts["quantized_tensors"] == 2 * 2 and experts["dtypes"] == ["BF16", "U8"]


def test_gpt_oss_mxfp4_blocks_of_the_wrong_width_are_named(
    transformers: Any, cli: Any, tmp_path: Path
) -> None:
    """A block tensor whose unpacked width disagrees with the config is a shape error naming both shapes."""
    import torch

    config = transformers.GptOssConfig(vocab_size=256, hidden_size=64, intermediate_size=64, num_hidden_layers=1,
                                       num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                       num_local_experts=4, num_experts_per_tok=2)  # fmt: skip
    model = transformers.AutoModelForCausalLM.from_config(config)
    tensors = {
        k: v.contiguous() for k, v in model.state_dict().items() if not k.endswith("experts.down_proj")
    }
    tensors["model.layers.0.mlp.experts.down_proj_blocks"] = torch.zeros(4, 64, 1, 16, dtype=torch.uint8)
    tensors["model.layers.0.mlp.experts.down_proj_scales"] = torch.zeros(4, 64, 1, dtype=torch.uint8)
    _save(tmp_path / "wrong", model, tensors, {"quant_method": "mxfp4"})
    result = cli("verify", str(tmp_path / "wrong"), "--checkpoint", "--format", "json")
    check = json.loads(result.stdout)["results"][0]
    assert result.exit_code == 3
    [error] = check["shape_errors"]
    assert error["tensor"] == "model.layers.0.mlp.experts.down_proj_blocks"
    assert error["shape"] == [4, 64, 1, 16]
    assert error["reason"].startswith("the config gives [4, 64, 64]")
    assert "unpacked [4, 32, 64]" in error["reason"]


def test_an_nvfp4_moe_counts_two_values_per_byte(transformers: Any, cli: Any, tmp_path: Path) -> None:
    import torch

    config = transformers.Qwen3MoeConfig(vocab_size=256, hidden_size=64, intermediate_size=96,
                                         moe_intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
                                         num_key_value_heads=2, head_dim=16, num_experts=4, num_experts_per_tok=2,
                                         tie_word_embeddings=False)  # fmt: skip
    model = transformers.AutoModelForCausalLM.from_config(config)
    model.save_pretrained(tmp_path / "bf16")  # per-expert tensors, as NVIDIA's exports store them
    from safetensors.torch import load_file

    tensors: dict[str, Any] = {}
    for name, weight in load_file(tmp_path / "bf16" / "model.safetensors").items():
        module = name.removesuffix(".weight")
        if ".layers." in name and name.endswith("proj.weight"):
            out, inp = weight.shape
            tensors[name] = torch.zeros(out, inp // 2, dtype=torch.uint8)
            tensors[f"{module}.weight_scale"] = torch.zeros(out, inp // 16, dtype=torch.float8_e4m3fn)
            tensors[f"{module}.weight_scale_2"] = torch.ones((), dtype=torch.float32)
            tensors[f"{module}.input_scale"] = torch.ones((), dtype=torch.float32)
        else:
            tensors[name] = weight
    quant = {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16,
             "exclude_modules": ["lm_head", "model.layers.*.mlp.gate"]}  # fmt: skip
    numel = _save(tmp_path / "nvfp4", model, tensors, quant)
    check = _verify(cli, tmp_path / "nvfp4")
    assert check["stored_params"] == check["analytic_params"] == numel
    keys = {c["key"]: c for c in check["components"]}
    assert keys["decoder/moe/experts"]["dtypes"] == ["F32", "F8_E4M3", "U8"]
    assert keys["decoder/moe/experts"]["quantized_tensors"] == 2 * 4 * 3
    # one FP8 scale per 16 values and two FP32 scalars per linear
    assert keys["decoder/moe/experts"]["scale_bytes"] == 2 * 4 * (3 * 32 * 64 // 16 + 3 * 8)
    assert any("quant_algo NVFP4" in note for note in check["notes"])


def test_deepseek_v4_fp4_experts_count_two_values_per_int8(
    transformers: Any, cli: Any, tmp_path: Path
) -> None:
    """deepseek-ai's layout (``layers.N.ffn.experts.E.w1.weight``) with the experts in FP4: int8 (out, in / 2) and
    a UE8M0 scale per 32 values; the FP8 attention weights one parameter per byte."""
    import torch
    from safetensors.torch import load_file

    small = dict(vocab_size=256, hidden_size=64, moe_intermediate_size=32, num_hidden_layers=2,
                 num_attention_heads=4, head_dim=32, q_lora_rank=16, n_routed_experts=4, num_experts_per_tok=2,
                 o_groups=2, o_lora_rank=16, index_n_heads=2, index_head_dim=16, index_topk=3, sliding_window=32,
                 hc_mult=2, max_position_embeddings=256)  # fmt: skip
    model = transformers.DeepseekV4ForCausalLM(transformers.DeepseekV4Config(**small))
    model.save_pretrained(tmp_path / "bf16")
    tensors: dict[str, Any] = {}
    for name, weight in load_file(tmp_path / "bf16" / "model.safetensors").items():
        name = "head.weight" if name == "lm_head.weight" else name.removeprefix("model.")
        module = name.removesuffix(".weight")
        if ".experts." in name and name.endswith(".weight"):
            out, inp = weight.shape
            tensors[name] = torch.zeros(out, inp // 2, dtype=torch.int8)
            tensors[f"{module}.scale"] = torch.zeros(out, inp // 32, dtype=torch.uint8)
        elif ".attn.wq_a." in name:
            tensors[name] = weight.to(torch.float8_e4m3fn)
            tensors[f"{module}.scale"] = torch.ones(1, 1)
        else:
            tensors[name] = weight
    quant = {"quant_method": "fp8", "fmt": "e4m3", "scale_fmt": "ue8m0", "activation_scheme": "dynamic",
             "weight_block_size": [128, 128]}  # fmt: skip
    numel = _save(tmp_path / "fp4", model, tensors, quant, expert_dtype="fp4")
    check = _verify(cli, tmp_path / "fp4")
    assert check["stored_params"] == check["analytic_params"] == numel
    experts = next(c for c in check["components"] if c["key"] == "decoder/moe/experts")
    assert experts["quantized_tensors"] == 2 * 4 * 3 and experts["scale_bytes"] == 2 * 4 * 3 * 32 * 64 // 32
    # without expert_dtype the same int8 tensors hold one value each: half the experts, exit 3
    raw = json.loads((tmp_path / "fp4" / "config.json").read_text())
    (tmp_path / "fp4" / "config.json").write_text(
        json.dumps({k: v for k, v in raw.items() if k != "expert_dtype"})
    )
    result = cli("verify", str(tmp_path / "fp4"), "--checkpoint", "--format", "json")
    assert result.exit_code == 3


def test_a_compressed_tensors_nvfp4_checkpoint_counts_two_values_per_byte(
    transformers: Any, cli: Any, tmp_path: Path
) -> None:
    """compressed-tensors' NVFP4 (``format: nvfp4-pack-quantized``, 4-bit float weights in groups of 16: the layout
    llm-compressor writes): ``weight_packed`` uint8 (out, in / 2), ``weight_scale`` FP8 (out, in / 16),
    ``weight_global_scale`` and ``input_global_scale`` FP32 (1,)."""
    import torch

    config = transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2)  # fmt: skip
    model = transformers.AutoModelForCausalLM.from_config(config)
    tensors: dict[str, Any] = {}
    for name, weight in model.state_dict().items():
        module = name.removesuffix(".weight")
        if ".layers." in name and name.endswith("proj.weight"):
            out, inp = weight.shape
            tensors[f"{module}.weight_packed"] = torch.zeros(out, inp // 2, dtype=torch.uint8)
            tensors[f"{module}.weight_scale"] = torch.zeros(out, inp // 16, dtype=torch.float8_e4m3fn)
            tensors[f"{module}.weight_global_scale"] = torch.ones(1, dtype=torch.float32)
            tensors[f"{module}.input_global_scale"] = torch.ones(1, dtype=torch.float32)
        else:
            tensors[name] = weight.contiguous()
    group = {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "float", "strategy": "tensor_group",
                                                "group_size": 16}}  # fmt: skip
    quant = {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
             "config_groups": {"group_0": group}, "ignore": ["lm_head"]}  # fmt: skip
    numel = _save(tmp_path / "ct", model, tensors, quant)
    check = _verify(cli, tmp_path / "ct")
    assert check["stored_params"] == check["analytic_params"] == numel
    qkv = next(c for c in check["components"] if c["key"] == "decoder/attention/qkv")
    assert qkv["quantized_tensors"] == 2 * 3 and qkv["dtypes"] == ["F32", "F8_E4M3", "U8"]
