"""DeepSeek-V4 (``families/deepseek_v4.py``: ``deepseek_v4``) against the model transformers builds: small files
written by ``DeepseekV4Config`` (its default layer schedule, explicit ``layer_types`` with sliding-window layers,
the legacy ``compress_ratios`` / ``num_hash_layers`` / ``qk_rope_head_dim`` keys of the published checkpoints) and
the published DeepSeek-V4-Flash config.json (tests/fixtures/hf/deepseek-v4-flash.json, deepseek-ai's file).

Read natively (no general reader): the parameters per component equal transformers' modules on the meta device,
the total its numel (284,332,230,231 for DeepSeek-V4-Flash), the active count the total less the routed experts a
token skips, the cache the bytes transformers' own cache holds after a forward (the window's keys, the pooled
entries, the tokens waiting for a window, the overlap state), every key is mapped or ignored with a reason, and the
forward FLOPs equal ``FlopCounterMode`` on an eager CPU build (eager attention and experts) at lengths that do and
do not fill a compress window.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from hf_reference import mapped_config, published, raw_fixture, unaccounted_keys
from saved_checkpoint import verify_saved

from embedcalc.analysis.flops import forward_flops as analytic_flops
from embedcalc.analysis.memory import kv_cache_bytes
from embedcalc.analysis.params import active_params, count_params
from embedcalc.analysis.workload import Workload
from embedcalc.errors import ConfigError

pytestmark = pytest.mark.torch

_SMALL = dict(vocab_size=256, hidden_size=64, moe_intermediate_size=32, num_hidden_layers=4, num_attention_heads=4,
              head_dim=32, q_lora_rank=16, n_routed_experts=4, num_experts_per_tok=2, o_groups=2, o_lora_rank=16,
              index_n_heads=2, index_head_dim=16, index_topk=3, sliding_window=32, hc_mult=3,
              compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 8},
              max_position_embeddings=256, partial_rotary_factor=0.25)  # fmt: skip
VARIANTS: dict[str, dict[str, Any]] = {
    "default_schedule": _SMALL,
    "sliding_layers_two_streams": _SMALL | dict(
        num_hidden_layers=5, hc_mult=2, o_groups=4, o_lora_rank=8,
        layer_types=["sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention",
                     "sliding_attention", "compressed_sparse_attention"],
        mlp_layer_types=["hash_moe", "moe", "moe", "moe", "moe"], mlp_bias=True),
    "legacy_keys": {k: v for k, v in _SMALL.items() if k not in ("compress_rates", "partial_rotary_factor")}
    | dict(compress_ratios=[0, 4, 128, 4, 0], compress_rate_csa=4, compress_rate_hca=8, num_hash_layers=2,
           qk_rope_head_dim=8, tie_word_embeddings=True),
}  # fmt: skip
# transformers' module names -> embedcalc's breakdown keys (first match wins)
_COMPONENTS = (
    (r"compressor\.indexer\.q_b_proj", "decoder/attention/index_q"),
    (r"compressor\.indexer\.scorer", "decoder/attention/index_weights"),
    (r"compressor\.indexer\.", "decoder/attention/index_compressor"),
    (r"compressor\.", "decoder/attention/compressor"),
    (r"self_attn\.q_a_proj", "decoder/attention/q_a"), (r"self_attn\.q_a_norm", "decoder/attention/q_a_norm"),
    (r"self_attn\.q_b_proj", "decoder/attention/q_b"), (r"self_attn\.kv_proj", "decoder/attention/kv"),
    (r"self_attn\.kv_norm", "decoder/attention/kv_norm"), (r"self_attn\.o_[ab]_proj", "decoder/attention/out"),
    (r"self_attn\.sinks", "decoder/attention/sinks"), (r"input_layernorm", "decoder/attention/norm"),
    (r"post_attention_layernorm", "decoder/ffn/norm"), (r"mlp\.gate\.", "decoder/moe/router"),
    (r"mlp\.experts\.", "decoder/moe/experts"), (r"mlp\.shared_experts\.", "decoder/moe/shared"),
    (r"attn_hc\.", "decoder/hyper/attention"), (r"ffn_hc\.", "decoder/hyper/ffn"),
    (r"hc_head\.", "decoder/hyper_head"), (r"model\.norm\.", "decoder/final_norm"),
    (r"embed_tokens", "embedding/token"), (r"lm_head", "head/lm"),
)  # fmt: skip


@pytest.fixture(scope="module")
def transformers() -> Any:
    pytest.importorskip("torch")
    from hf_reference import quiet_transformers

    module = quiet_transformers()
    if not hasattr(module, "DeepseekV4Config"):
        pytest.skip("this transformers has no DeepSeek-V4")
    return module


def _components(model: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, param in model.named_parameters():
        key = next(k for pattern, k in _COMPONENTS if re.search(pattern, name))
        out[key] = out.get(key, 0) + param.numel()
    return out


def _cache_bytes(cache: Any) -> int:
    """Every floating tensor transformers' cache layers hold (keys and values are one tensor: counted once)."""
    import torch

    seen: dict[int, int] = {}
    for layer in cache.layers:
        for value in vars(layer).values():
            for t in value.values() if isinstance(value, dict) else [value]:
                if isinstance(t, torch.Tensor) and t.dim() and t.is_floating_point():
                    seen[id(t)] = t.numel() * t.element_size()
    return sum(seen.values())


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_counts_what_transformers_builds(transformers: Any, name: str) -> None:
    import torch

    config = transformers.DeepseekV4Config(**VARIANTS[name])
    with torch.device("meta"):
        components = _components(transformers.DeepseekV4ForCausalLM(config))
    total = sum(components.values())
    expert = 3 * config.hidden_size * config.moe_intermediate_size
    unused = config.num_hidden_layers * (config.n_routed_experts - config.num_experts_per_tok) * expert
    torch.manual_seed(0)
    model = transformers.DeepseekV4ForCausalLM._from_config(config, attn_implementation="eager").eval()
    hand = {"model_type": "deepseek_v4", **VARIANTS[name]}
    for raw in (config.to_dict(), hand):
        ours = mapped_config(raw)
        counted = count_params(ours)
        assert {k: v for k, v in counted.items() if v} == components
        assert counted.total == total
        assert active_params(ours) == total - unused
        assert unaccounted_keys(raw) == set()
        for length in (16, 14, 3):  # whole windows, a remainder, no window closed
            with torch.no_grad():
                cache = model(torch.randint(0, 256, (2, length)), use_cache=True).past_key_values
            workload = Workload(batch_size=2, seq_len=length, dtype="float32")
            assert kv_cache_bytes(ours, workload) == _cache_bytes(cache), length


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_forward_flops_equal_flop_counter(transformers: Any, name: str) -> None:
    from hf_reference import forward_flops

    config = transformers.DeepseekV4Config(**VARIANTS[name])
    model = transformers.DeepseekV4ForCausalLM._from_config(
        config, attn_implementation="eager", experts_implementation="eager"
    ).eval()
    ours = mapped_config(config.to_dict())
    for length in (16, 13):
        measured = forward_flops(model, batch=2, seq_len=length)
        assert analytic_flops(ours, Workload(batch_size=2, seq_len=length)).forward == measured, length


