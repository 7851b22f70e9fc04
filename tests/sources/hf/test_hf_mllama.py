"""Llama-3.2-Vision's text model (``mllama``, ``mllama_text_model``) against transformers' ``MllamaForCausalLM``.

The fixture ``tests/fixtures/hf/llama-3.2-11b-vision.json`` is what transformers 5.24's ``MllamaConfig().to_dict()``
writes for meta-llama/Llama-3.2-11B-Vision's shape (tests/fixtures/published_sizes.yaml says how). Checked here:
every key of its text model is mapped or ignored with a reason; the vision tokens come from its ``vision_config``
(and from MllamaVisionConfig's defaults for a bare text config); the KV cache, layer by layer, is what transformers'
own cache holds after a forward with vision states on the CPU; forward FLOPs equal ``FlopCounterMode`` on a small
eager variant run with ``cross_attention_states``; and variants of the file count what transformers builds.
"""

from __future__ import annotations

import copy
import json
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from hf_reference import forward_flops, mapped_config, numel, raw_fixture

from embedcalc.analysis.flops import forward_flops as analytic_flops
from embedcalc.analysis.memory import kv_cache_bytes
from embedcalc.analysis.params import count_params
from embedcalc.analysis.workload import Workload
from embedcalc.sources.hf import map_hf_config

NAME = "llama-3.2-11b-vision"


def _small(raw: dict[str, Any], cross: list[int] | None = None) -> dict[str, Any]:
    """A small variant of the file: 5 layers (cross-attention at 1 and 3), width 64, 4 heads (2 KV), MLP 96,
    vocab 300; two 28-pixel tiles of 14-pixel patches: 2 x (2^2 + 1) = 10 vision tokens."""
    small = copy.deepcopy(raw)
    small["text_config"] |= {
        "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 96,
        "num_hidden_layers": 5, "vocab_size": 300, "cross_attention_layers": [1, 3] if cross is None else cross,
        "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 3, "max_position_embeddings": 64,
    }  # fmt: skip
    small["vision_config"] |= {"image_size": 28, "patch_size": 14, "max_num_tiles": 2,
                               "supported_aspect_ratios": [[1, 1], [1, 2], [2, 1]]}  # fmt: skip
    small["image_token_index"] = 299
    return small


def _hf_text_model(transformers: Any, raw: dict[str, Any], device: str = "meta") -> Any:
    import torch

    config = transformers.MllamaConfig.from_dict(raw)
    with torch.device(device):
        torch.manual_seed(0)
        model = transformers.MllamaForCausalLM._from_config(config.text_config, attn_implementation="eager")
    return model.float().eval()  # the file's bfloat16 dtype: float32 for the CPU runs


