"""Qwen3.5 and Qwen3.5-MoE (``qwen3_5_text``, ``qwen3_5_moe_text`` and their vision-language wrappers ``qwen3_5``,
``qwen3_5_moe``) against the models transformers builds: Qwen3-Next's gated DeltaNet / gated attention stack with a
dense MLP in every layer, or the MoE block (routed experts plus a gated shared expert) in every layer.

Small files written by transformers' own config classes: the parameter total equals transformers' numel on the
meta device (the vision tower excluded for the wrappers), the active count the total less the routed experts a
token skips, the attention layers' KV cache and the DeltaNet layers' state follow the config object (the scan's
state in float32, as transformers' torch path keeps it), every key is mapped or ignored with a reason, and forward
FLOPs equal ``FlopCounterMode`` on the CPU path plus the convolution's padded tail (analysis/mixers.py).
"""

from __future__ import annotations

from typing import Any

import pytest
from hf_reference import forward_flops, mapped_config, quiet_transformers, unaccounted_keys

from embedcalc.analysis.flops import forward_flops as analytic_flops
from embedcalc.analysis.memory import estimate_memory
from embedcalc.analysis.params import active_params, count_params
from embedcalc.analysis.workload import Workload
from embedcalc.sources.hf import map_hf_config


@pytest.fixture(scope="module")
def transformers() -> Any:
    pytest.importorskip("torch")
    return quiet_transformers()


_TEXT = dict(vocab_size=256, hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
             head_dim=16, linear_num_value_heads=4, linear_num_key_heads=2, linear_key_head_dim=8,
             linear_value_head_dim=16, max_position_embeddings=512,
             rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25,
                              "mrope_section": [1, 1, 0]})  # fmt: skip
TEXT = {
    "qwen3_5_text": ("Qwen3_5TextConfig", _TEXT | dict(intermediate_size=96)),
    "qwen3_5_moe_text": ("Qwen3_5MoeTextConfig", _TEXT | dict(moe_intermediate_size=16, num_experts=4,
                                                              num_experts_per_tok=2,
                                                              shared_expert_intermediate_size=24)),
}  # fmt: skip
WRAPPERS = {"qwen3_5": ("Qwen3_5Config", "Qwen3_5ForConditionalGeneration", "qwen3_5_text"),
            "qwen3_5_moe": ("Qwen3_5MoeConfig", "Qwen3_5MoeForConditionalGeneration", "qwen3_5_moe_text")}  # fmt: skip
_VISION = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64)


def _text(transformers: Any, name: str) -> Any:
    cls, kwargs = TEXT[name]
    return getattr(transformers, cls)(**kwargs)


def _unused(cfg: Any) -> int:
    if cfg.model_type != "qwen3_5_moe_text":
        return 0
    per_layer = (cfg.num_experts - cfg.num_experts_per_tok) * 3 * cfg.hidden_size * cfg.moe_intermediate_size
    return cfg.num_hidden_layers * per_layer


def _numel(model: Any, skip: str = "") -> int:
    return sum(p.numel() for name, p in model.named_parameters() if not (skip and name.startswith(skip)))


@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(TEXT))
def test_text_model_counts_what_transformers_builds(transformers: Any, name: str) -> None:
    import torch

    cfg = _text(transformers, name)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
    raw = cfg.to_dict()
    ours = mapped_config(raw)
    assert map_hf_config(raw, "test").report.family == name
    assert count_params(ours).total == _numel(model)
    assert active_params(ours) == _numel(model) - _unused(cfg)
    assert unaccounted_keys(raw) == set()
    full = cfg.layer_types.count("full_attention")
    linear = cfg.layer_types.count("linear_attention")
    key, value = (
        cfg.linear_num_key_heads * cfg.linear_key_head_dim,
        cfg.linear_num_value_heads * cfg.linear_value_head_dim,
    )
    window = (2 * key + value) * cfg.linear_conv_kernel_dim  # the conv's window, in the model's dtype
    scan = cfg.linear_num_value_heads * cfg.linear_key_head_dim * cfg.linear_value_head_dim  # float32
    for n in (1, 300):
        memory = estimate_memory(ours, Workload(batch_size=2, seq_len=n, dtype="bfloat16"))
        assert memory.kv_cache_bytes == 2 * n * full * 2 * cfg.num_key_value_heads * cfg.head_dim * 2
        assert memory.recurrent_state_bytes == 2 * linear * (window * 2 + scan * 4)


@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(TEXT))
@pytest.mark.parametrize("seq_len", [16, 70])
def test_forward_flops_equal_transformers_torch_path_plus_the_conv_tail(
    transformers: Any, name: str, seq_len: int
) -> None:
    import torch

    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(
        _text(transformers, name), attn_implementation="eager", experts_implementation="eager"
    ).eval()
    config = mapped_config(_text(transformers, name).to_dict())
    ours = analytic_flops(config, Workload(batch_size=2, seq_len=seq_len)).forward
    mixers = [blk.mixer for blk, n in config.stack_plan("decoder").counts() for _ in range(n) if blk.mixer]
    conv_tail = sum(2 * 2 * m.conv_dim * m.conv_kernel * (m.conv_kernel - 1) for m in mixers)
    assert forward_flops(model, batch=2, seq_len=seq_len) == ours + conv_tail


@pytest.mark.torch
@pytest.mark.parametrize("wrapper", sorted(WRAPPERS))
@pytest.mark.parametrize("tied", [False, True])
def test_wrapper_counts_its_language_model(transformers: Any, wrapper: str, tied: bool) -> None:
    import torch

    config_class, model_class, text = WRAPPERS[wrapper]
    config = getattr(transformers, config_class)(
        text_config=TEXT[text][1], vision_config=_VISION, tie_word_embeddings=tied
    )
    config._attn_implementation = "eager"
    with torch.device("meta"):
        model = getattr(transformers, model_class)(config)
    raw = config.to_dict()
    assert count_params(mapped_config(raw)).total == _numel(model, skip="model.visual.")
    assert map_hf_config(raw, "test").report.family == text
