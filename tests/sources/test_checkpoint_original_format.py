"""``verify DIR --checkpoint`` on checkpoints in a family's original format (issue 31): placed under the names
transformers loads them by, its own conversion mapping applied to the header's names and shapes.

The checkpoints are tiny models written by ``save_pretrained``, which writes a family's original layout through the
reverse of the same mapping (the layout its published checkpoints carry): Mistral Large 4's ``tok_embeddings``,
``layers.N.attention.wq`` / ``wkv_a_with_mqa`` / ``wkv_b`` / ``wo``, ``attention_norm`` / ``ffn_norm``, per-expert
``experts.E.w1`` / ``w2`` / ``w3`` (merged into one ``gate_up_proj`` and ``down_proj`` on load), ``ssmax_scaling``,
``lerope.alpha`` and ``output``; Step-3.7's ``moe.gate_proj`` / ``moe.up_proj`` stacked per layer (concatenated into
``gate_up_proj`` on load), ``moe.router_bias`` and ``share_expert``. Each is placed exactly: every component's
stored count equals analyze's, the total transformers' numel of the text model. Without transformers the tensors it
would place say so and name the extra to install; a model transformers cannot build leaves the first placement,
with the reason; a family transformers converts nothing of is never sent to it (no torch import).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hf_reference import quiet_transformers

pytestmark = pytest.mark.torch

_ML4 = dict(vocab_size=256, hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=4,
            num_attention_heads=4, num_key_value_heads=4, n_routed_experts=4, num_experts_per_tok=2,
            kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16, index_n_heads=2,
            index_head_dim=16, index_topk=8, max_position_embeddings=256, first_k_dense_replace=1,
            n_shared_experts=1, no_rope_layers=[1, 0, 0, 1])  # fmt: skip
_ML4_VISION = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, image_size=28,
                   patch_size=14, head_dim=16)  # fmt: skip
_STEP = dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
             num_key_value_heads=2, head_dim=16, moe_intermediate_size=32, n_routed_experts=4, num_experts_per_tok=2,
             share_expert_dim=24, sliding_window=8, num_sliding_attention_heads=8,
             layer_types=["sliding_attention", "full_attention", "full_attention", "sliding_attention"],
             mlp_layer_types=["dense", "sparse", "sparse", "sparse"])  # fmt: skip
_STEP_VISION = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=28, patch_size=14)
TOWERS = ("vision", "projector", "a buffer, not a parameter")


@pytest.fixture(scope="module")
def transformers() -> Any:
    return quiet_transformers()


def _mistral_large4(transformers: Any) -> Any:
    text = transformers.MistralLarge4TextConfig(**_ML4)
    config = transformers.MistralLarge4Config(text_config=text.to_dict(), vision_config=_ML4_VISION)
    return transformers.MistralLarge4ForConditionalGeneration(config)


def _step3p7(transformers: Any) -> Any:
    text = transformers.Step3p7TextConfig(**_STEP)
    config = transformers.Step3p7Config(text_config=text.to_dict(), vision_config=_STEP_VISION)
    return transformers.Step3p7ForConditionalGeneration(config)


# (model, names its checkpoint stores in the original format)
CASES = {
    "mistral_large4": (_mistral_large4, ("tok_embeddings.weight", "output.weight", "lerope.alpha",
                                         "layers.1.attention.wkv_a_with_mqa.weight", "layers.1.experts.3.w3.weight",
                                         "layers.1.attention.ssmax_scaling.s", "layers.0.feed_forward.w2.weight")),
    "step3p7": (_step3p7, ("model.layers.1.moe.gate_proj.weight", "model.layers.1.moe.up_proj.weight",
                           "model.layers.1.moe.router_bias", "model.layers.1.share_expert.up_proj.weight",
                           "model.layers.0.self_attn.g_proj.weight")),
}  # fmt: skip


def _saved(transformers: Any, family: str, directory: Path) -> int:
    """The family's tiny model saved to ``directory``; its text model's numel (the vision tower apart)."""
    import torch
    from safetensors import safe_open

    torch.manual_seed(0)
    build, names = CASES[family]
    model = build(transformers)
    model.save_pretrained(directory)
    with safe_open(str(directory / "model.safetensors"), framework="numpy") as handle:
        stored = set(handle.keys())
    assert set(names) <= stored, "save_pretrained no longer writes the original format"
    text = ("language_model", "lm_head")
    return sum(p.numel() for n, p in model.named_parameters() if any(t in n for t in text))


@pytest.mark.parametrize("family", sorted(CASES))
def test_an_original_format_checkpoint_is_placed_as_transformers_loads_it(
    transformers: Any, cli: Any, tmp_path: Path, family: str
) -> None:
    numel = _saved(transformers, family, tmp_path / family)
    result = cli("verify", str(tmp_path / family), "--checkpoint", "--format", "json")
    assert result.exit_code == 0, result.stderr
    check = json.loads(result.stdout)["results"][0]
    assert check["agree"] and check["missing"] == [] and check["shape_errors"] == []
    assert all(any(t in e["reason"] for t in TOWERS) for e in check["extra"]), check["extra"]
    assert check["stored_params"] == check["analytic_params"] == numel
    assert any("conversion mapping renamed" in note for note in check["notes"])
    analyze = cli("analyze", str(tmp_path / family / "config.json"), "--format", "json")
    breakdown = json.loads(analyze.stdout)["results"][0]["params"]["breakdown"]
    assert {c["key"]: c["stored_params"] for c in check["components"]} == breakdown
    experts = next(c for c in check["components"] if c["key"] == "decoder/moe/experts")
    assert experts["tensors"] == 2 * 3  # per MoE layer one merged gate_up_proj and one down_proj


def test_a_shape_error_names_the_tensor_as_stored(transformers: Any, cli: Any, tmp_path: Path) -> None:
    """A config that disagrees with the merged experts names the loaded tensor and the names it is stored as."""
    _saved(transformers, "mistral_large4", tmp_path / "ml4")
    config = tmp_path / "ml4" / "config.json"
    raw = json.loads(config.read_text())
    raw["text_config"]["moe_intermediate_size"] = 16
    config.write_text(json.dumps(raw))
    result = cli("verify", str(tmp_path / "ml4"), "--checkpoint", "--format", "json")
    assert result.exit_code == 3 and "Traceback" not in result.stderr
    errors = {e["tensor"]: e["reason"] for e in json.loads(result.stdout)["results"][0]["shape_errors"]}
    reason = errors["model.language_model.layers.1.mlp.experts.down_proj"]
    assert "(stored as layers.1.experts.0.w2.weight and 3 more)" in reason


def test_without_transformers_the_unplaced_tensors_name_the_extra(
    transformers: Any, cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _saved(transformers, "mistral_large4", tmp_path / "ml4")
    monkeypatch.setitem(sys.modules, "embedcalc.modeling.hf_conversion", None)  # import fails as without it
    result = cli("verify", str(tmp_path / "ml4"), "--checkpoint", "--format", "json")
    assert result.exit_code == 3 and "Traceback" not in result.stderr
    check = json.loads(result.stdout)["results"][0]
    unplaced = [e for e in check["extra"] if e["reason"].startswith("no component")]
    assert unplaced and all("pip install 'embedcalc[transformers]'" in e["reason"] for e in unplaced)
    assert "layers.1.attention.wkv_a_with_mqa.weight" in {e["tensor"] for e in unplaced}
    assert any("embedcalc[transformers]" in note for note in check["notes"])


def test_a_model_transformers_cannot_build_keeps_the_first_placement(
    transformers: Any, cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from embedcalc.modeling import hf_conversion

    _saved(transformers, "step3p7", tmp_path / "step")

    def refuse(*_: Any) -> Any:
        raise ValueError("a value its configuration class refuses")

    monkeypatch.setattr(hf_conversion, "load_names", refuse)
    result = cli("verify", str(tmp_path / "step"), "--checkpoint", "--format", "json")
    assert result.exit_code == 3 and "Traceback" not in result.stderr
    notes = json.loads(result.stdout)["results"][0]["notes"]
    assert any(
        "could not build the model" in n and "a value its configuration class refuses" in n for n in notes
    )


def test_a_family_transformers_converts_nothing_of_never_imports_it(
    transformers: Any, tmp_path: Path
) -> None:
    """A LLaMA checkpoint that disagrees with its config (an extra tensor outside every component): LLaMA has no
    conversion mapping, so verify reports it without importing transformers or torch."""
    from safetensors.numpy import save_file

    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2))  # fmt: skip
    model.save_pretrained(tmp_path / "llama")
    tensors = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    tensors["model.layers.0.adapter.weight"] = tensors["model.norm.weight"]
    save_file(tensors, str(tmp_path / "llama" / "model.safetensors"))
    code = ("import sys, embedcalc.api.checkpoint as c; r = c.verify_checkpoint(sys.argv[1]); "
            "assert not r.agree or r.extra; assert 'torch' not in sys.modules, 'torch imported'; "
            "assert 'transformers' not in sys.modules, 'transformers imported'; print(len(r.extra))")  # fmt: skip
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "llama")], capture_output=True, text=True,
                          check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "1"


def test_an_original_format_checkpoint_opens_nothing_outside_its_directory(
    transformers: Any, cli: Any, tmp_path: Path
) -> None:
    """Applying the mapping builds the model from the config alone: every file opened is the checkpoint's or the
    interpreter's own (issue 33's guarantee, tests/opened_files.py)."""
    from opened_files import opened_files

    _saved(transformers, "step3p7", tmp_path / "step")
    recorder = opened_files()
    with recorder.record():
        result = cli("verify", str(tmp_path / "step"), "--checkpoint", "--format", "json")
    assert result.exit_code == 0, result.stderr
    assert recorder.outside(tmp_path / "step") == []


def _rewrite_header(path: Path, change: Any) -> None:
    """The safetensors file at ``path`` replaced by its header alone, ``change``d (verify reads headers only)."""
    import struct

    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    change(header)
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text)


@pytest.mark.parametrize("shape", [[16, 64], [2**40, 2**40]])
def test_experts_the_converter_cannot_merge_are_kept_as_stored(
    transformers: Any, cli: Any, tmp_path: Path, shape: list[int]
) -> None:
    """One expert of another shape (the merge's stack fails) or of a shape no tensor can have (2^80 elements): those
    tensors stay under their stored names, the rest is converted, and the result is a disagreement (exit 3) naming
    them, never a traceback."""
    _saved(transformers, "mistral_large4", tmp_path / "ml4")

    def change(header: dict[str, Any]) -> None:
        header["layers.1.experts.2.w1.weight"]["shape"] = shape

    _rewrite_header(tmp_path / "ml4" / "model.safetensors", change)
    result = cli("verify", str(tmp_path / "ml4"), "--checkpoint", "--format", "json")
    assert result.exit_code == 3 and "Traceback" not in result.stderr
    check = json.loads(result.stdout)["results"][0]
    assert any("could not run on the stored shapes" in n for n in check["notes"])
    assert any("conversion mapping renamed" in n for n in check["notes"])
