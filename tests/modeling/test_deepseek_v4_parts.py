"""DeepSeek-V4's parts as general features of the layer model, against what transformers builds and runs.

Its grouped low-rank output projection (``attention.out_groups`` / ``out_rank``): ``o_a_proj``
(``DeepseekV4GroupedLinear``) and ``o_b_proj``, parameters and FLOPs. Its hyper-connections
(``hyper_connections``; analysis/hyper.py, modeling/hyper.py): ``DeepseekV4HyperConnection`` (``attn_hc``,
``ffn_hc``) and ``DeepseekV4HyperHead`` (``hc_head``) of a small ``DeepseekV4ForCausalLM``, their parameters and
the FLOPs ``FlopCounterMode`` counts in them and in the decoder layer's own stream mix (combᵀ @ streams); and
embedcalc's torch model of the same feature against the analytic breakdown, every key, on a decoder with MoE layers."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from embedcalc.analysis.flops import forward_flops  # noqa: E402
from embedcalc.analysis.params import count_params  # noqa: E402
from embedcalc.analysis.workload import Workload  # noqa: E402
from embedcalc.config.schema import ModelConfig  # noqa: E402
from embedcalc.errors import ConfigError  # noqa: E402
from embedcalc.modeling import build_model, component_flops, component_params  # noqa: E402
from embedcalc.sources.loading import validate_config  # noqa: E402

pytestmark = pytest.mark.torch

N_STREAMS, D, LAYERS, B, T = 3, 64, 4, 2, 16
_V4 = dict(vocab_size=256, hidden_size=D, moe_intermediate_size=32, num_hidden_layers=LAYERS, num_attention_heads=4,
           head_dim=32, q_lora_rank=16, n_routed_experts=4, num_experts_per_tok=2, o_groups=2, o_lora_rank=16,
           index_n_heads=2, index_head_dim=16, index_topk=4, sliding_window=8, hc_mult=N_STREAMS,
           compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 8},
           max_position_embeddings=256, partial_rotary_factor=0.25)  # fmt: skip
_OURS: dict[str, Any] = {
    "architecture": "decoder", "vocab_size": 256, "max_seq_len": 64, "embed_dim": D, "num_heads": 4,
    "num_layers": LAYERS, "ffn_dim": 96, "position": "rope", "activation": "swiglu", "norm": "rmsnorm",
    "bias": False, "hyper_connections": N_STREAMS,
    "blocks": {"moe": {"ffn": {"kind": "moe", "num_experts": 4, "top_k": 2, "expert_dim": 32}}},
    "layers": [{"pattern": ["default", "moe"], "repeat": 2}],
}  # fmt: skip


@pytest.fixture(scope="module")
def deepseek_v4() -> tuple[dict[str, int], dict[str, int]]:
    """A small DeepseekV4ForCausalLM's parameters by name and ``FlopCounterMode``'s FLOPs by module, one forward of
    B x T tokens on the CPU."""
    transformers = pytest.importorskip("transformers")
    from torch.utils.flop_counter import FlopCounterMode

    if not hasattr(transformers, "DeepseekV4Config"):
        pytest.skip("this transformers has no DeepSeek-V4")
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    model = transformers.DeepseekV4ForCausalLM._from_config(
        transformers.DeepseekV4Config(**_V4), attn_implementation="eager"
    ).eval()
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(torch.randint(0, 256, (B, T)))
    counts = {name.removeprefix("DeepseekV4ForCausalLM."): sum(c.values())
              for name, c in counter.get_flop_counts().items()}  # fmt: skip
    return {n: p.numel() for n, p in model.named_parameters()}, counts


def test_grouped_output_is_what_transformers_builds_and_counts(
    deepseek_v4: tuple[dict[str, int], dict[str, int]],
) -> None:
    params, counts = deepseek_v4
    numel = sum(v for n, v in params.items() if ".o_a_proj." in n or ".o_b_proj." in n)
    flops = sum(
        counts[f"model.layers.{i}.self_attn.{p}"] for i in range(LAYERS) for p in ("o_a_proj", "o_b_proj")
    )
    ours = {**_OURS, "num_heads": 4, "head_dim": 32, "attention": {"out_groups": 2, "out_rank": 16}}
    config = validate_config(ours, {}, [], "test")
    assert count_params(config)["decoder/attention/out"] == numel
    assert (
        forward_flops(config, Workload(batch_size=B, seq_len=T)).breakdown["decoder/attention/out"] == flops
    )


def test_hyper_connections_are_what_transformers_builds_and_counts(
    deepseek_v4: tuple[dict[str, int], dict[str, int]],
) -> None:
    params, counts = deepseek_v4
    numel = {
        where: sum(v for n, v in params.items() if f".{where}." in n)
        for where in ("attn_hc", "ffn_hc", "hc_head")
    }
    hc_flops = counts["model.hc_head"]
    for i in range(LAYERS):
        layer = f"model.layers.{i}"
        children = sum(counts.get(f"{layer}.{c}", 0) for c in ("self_attn", "mlp", "attn_hc", "ffn_hc"))
        hc_flops += (
            counts[f"{layer}.attn_hc"] + counts[f"{layer}.ffn_hc"] + counts[layer] - children
        )  # the mixes

    config = validate_config(dict(_OURS), {}, [], "test")
    params = count_params(config)
    assert params["decoder/hyper/attention"] == numel["attn_hc"]
    assert params["decoder/hyper/ffn"] == numel["ffn_hc"]
    assert params["decoder/hyper_head"] == numel["hc_head"]
    flops = forward_flops(config, Workload(batch_size=B, seq_len=T)).breakdown
    assert (
        flops["decoder/hyper/attention"] + flops["decoder/hyper/ffn"] + flops["decoder/hyper_head"]
        == hc_flops
    )


def test_torch_model_equals_the_analysis_and_runs() -> None:
    config = ModelConfig.model_validate(_OURS)
    model = build_model(config)
    assert component_params(model) == dict(count_params(config).items())
    measured = component_flops(config, model, batch_size=B, seq_len=T)
    assert measured == {k: v for k, v in forward_flops(config, Workload(batch_size=B, seq_len=T)).breakdown.items()
                        if v}  # fmt: skip
    cpu = build_model(config, device="cpu", seed=1)
    with torch.no_grad():
        out = cpu(torch.randint(0, 256, (B, T))).main
    assert out.shape == (B, T, 256) and bool(torch.isfinite(out).all())


@pytest.mark.parametrize("extra", [{"architecture": "encoder"}, {"norm_placement": "post"},
                                   {"altup_inputs": 2}])  # fmt: skip
def test_hyper_connections_need_a_pre_norm_decoder_without_altup(extra: dict[str, Any]) -> None:
    with pytest.raises(ConfigError) as info:
        validate_config({**_OURS, **extra}, {}, [], "test")
    assert "hyper_connections" in str(info.value)


def test_compressed_attention_torch_model_equals_the_analysis() -> None:
    """DeepSeek-V4's whole layer (compressed attention: sliding, heavily compressed, compressed sparse with its
    indexer; the grouped output, the hyper-connections, the MoE) as embedcalc's torch model builds it from the mapped
    small file: every parameter and FLOP key equals the analysis (which test_hf_deepseek_v4 holds to transformers), at
    lengths that fill whole windows, leave a remainder and close none; and it runs on the CPU."""
    from embedcalc.sources.hf import map_hf_config

    schedule = ["sliding_attention", "heavily_compressed_attention", "compressed_sparse_attention"]
    raw = {
        "model_type": "deepseek_v4",
        **_V4,
        "sliding_window": 32,
        "num_hidden_layers": 3,
        "layer_types": schedule,
    }
    mapping = map_hf_config(raw, "test")
    config = validate_config(dict(mapping.data), dict(mapping.user_keys), [], "test")
    model = build_model(config)
    assert component_params(model) == {k: v for k, v in count_params(config).items() if v}
    for length in (16, 14, 3):
        analytic = forward_flops(config, Workload(batch_size=B, seq_len=length)).breakdown
        assert component_flops(config, model, batch_size=B, seq_len=length) == {
            k: v for k, v in analytic.items() if v
        }
    cpu = build_model(config, device="cpu", seed=2)
    with torch.no_grad():
        out = cpu(torch.randint(0, 256, (B, T))).main
    assert bool(torch.isfinite(out).all())
