"""A shared block beside a recurrent mixer (config/shared_spec.py, modeling/shared_block.py; Zamba2): parameters
once per weight set, FLOPs and KV cache at every use, the per-use adapters and projection in every layer. Each
count is written out by hand from docs/layers.md and checked against both implementations (embedcalc.analysis and
the torch model, meta device), and the torch model's weight sets really are shared ``Parameter`` objects.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

torch = pytest.importorskip("torch")

from embedcalc.analysis.flops import forward_flops  # noqa: E402
from embedcalc.analysis.memory import estimate_memory  # noqa: E402
from embedcalc.analysis.params import count_params  # noqa: E402
from embedcalc.analysis.workload import Workload  # noqa: E402
from embedcalc.config.schema import ModelConfig  # noqa: E402
from embedcalc.modeling import build_model, component_flops, component_params  # noqa: E402

pytestmark = pytest.mark.torch

# d 16, 4 heads of 8 over the 2d = 32 wide input, 2 KV heads, gated FFN 24, Mamba-2 of 4 heads x 8, 6 layers
V, D, H, G, HD, F, R = 31, 16, 4, 2, 8, 24, 4
MAMBA = {"kind": "mamba2", "state_size": 4, "num_heads": 4, "head_dim": 8, "groups": 1, "chunk_size": 4}
BASE: dict[str, Any] = {
    "architecture": "decoder", "vocab_size": V, "max_seq_len": 64, "embed_dim": D, "num_heads": H,
    "num_kv_heads": G, "head_dim": HD, "num_layers": 6, "ffn_dim": F, "activation": "geglu", "norm": "rmsnorm",
    "bias": False, "position": "rope", "mixer": MAMBA, "ffn": {"kind": "none"},
    "layers": [{"pattern": ["default", "hybrid"], "repeat": 3}],
}  # fmt: skip
SHARED = {"copies": 2, "adapter_rank": R, "attention_adapters": True, "ffn_adapters": True}


def _config(shared: dict[str, Any] = SHARED, **extra: Any) -> ModelConfig:
    hybrid = {"ffn": {"kind": "dense"}, "shared": shared}
    return ModelConfig.model_validate({**BASE, "blocks": {"hybrid": hybrid}, **extra})


@pytest.mark.parametrize(
    ("shared", "sets", "wide"),
    [(SHARED, 2, 2 * D), ({"copies": 1}, 1, 2 * D), ({"copies": 5, "embeddings": False}, 3, D)],
)
def test_params_count_each_weight_set_once_and_the_extras_per_use(
    shared: dict[str, Any], sets: int, wide: int
) -> None:
    """3 uses of the shared block: attention, FFN and their norms min(copies, 3) times; adapters and projection 3."""
    config = _config(shared)
    q, kv = H * HD, G * HD
    expected = {
        "decoder/attention/qkv": sets * wide * (q + 2 * kv),
        "decoder/attention/out": sets * q * D,
        "decoder/attention/norm": sets * wide,
        "decoder/ffn/in": sets * D * 2 * F,
        "decoder/ffn/out": sets * F * D,
        "decoder/ffn/norm": sets * D,
        "decoder/shared/projection": 3 * D * D,
    }
    if shared.get("attention_adapters"):
        expected["decoder/shared/attention_adapters"] = 3 * (3 * wide * R + R * (q + 2 * kv))
    if shared.get("ffn_adapters"):
        expected["decoder/shared/ffn_adapters"] = 3 * (D * R + R * 2 * F)
    ours = count_params(config)
    torch_side = component_params(build_model(config))
    for key, value in expected.items():
        assert ours[key] == torch_side[key] == value, key
    assert ours.total == sum(torch_side.values())


def test_the_torch_model_shares_the_weight_sets_in_turn() -> None:
    """Use j runs set j mod copies: layers 1 and 5 (uses 0 and 2) hold one Parameter, layer 3 (use 1) another; each
    use keeps its own adapters and projection."""
    model = build_model(_config())
    layers = model.decoder.layers
    assert layers[1].attention.qkv.q.weight is layers[5].attention.qkv.q.weight
    assert layers[1].ffn.in_.gate.weight is layers[5].ffn.in_.gate.weight
    assert layers[1].attention.norm.weight is layers[5].attention.norm.weight
    assert layers[3].attention.qkv.q.weight is not layers[1].attention.qkv.q.weight
    assert layers[1].shared.projection.weight is not layers[5].shared.projection.weight
    assert (
        layers[1].shared.attention_adapters.q.up.weight is not layers[5].shared.attention_adapters.q.up.weight
    )


@pytest.mark.parametrize("shared", [SHARED, {"copies": 1, "embeddings": False}])
@pytest.mark.parametrize("seq_len", [5, 12])
def test_flops_at_every_use_equal_the_torch_model(shared: dict[str, Any], seq_len: int) -> None:
    """FLOPs per key, analytic = FlopCounterMode on the torch model; the attention and adapter terms by hand."""
    config = _config(shared)
    b, t = 2, 2 * seq_len
    wide = 2 * D if shared.get("embeddings", True) else D
    analytic = forward_flops(config, Workload(batch_size=b, seq_len=seq_len)).breakdown
    measured = component_flops(config, batch_size=b, seq_len=seq_len)
    assert dict(analytic.items()) == measured
    q, kv = H * HD, G * HD
    assert measured["decoder/attention/qkv"] == 3 * 2 * t * wide * (q + 2 * kv)
    assert measured["decoder/attention/scores"] == 3 * 2 * b * H * seq_len * seq_len * HD
    assert measured["decoder/shared/projection"] == 3 * 2 * t * D * D
    if shared.get("attention_adapters"):
        assert measured["decoder/shared/attention_adapters"] == 3 * 2 * t * (3 * wide * R + R * (q + 2 * kv))


def test_the_kv_cache_is_every_uses_and_the_state_every_mixers() -> None:
    """bf16, 2 sequences of 10 tokens: K and V of 2 heads x 8 in each of the 3 hybrid layers; the Mamba-2 state in
    all 6 layers (conv_dim 4 x 8 + 2 x 4 = 40, x 4 taps, plus 4 x 8 x 4 scan values)."""
    memory = estimate_memory(_config(), Workload(batch_size=2, seq_len=10, dtype="bf16"))
    assert memory.kv_cache_bytes == 3 * 2 * 2 * 10 * G * HD * 2
    assert memory.recurrent_state_bytes == 6 * 2 * (40 * 4 + 4 * 8 * 4) * 2


def test_generation_through_the_cache_equals_the_full_forward() -> None:
    """The shared block's attention caches per use: prefill 6 tokens and decode 2 gives the last logits of one
    forward over the 8 tokens (float64)."""
    from embedcalc.modeling.generate import allocate_cache

    config = _config()
    model = build_model(config, device="cpu", dtype=torch.float64)
    ids = torch.randint(0, V, (2, 8), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        full = model(ids).logits  # (2, 8, V)
        cache = allocate_cache(model, batch_size=2, total_tokens=8)
        model.decode_step(ids[:, :6], cache)
        step = model.decode_step(ids[:, 6:7], cache)
        last = model.decode_step(ids[:, 7:8], cache)
    torch.testing.assert_close(step[:, -1], full[:, 6])
    torch.testing.assert_close(last[:, -1], full[:, 7])


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"blocks": {"hybrid": {"ffn": {"kind": "dense"}, "shared": {"attention_adapters": True}}}},
         "shared_adapters_without_rank"),
        ({"blocks": {"hybrid": {"ffn": {"kind": "dense"}, "shared": {"adapter_rank": 8}}}},
         "shared_rank_without_adapters"),
        ({"blocks": {"hybrid": {"mixer": {"kind": "attention"}, "ffn": {"kind": "dense"}, "shared": {}}}},
         "shared_block_shape"),
        ({"blocks": {"hybrid": {"shared": {}}}}, "shared_block_shape"),
    ],
)  # fmt: skip
def test_a_shared_block_it_cannot_model_is_refused_naming_the_field(
    change: dict[str, Any], code: str
) -> None:
    with pytest.raises(ValidationError) as info:
        ModelConfig.model_validate({**BASE, **change})
    assert info.value.errors()[0]["type"] == code
    assert "shared" in str(info.value)


@pytest.mark.slow
@pytest.mark.parametrize("flag", ["--tp", "--pp"])
def test_verify_shards_the_shared_block_as_the_analytic_split(cli: Any, write_config: Any, flag: str) -> None:
    """Over 2 tensor-parallel ranks the adapters' up projections split with the q, k, v, gate and up they add to
    (their down projections and the use's projection replicated); over 2 pipeline stages each stage holds the
    weight sets its layers use (a tied Parameter on every stage that runs a layer naming it)."""
    import json

    import yaml

    path = write_config(yaml.safe_dump(_config().model_dump(exclude_unset=True)), "zamba.yaml")
    result = cli("verify", str(path), "--seq-len", "12", flag, "2", "--format", "json")
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)["results"][0]
    assert out["agree"] is True and out["sharded"]