def test_every_key_is_mapped_or_ignored_and_the_vision_tokens_come_from_vision_config() -> None:
    raw = raw_fixture(NAME)
    report = map_hf_config(raw, "test").report
    seen = {k.strip() for m in report.mapped for k in m.key.split(",")} | {i.key for i in report.ignored}
    text_keys = {f"text_config.{k}" for k in raw["text_config"]}
    assert text_keys | (set(raw) - {"text_config"}) <= seen | {"model_type"}
    assert "text model of a multimodal file" in report.counted_as and "MllamaForCausalLM" in report.counted_as
    mapped = {m.field: m for m in report.mapped}
    assert mapped["context_tokens"].value == 4 * ((560 // 14) ** 2 + 1) == 6404
    assert mapped["context_tokens"].key == "vision_config" and mapped["context_tokens"].origin == "file"
    bare = map_hf_config(
        raw["text_config"], "test"
    ).report  # a text config alone: MllamaVisionConfig's defaults
    assert {m.field: m.value for m in bare.mapped}["context_tokens"] == 4 * ((448 // 14) ** 2 + 1)


def test_the_file_counts_what_transformers_builds(hf_transformers: Any) -> None:
    raw = raw_fixture(NAME)
    config = mapped_config(raw)
    total = numel(_hf_text_model(hf_transformers, raw))
    assert count_params(config).total == total == 9_775_192_080
    breakdown = count_params(config).as_dict()
    assert breakdown["embedding/token"] == (128256 + 8) * 4096  # MllamaTextModel's vocab_size + 8 rows
    assert breakdown["decoder/attention/tanh_gate"] == breakdown["decoder/ffn/tanh_gate"] == 8


@pytest.mark.parametrize("cross", [[], [0], [0, 1, 2, 3, 4], [4, 2]])
def test_variants_count_what_transformers_builds(hf_transformers: Any, cross: list[int]) -> None:
    """No cross layer, only the first, every layer, an unsorted list."""
    small = _small(raw_fixture(NAME), cross)
    assert count_params(mapped_config(small)).total == numel(_hf_text_model(hf_transformers, small))


def _run(transformers: Any, small: dict[str, Any], batch: int, seq_len: int) -> tuple[Any, Any]:
    """(model, cross_attention_states) of the small variant on the CPU, eager attention."""
    import torch

    model = _hf_text_model(transformers, small, "cpu")
    tokens = mapped_config(small).context_tokens
    assert tokens is not None
    states = torch.randn(batch, tokens, model.config.hidden_size, generator=torch.Generator().manual_seed(1))
    return model, states


def test_kv_cache_per_layer_equals_transformers_cache(hf_transformers: Any) -> None:
    """After a prefill of 6 tokens with vision states, transformers' cache holds, per layer, K and V of the 6 text
    tokens (self-attention) or of the 10 vision tokens (cross-attention); embedcalc's KV cache of the first i
    layers grows by exactly those bytes, layer by layer."""
    import torch

    small = _small(raw_fixture(NAME))
    config = mapped_config(small)
    batch, seq_len = 2, 6
    model, states = _run(hf_transformers, small, batch, seq_len)
    ids = torch.zeros(batch, seq_len, dtype=torch.long)
    with torch.no_grad():
        cache = model(input_ids=ids, cross_attention_states=states, use_cache=True).cache
    held = [sum(t.numel() * t.element_size() for t in (layer.keys, layer.values)) for layer in cache.layers]
    assert (
        held[1] == held[3] == 2 * batch * 2 * 16 * 10 * 4
    )  # K and V, 2 KV heads of 16, 10 vision tokens, fp32
    workload = Workload(batch_size=batch, seq_len=seq_len)
    cumulative = [kv_cache_bytes(config, workload, decoder_layers=i) for i in range(6)]
    assert [b - a for a, b in pairwise(cumulative)] == held
    assert kv_cache_bytes(config, workload) == sum(held)


def test_forward_flops_equal_flop_counter(hf_transformers: Any) -> None:
    small = _small(raw_fixture(NAME))
    config = mapped_config(small)
    measured = {}
    for batch, seq_len in ((1, 5), (2, 16)):
        model, states = _run(hf_transformers, small, batch, seq_len)
        measured[batch, seq_len] = forward_flops(
            model, batch, seq_len, extra={"cross_attention_states": states}
        )
    assert {
        (b, n): analytic_flops(config, Workload(batch_size=b, seq_len=n)).forward for b, n in measured
    } == measured


def test_verify_checkpoint_files_the_text_model_and_leaves_the_vision_tower_out(
    hf_transformers: Any, cli: Any, tmp_path: Path
) -> None:
    """``verify DIR --checkpoint`` on a small MllamaForConditionalGeneration written by ``save_pretrained``: every
    tensor of the text model lands on its component (the cross layers' ``cross_attn.*`` and their two gates, the
    vocab_size + 8 token rows), each holding what analyze counts; the vision tower and projector are listed as
    held by no component."""
    import torch

    small = _small(raw_fixture(NAME))
    small["vision_config"] |= {"hidden_size": 32, "num_hidden_layers": 2, "num_global_layers": 1,
                               "attention_heads": 2, "intermediate_size": 64, "vision_output_dim": 96,
                               "intermediate_layers_indices": [0, 1]}  # fmt: skip
    config = hf_transformers.MllamaConfig.from_dict(small)
    torch.manual_seed(0)
    model = hf_transformers.MllamaForConditionalGeneration(config).float()
    model.save_pretrained(tmp_path / "mllama")
    text = numel(_hf_text_model(hf_transformers, small, "cpu"))
    result = cli("verify", str(tmp_path / "mllama"), "--checkpoint", "--format", "json")
    assert result.exit_code == 0, result.stderr
    check = json.loads(result.stdout)["results"][0]
    assert check["missing"] == [] and check["shape_errors"] == []
    assert check["stored_params"] == check["analytic_params"] == text
    keys = {c["key"]: c for c in check["components"]}
    assert all(c["stored_params"] == c["analytic_params"] for c in keys.values())
    assert (
        keys["decoder/attention/tanh_gate"]["stored_params"]
        == keys["decoder/ffn/tanh_gate"]["stored_params"]
        == 2
    )
    outside = [e for e in check["extra"] if e["reason"] != "a buffer, not a parameter"]
    assert outside and all(
        ("vision_model" in e["tensor"] or "multi_modal_projector" in e["tensor"]) for e in outside
    )
    vision = sum(p.numel() for n, p in model.named_parameters() if "vision_model" in n or "multi_modal" in n)
    assert vision + text == sum(p.numel() for p in model.parameters())


# embedcalc's module path (layer i) -> transformers' (MllamaForCausalLM); {attn}: self_attn or cross_attn
_WEIGHTS = {
    "attention.norm": "input_layernorm", "attention.qkv.q": "{attn}.q_proj", "attention.qkv.k": "{attn}.k_proj",
    "attention.qkv.v": "{attn}.v_proj", "attention.out": "{attn}.o_proj", "attention.qk_norm.q": "cross_attn.q_norm",
    "attention.qk_norm.k": "cross_attn.k_norm", "ffn.in_.gate": "mlp.gate_proj", "ffn.in_.up": "mlp.up_proj",
    "ffn.out": "mlp.down_proj", "ffn.norm": "post_attention_layernorm",
}  # fmt: skip


def _hf_name(name: str, cross: set[int]) -> str:
    """transformers' parameter name for one of embedcalc's (the table above; the gates are the layer's own)."""
    outside = {"embedding.token.weight": "model.embed_tokens.weight", "decoder.final_norm.weight": "model.norm.weight",
               "head.lm.weight": "lm_head.weight"}  # fmt: skip
    if name in outside:
        return outside[name]
    _, _, index, rest = name.split(".", 3)
    module = rest.removesuffix(".weight")
    gates = {"attention.tanh_gate": "cross_attn_attn_gate", "ffn.tanh_gate": "cross_attn_mlp_gate"}
    if module in gates:
        return f"model.layers.{index}.{gates[module]}"
    attn = "cross_attn" if int(index) in cross else "self_attn"
    return f"model.layers.{index}.{_WEIGHTS[module].format(attn=attn)}.weight"


def test_the_torch_model_computes_what_transformers_computes(hf_transformers: Any) -> None:
    """embedcalc's model with transformers' weights gives MllamaForCausalLM's logits for the same token ids and
    vision states (RoPE theta 10000 as embedcalc builds it; gates set away from their zero init, so the cross
    layers act): the q/k norms per head on queries and keys, no RoPE and no mask in the cross layers, the tanh
    gates on both sublayers. embedcalc's RMSNorm epsilon (1e-6, numerics only) is set to the file's 1e-5."""
    import torch

    from embedcalc.modeling import build_model

    small = _small(raw_fixture(NAME))
    small["text_config"]["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0}
    config = mapped_config(small)
    model, states = _run(hf_transformers, small, 2, 7)
    theirs = dict(model.named_parameters())
    with torch.no_grad():
        for layer in model.model.layers:
            if hasattr(layer, "cross_attn_attn_gate"):
                layer.cross_attn_attn_gate.fill_(0.7)
                layer.cross_attn_mlp_gate.fill_(-0.4)
    ours = build_model(config, attention="eager", device="cpu")
    cross = set(small["text_config"]["cross_attention_layers"])
    ours.load_state_dict({n: theirs[_hf_name(n, cross)].detach() for n, _ in ours.named_parameters()})
    for norm in ours.modules():
        if isinstance(norm, torch.nn.RMSNorm):
            norm.eps = small["text_config"]["rms_norm_eps"]
    ids = torch.randint(0, 300, (2, 7), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        expected = model(input_ids=ids, cross_attention_states=states, use_cache=False).logits
        got = ours(ids, context=states).logits
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
