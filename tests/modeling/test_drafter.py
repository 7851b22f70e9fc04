"""A drafter's three parts (Gemma 4's assistant): attention over another model's keys and values
(``attention.kv_external``), the input read from that model and the state handed back (``input_projection_dim``,
``output_projection_dim``), and a centroid-masked LM head (``head_centroids``, ``head_centroid_top_k``). Counted by
hand from transformers' ``modeling_gemma4_assistant.py``, the same in embedcalc.analysis and in the torch model
(FlopCounterMode, eager and sdpa), no KV cache, and a cached generation equal to full recomputation.
"""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

import embedcalc  # noqa: E402
from embedcalc.analysis.flops import forward_flops  # noqa: E402
from embedcalc.analysis.memory import kv_cache_bytes  # noqa: E402
from embedcalc.analysis.memory.training import saved_activations  # noqa: E402
from embedcalc.analysis.params import count_params  # noqa: E402
from embedcalc.analysis.workload import Workload  # noqa: E402
from embedcalc.config.schema import ModelConfig  # noqa: E402
from embedcalc.modeling import build_model, component_flops, component_params  # noqa: E402
from embedcalc.modeling.generate import allocate_cache, greedy_generate, reference_generate  # noqa: E402

pytestmark = pytest.mark.torch

# d 64, h 4 of 16, g 2, sliding layers of window 8 and a full layer of head_dim 32 (Gemma 4's layout), input
# 2 x 96 (a backbone of 96), handed back 96, 128 tokens in 8 clusters of 16, 2 scored per position
V, D, H, G, HD, FULL_HD, F, IN, OUT, C, K = 128, 64, 4, 2, 16, 32, 128, 192, 96, 8, 2
B, N = 2, 12
T = B * N
BASE: dict[str, Any] = {
    "architecture": "decoder", "vocab_size": V, "max_seq_len": 64, "embed_dim": D, "num_heads": H,
    "num_kv_heads": G, "head_dim": HD, "num_layers": 4, "ffn_dim": F, "activation": "geglu", "norm": "rmsnorm",
    "norm_placement": "sandwich", "bias": False, "position": "rope", "sliding_window": 8,
    "attention": {"kv_external": True, "qk_norm": "head"},
    "blocks": {"global": {"attention": {"sliding_window": None, "head_dim": FULL_HD}}},
    "layers": [{"pattern": ["default", "default", "default", "global"]}],
    "input_projection_dim": IN, "output_projection_dim": OUT, "head_centroids": C, "head_centroid_top_k": K,
}  # fmt: skip


def _config(**extra: Any) -> ModelConfig:
    return ModelConfig.model_validate({**BASE, **extra})