def test_the_published_file_is_read_natively(transformers: Any) -> None:
    """deepseek-ai's DeepSeek-V4-Flash config.json: its 44 legacy compress_ratios (the last, the MTP layer's, not
    built), num_hash_layers, qk_rope_head_dim and FP8 quantization_config; the total is what transformers builds
    from it on the meta device."""
    import torch
    from hf_reference import fixture_path

    from embedcalc.api.analyze import analyze_target

    raw = raw_fixture("deepseek-v4-flash")
    row = published("test_hf_deepseek_v4")["deepseek-v4-flash"]
    analysis = analyze_target(
        str(fixture_path("deepseek-v4-flash")), None, Workload(batch_size=1, seq_len=256)
    )
    assert analysis.to_json()["reader"] == "native"
    ours = mapped_config(raw)
    assert count_params(ours).total == row.total
    assert unaccounted_keys(raw) == set()
    config = transformers.DeepseekV4Config.from_dict(
        {k: v for k, v in raw.items() if k != "quantization_config"}
    )
    with torch.device("meta"):
        assert _components(transformers.DeepseekV4ForCausalLM(config)) == {
            k: v for k, v in count_params(ours).items() if v
        }
    assert [t for t in config.layer_types].count("compressed_sparse_attention") == 21


@pytest.mark.parametrize(
    ("change", "key"),
    [({"layer_types": ["sliding_attention"] * 3}, "layer_types"),
     ({"compress_ratios": [0, 2, 4, 128]}, "compress_ratios"),
     ({"mlp_layer_types": ["dense"] * 4}, "mlp_layer_types"),
     ({"compress_rates": {"compressed_sparse_attention": 0}}, "compress_rates")],
)  # fmt: skip
def test_malformed_schedules_are_named(change: dict[str, Any], key: str) -> None:
    raw = {"model_type": "deepseek_v4", **_SMALL, **change}
    if "compress_ratios" in change:
        raw.pop("compress_rates")
    with pytest.raises(ConfigError) as info:
        mapped_config(raw)
    assert key in str(info.value)


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_verify_checkpoint_places_every_tensor_of_a_saved_model(
    transformers: Any, cli: Any, tmp_path: Any, name: str
) -> None:
    """save_pretrained writes DeepSeek's own names (attn.wq_a, attn.compressor.wkv, attn.indexer.wq_b,
    hc_attn_fn, ffn.experts.N.w1, ...): every tensor is placed (the router's correction bias and the hash layers'
    tid2eid as buffers), each component's stored count is the analytic one and analyze's, and the whole is
    transformers' numel."""

    import torch

    torch.manual_seed(0)
    model = transformers.DeepseekV4ForCausalLM(transformers.DeepseekV4Config(**VARIANTS[name]))
    verify_saved(cli, model, tmp_path)


