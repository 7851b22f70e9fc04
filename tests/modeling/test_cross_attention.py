"""Cross-attention over an external sequence (Llama-3.2-Vision's cross-attention layers) in the torch model: the
counts per breakdown key by hand, the same in embedcalc.analysis, what the layer computes (every query sees every
external token, the tanh gates, no positions), and generation through a cache of the external tokens whose bytes
are the analytic KV cache.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from embedcalc.analysis.flops import forward_flops  # noqa: E402
from embedcalc.analysis.memory import kv_cache_bytes  # noqa: E402
from embedcalc.analysis.params import count_params  # noqa: E402
from embedcalc.analysis.workload import Workload  # noqa: E402
from embedcalc.config.schema import ModelConfig  # noqa: E402
from embedcalc.modeling import build_model, component_flops, component_params  # noqa: E402
from embedcalc.modeling.generate import allocate_cache, greedy_generate, reference_generate  # noqa: E402

pytestmark = pytest.mark.torch

# a tiny decoder: d 16, h 4, g 2, hd 4, gated FFN 32; layers [self, cross, self]; M external tokens
V, D, H, G, HD, F, M, EXTRA = 31, 16, 4, 2, 4, 32, 5, 3
B, N = 2, 7
T = B * N
BASE: dict[str, Any] = {
    "architecture": "decoder", "vocab_size": V, "max_seq_len": 32, "embed_dim": D, "num_heads": H,
    "num_kv_heads": G, "num_layers": 3, "ffn_dim": F, "position": "rope", "activation": "swiglu",
    "norm": "rmsnorm", "bias": False, "tie_embeddings": False, "lm_head": True, "context_tokens": M,
    "extra_token_rows": EXTRA,
    "blocks": {"cross": {"attention": {"cross": True, "qk_norm": "head", "tanh_gates": True}}},
    "layers": [{"pattern": ["default", "cross", "default"]}],
}  # fmt: skip


def _config(**extra: Any) -> ModelConfig:
    return ModelConfig.model_validate({**BASE, **extra})


def test_counts_by_hand_equal_analysis_and_torch() -> None:
    """Params and FLOPs of the cross layer by hand (analysis/flops.py docstring): K and V on the B x M external
    tokens, scores and context 2 B h N M hd each, whatever the causal mask; the gates 1 parameter each."""
    config = _config()
    by_hand_params = {
        "embedding/token": (V + EXTRA) * D,
        "decoder/attention/qkv": 3 * D * (H + 2 * G) * HD,
        "decoder/attention/qk_norm": 2 * HD,  # the cross layer's per-head q and k norms
        "decoder/attention/tanh_gate": 1,
        "decoder/ffn/tanh_gate": 1,
        "head/lm": V * D,
    }
    self_scores = 2 * (2 * B * H * N * N * HD)
    cross_scores = 2 * B * H * N * M * HD
    by_hand_flops = {
        "decoder/attention/qkv": 2 * (2 * T * D * (H + 2 * G) * HD)
        + 2 * T * D * H * HD
        + 2 * (B * M) * D * 2 * G * HD,
        "decoder/attention/scores": self_scores + cross_scores,
        "decoder/attention/context": self_scores + cross_scores,
    }
    workload = Workload(batch_size=B, seq_len=N)
    analytic_params = count_params(config).as_dict()
    analytic = forward_flops(config, workload)
    for impl in ("sdpa", "eager"):
        model = build_model(config, attention=impl)
        params = component_params(model)
        flops = component_flops(config, model, batch_size=B, seq_len=N)
        assert params == analytic_params, impl
        assert flops == analytic.breakdown.as_dict(), impl
        assert {k: params[k] for k in by_hand_params} == by_hand_params
        assert {k: flops[k] for k in by_hand_flops} == by_hand_flops
    causal = analytic.causal_breakdown
    assert causal is not None  # only the self-attention layers' pairs shrink causally
    assert (
        causal.as_dict()["decoder/attention/scores"]
        == 2 * (2 * B * H * (N * (N + 1) // 2) * HD) + cross_scores
    )


def _cpu(config: ModelConfig, impl: str = "eager") -> Any:
    return build_model(config, attention=impl, device="cpu", seed=1)


def _ids(config: ModelConfig, length: int = N, seed: int = 0) -> Any:
    return torch.randint(0, config.vocab_size, (B, length), generator=torch.Generator().manual_seed(seed))


def test_every_query_sees_every_external_token_and_sdpa_equals_eager() -> None:
    """The cross layer is unmasked: changing the last external token changes the first text position's output
    (a causal mask over the external tokens would not); sdpa and eager agree."""
    config = _config()
    eager, sdpa = _cpu(config, "eager"), _cpu(config, "sdpa")
    sdpa.load_state_dict(eager.state_dict())
    ids = _ids(config)
    context = eager.context_states(B)
    assert tuple(context.shape) == (B, M, D)
    changed = context.clone()
    changed[:, -1] += 1.0
    with torch.no_grad():
        base = eager(ids, context=context).logits
        moved = eager(ids, context=changed).logits
        torch.testing.assert_close(sdpa(ids, context=context).logits, base, rtol=1e-4, atol=1e-5)
    assert not torch.allclose(base[:, 0], moved[:, 0])


def test_zero_gates_make_the_cross_layer_the_identity() -> None:
    """tanh(0) = 0 on both sublayers (Mllama initialises its gates at 0): the cross layer passes x through, so the
    model equals the same stack without it, whatever the external tokens."""
    config = _config()
    model = _cpu(config)
    cross = model.decoder.layers[1]
    with torch.no_grad():
        cross.attention.tanh_gate.weight.zero_()
        cross.ffn.tanh_gate.weight.zero_()
        ids = _ids(config)
        x = model.embedding(ids, "decoder")
        assert torch.equal(cross(x, memory=model.context_states(B)), x)


def test_generation_caches_the_external_tokens_and_matches_recomputation() -> None:
    """Greedy decoding through the cache equals full recomputation; the cache tensors hold the analytic KV cache:
    the self-attention layers' text tokens plus the cross layer's M external tokens."""
    config = _config()
    model = _cpu(config)
    prompt, gen = _ids(config, 5, seed=2), 4
    cache = allocate_cache(model, B, 5 + gen)
    tokens = greedy_generate(model, prompt, gen, cache).tokens
    assert torch.equal(tokens, reference_generate(model, prompt, gen))
    analytic = kv_cache_bytes(config, Workload(batch_size=B, seq_len=5, gen_tokens=gen))
    assert cache.nbytes == analytic == B * 4 * (2 * (2 * G * HD) * (5 + gen) + 2 * G * HD * M)


def test_tensor_parallel_verify_agrees_on_every_collective(cli: Any, tmp_path: Any) -> None:
    """``verify --tp 2`` (DTensor on the fake process group): the cross layer all-reduces its output in the forward
    and only its queries' input gradient in the backward (k and v read the external states, a model input with no
    gradient), as the analytic count says (analysis/comm/volumes.py)."""
    import json

    import yaml

    path = tmp_path / "cross.yaml"
    path.write_text(yaml.safe_dump(BASE), encoding="utf-8")
    result = cli("verify", str(path), "--tp", "2", "--format", "json")
    assert result.exit_code == 0, result.stderr
    sharded = json.loads(result.stdout)["results"][0]["sharded"]
    assert sharded["agree"] and sharded["mismatches"] == []
    backward = {(c["kind"], c["phase"]): c for c in sharded["collectives"]}[("all-reduce", "backward")]
    # 2 self layers x (q, k, v, gate, up) + the cross layer's q, gate, up + the LM head's input
    assert backward["torch_count"] == backward["analytic_count"] == 2 * 5 + 3 + 1


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pattern=st.lists(st.sampled_from(["default", "cross"]), min_size=1, max_size=4).filter(
        lambda p: "cross" in p
    ),
    context=st.integers(1, 9),
    kv=st.sampled_from([1, 2, 4]),
    qk_norm=st.sampled_from(["none", "head", "full"]),
    gates=st.booleans(),
    extra=st.integers(0, 3),
    batch=st.integers(1, 2),
    seq_len=st.integers(1, 6),
)
def test_random_cross_stacks_count_the_same_in_torch(
    pattern: list[str], context: int, kv: int, qk_norm: str, gates: bool, extra: int, batch: int, seq_len: int
) -> None:
    """Any layout of self and cross blocks, any external length, KV heads, q/k norms, gates and extra token rows:
    parameters and forward FLOPs per breakdown key, analysis == the torch model on the meta device."""
    config = _config(
        num_layers=len(pattern), num_kv_heads=kv, context_tokens=context, extra_token_rows=extra,
        blocks={"cross": {"attention": {"cross": True, "qk_norm": qk_norm, "tanh_gates": gates}}},
        layers=[{"pattern": pattern}],
    )  # fmt: skip
    model = build_model(config)
    assert component_params(model) == count_params(config).as_dict()
    flops = component_flops(config, model, batch_size=batch, seq_len=seq_len)
    assert flops == forward_flops(config, Workload(batch_size=batch, seq_len=seq_len)).breakdown.as_dict()