def test_counts_by_hand_equal_analysis_and_torch() -> None:
    """Per layer only the queries are projected (2 t d h hd) and normalised, the scores and context run over the
    other model's keys of every position (n x n in full); pre_projection 2 t IN d, post_projection 2 t d OUT, the
    centroids 2 t d C and the masked head's matmul over K clusters of V / C tokens, 2 t d K V / C."""
    config = _config()
    queries = 3 * H * HD + H * FULL_HD  # query widths of the three sliding layers and the full one
    by_hand_params = {
        "embedding/token": V * D,  # tied to the head: its rows are what the masked head gathers
        "embedding/input_projection": IN * D,
        "decoder/attention/qkv": D * queries,
        "decoder/attention/qk_norm": 3 * HD + FULL_HD,  # q_norm only: no key norm without keys
        "decoder/attention/out": queries * D,
        "head/output_projection": D * OUT,
        "head/centroids": D * C,
    }
    by_hand_flops = {
        "embedding/input_projection": 2 * T * IN * D,
        "decoder/attention/qkv": 2 * T * D * queries,
        "decoder/attention/scores": 2 * B * N * N * queries,
        "decoder/attention/context": 2 * B * N * N * queries,
        "head/output_projection": 2 * T * D * OUT,
        "head/centroids": 2 * T * D * C,
        "head/lm": 2 * T * D * K * (V // C),
    }
    workload = Workload(batch_size=B, seq_len=N)
    analytic_params = count_params(config).as_dict()
    analytic = forward_flops(config, workload)
    assert {k: analytic_params[k] for k in by_hand_params} == by_hand_params
    assert {k: analytic.breakdown.as_dict()[k] for k in by_hand_flops} == by_hand_flops
    assert "decoder/attention/kv" not in analytic_params
    for impl in ("sdpa", "eager"):
        model = build_model(config, attention=impl)
        assert component_params(model) == analytic_params, impl
        assert component_flops(config, model, batch_size=B, seq_len=N) == analytic.breakdown.as_dict(), impl
    # no KV cache of its own, whatever the length; causally a query sees the keys up to its position (the window)
    assert kv_cache_bytes(config, workload) == 0
    causal = analytic.causal_breakdown
    assert causal is not None
    pairs = 3 * (8 * 9 // 2 + (N - 8) * 8) * H * HD + N * (N + 1) // 2 * H * FULL_HD
    assert causal.as_dict()["decoder/attention/scores"] == 2 * B * pairs


def test_plain_head_and_no_projections_are_the_usual_decoder() -> None:
    """Without the head's centroids the LM head scores every token; kv_external alone changes only the keys."""
    config = _config(head_centroids=None, head_centroid_top_k=None, input_projection_dim=None,
                     output_projection_dim=None)  # fmt: skip
    flops = forward_flops(config, Workload(batch_size=B, seq_len=N)).breakdown.as_dict()
    assert flops["head/lm"] == 2 * T * D * V
    assert not any(k.startswith(("embedding/input", "head/output", "head/centroids")) for k in flops)
    model = build_model(config, attention="eager")
    assert component_flops(config, model, batch_size=B, seq_len=N) == flops


def test_cached_generation_equals_recomputation() -> None:
    """The stand-ins of the target's keys, values and input vectors are the same for a position in a cached step
    and in a full recomputation, so greedy tokens agree; the masked head's logits are finite."""
    config = _config()
    for impl in ("eager", "sdpa"):
        model = build_model(config, attention=impl, device="cpu", dtype=torch.float64)
        ids = torch.randint(0, V, (B, 6), generator=torch.Generator().manual_seed(1))
        out = model(ids)
        assert out.logits is not None and out.handback is not None
        assert out.handback.shape == (B, 6, OUT) and bool(torch.isfinite(out.logits).all())
        # each position scores exactly K clusters of V / C tokens; the rest hold one masked value
        assert int((out.logits > out.logits.amin()).sum()) <= B * 6 * K * (V // C)
        cache = allocate_cache(model, B, 6 + 5)
        assert cache.nbytes == kv_cache_bytes(config, Workload(batch_size=B, seq_len=6, gen_tokens=5)) == 0
        generated = greedy_generate(model, ids, 4, cache)
        assert generated.tokens.tolist() == reference_generate(model, ids, 4).tolist(), impl


def test_training_saves_the_inputs_and_the_gathered_rows() -> None:
    """Training keeps the input vectors (t IN) for pre_projection's weight gradient and, for the masked head, the
    gathered rows (t K V / C d) and two int64 indices, the chosen tokens (t K V / C) and the top-k's clusters (t K)
    (analysis/drafter.py): the analytic terms equal what autograd saves inside those modules of the torch model."""
    from saved_tensors import saved_bytes

    workload = Workload(batch_size=B, seq_len=N, mode="training")
    with_parts = _config()
    without = _config(head_centroids=None, head_centroid_top_k=None, input_projection_dim=None)
    e = workload.activation_bytes
    saved = saved_activations(with_parts, workload).as_dict()
    plain = saved_activations(without, workload).as_dict()
    assert saved["decoder/embedding"] - plain["decoder/embedding"] == T * e * IN
    chosen = K * (V // C)
    assert saved["head/centroids"] == T * (e * chosen * D + 8 * (chosen + K))
    model = build_model(with_parts, attention="eager", device="cpu", dtype=torch.float32).train()
    ids = torch.randint(0, V, (B, N), generator=torch.Generator().manual_seed(2))

    def run() -> Any:
        out = model(ids)
        assert out.logits is not None
        return out.logits.sum()

    assert e == 4
    assert saved_bytes(model, run, [model.embedding.input_projection]) == T * e * IN
    head_input = T * e * D  # the final norm's output, the LM head's saved input (analysis: head/lm)
    assert saved_bytes(model, run, [model.head]) == head_input + saved["head/centroids"]


@pytest.mark.parametrize(
    ("extra", "code"),
    [
        ({"head_centroids": 7}, "centroids_divide_vocab"),
        ({"head_centroid_top_k": None}, "centroids_need_top_k"),
        ({"head_centroids": None}, "top_k_without_centroids"),
        ({"head_centroid_top_k": 9}, "top_k_over_centroids"),
        ({"lm_head": False, "output_projection_dim": None}, "centroids_need_head"),
        ({"lm_head": False, "head_centroids": None, "head_centroid_top_k": None}, "output_projection_needs_head"),
        ({"per_layer_input_dim": 8}, "input_projection_with_ids"),
        ({"attention": {"kv_external": True, "kv_shared": True}}, "kv_external_with_other_source"),
        ({"attention": {"kv_external": True, "kind": "mla", "kv_lora_rank": 8, "qk_nope_head_dim": 8,
                        "qk_rope_head_dim": 8, "v_head_dim": 8}}, "field_of_other_kind"),
    ],
)  # fmt: skip
def test_refusals_name_the_field(extra: dict[str, Any], code: str) -> None:
    with pytest.raises(embedcalc.ConfigError) as refused:
        embedcalc.load({**BASE, **extra})
    assert code in [problem.code for problem in refused.value.problems]


def test_encoder_refuses_the_drafter_parts() -> None:
    with pytest.raises(embedcalc.ConfigError):
        embedcalc.load({**BASE, "architecture": "encoder", "sliding_window": None, "blocks": {}, "layers": None,
                        "attention": None, "head_centroids": None, "head_centroid_top_k": None})  # fmt: skip


def test_a_decode_step_reads_the_other_models_keys_and_values() -> None:
    """A drafter caches no keys or values, yet each decode step's attention reads the target's at the context length
    (a sliding layer at most its window): the roofline's bytes read are those of the same layers with a cache of
    their own, and the KV cache it holds is 0."""
    from embedcalc.analysis.roofline import decode_lengths

    drafter = _config()
    own = _config(attention={"kv_external": False, "qk_norm": "head"})
    workload = Workload(batch_size=B, seq_len=40)
    for context in (4, 40):
        read = decode_lengths(drafter, workload, context).self_cache_bytes
        assert read == decode_lengths(own, workload, context).self_cache_bytes
        sliding = 3 * min(context, 8) * G * 2 * HD
        assert read == B * 4 * (sliding + context * G * 2 * FULL_HD)
    assert kv_cache_bytes(drafter, workload) == 0 < kv_cache_bytes(own, workload)