def test_verify_checkpoint_reads_deepseeks_published_layout(
    transformers: Any, cli: Any, tmp_path: Any
) -> None:
    """deepseek-ai's checkpoints name the tensors without transformers' ``model.`` prefix (``embed``, ``head``,
    ``hc_head_fn``, ``layers.N.attn.wq_a``), carry FP8 block scales (``wq_a.scale``) and the multi-token-prediction
    layer (``mtp.0.*``), which transformers does not build: placed, the scales as scales, the MTP layer apart."""
    import json

    import torch
    from safetensors.torch import load_file, save_file

    torch.manual_seed(0)
    model = transformers.DeepseekV4ForCausalLM(transformers.DeepseekV4Config(**_SMALL))
    model.save_pretrained(tmp_path)
    tensors = {k.removeprefix("model."): v for k, v in load_file(tmp_path / "model.safetensors").items()}
    tensors = {("head.weight" if k == "lm_head.weight" else k): v for k, v in tensors.items()}
    tensors["layers.0.attn.wq_a.scale"] = torch.ones(2, 1)
    tensors["mtp.0.attn.wq_a.weight"] = torch.zeros(16, 64)
    save_file(tensors, tmp_path / "model.safetensors")
    result = cli("verify", str(tmp_path), "--checkpoint", "--format", "json")
    assert result.exit_code == 0, result.stderr
    check = json.loads(result.stdout)["results"][0]
    assert check["agree"] and check["missing"] == [] and check["shape_errors"] == []
    assert check["stored_params"] == sum(p.numel() for p in model.parameters())
    assert {e["tensor"] for e in check["extra"] if "multi-token" in e["reason"]} == {"mtp.0.attn.wq_a.weight"}
