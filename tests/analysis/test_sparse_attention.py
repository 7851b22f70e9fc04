"""DeepSeek Sparse Attention as attention kind ``sparse`` (issue 23; DESIGN.md §16): the analytic counts by hand
and against the torch reference model.

A tiny sparse decoder (two layers with an indexer, one reusing the first one's selection): each query's core
counts min(n, k) keys (causally a window of k), the indexer every pair; a decode step's core is constant past k and
reads only the k selected latents while its indexer reads every cached key; parameters and FLOPs per breakdown key
equal the torch model's numel and ``FlopCounterMode`` (meta device) at lengths on both sides of k, and the
``deepseek-v3.2`` preset builds on the meta device with transformers' count; bad sparse specs name the field.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from pydantic import ValidationError
from saved_tensors import saved_bytes

from embedcalc.analysis.flops import forward_flops as analytic_flops
from embedcalc.analysis.params import count_params
from embedcalc.analysis.roofline import decode_lengths, decode_step_flops
from embedcalc.analysis.workload import Workload
from embedcalc.config.schema import ModelConfig
from embedcalc.sources.loading import load_target

DEEPSEEK_V32 = (
    671_877_929_216  # transformers' DeepseekV32ForCausalLM on meta (tests/sources/hf/test_hf_sparse.py)
)
TINY: dict[str, Any] = {
    "name": "tiny-dsa", "architecture": "decoder", "vocab_size": 128, "max_seq_len": 64, "embed_dim": 32,
    "num_heads": 4, "num_layers": 3, "ffn_dim": 48, "activation": "swiglu", "norm": "rmsnorm",
    "norm_placement": "pre", "position": "rope", "bias": False, "tie_embeddings": False, "lm_head": True,
    "attention": {"kind": "sparse", "q_lora_rank": 16, "kv_lora_rank": 12, "qk_nope_head_dim": 8,
                  "qk_rope_head_dim": 4, "v_head_dim": 8, "index_heads": 2, "index_head_dim": 8, "index_topk": 5},
    "blocks": {"shared": {"attention": {"kind": "sparse", "index_shared": True}}},
    "layers": [{"pattern": ["default", "shared", "default"]}],
}  # fmt: skip


def test_core_pairs_cap_at_topk_and_the_indexer_scores_every_pair() -> None:
    config = ModelConfig.model_validate(TINY)
    b, n, k, heads = 2, 12, 5, 4
    flops = analytic_flops(config, Workload(batch_size=b, seq_len=n))
    full, causal = flops.breakdown.as_dict(), (flops.causal_breakdown or flops.breakdown).as_dict()
    assert full["decoder/attention/scores"] == 3 * 2 * b * heads * n * k * 12
    causal_pairs = k * (k + 1) // 2 + (n - k) * k  # query i sees min(i + 1, k) keys
    assert causal["decoder/attention/context"] == 3 * 2 * b * heads * causal_pairs * 8
    # two layers with an indexer
    assert full["decoder/attention/index_scores"] == 2 * 2 * b * n * n * 2 * (8 + 1)
    assert causal["decoder/attention/index_scores"] == 2 * 2 * b * n * (n + 1) // 2 * 2 * (8 + 1)
    assert full["decoder/attention/index_q"] == 2 * 2 * b * n * 16 * 2 * 8


def test_decode_step_core_is_constant_past_topk_and_reads_k_latents() -> None:
    config = ModelConfig.model_validate(TINY)
    w = Workload(batch_size=2, seq_len=30)
    step = {n: decode_step_flops(config, w, n) for n in (3, 20, 40)}
    # absorbed (analysis/roofline/traffic._absorbed): scores over kv_lora_rank + rope = 16, the context over 12
    assert (
        step[20]["decoder/attention/scores"] == step[40]["decoder/attention/scores"] == 3 * 2 * 2 * 4 * 5 * 16
    )
    assert step[3]["decoder/attention/scores"] == 3 * 2 * 2 * 4 * 3 * 16
    assert step[40]["decoder/attention/context"] == 3 * 2 * 2 * 4 * 5 * 12
    assert step[40]["decoder/attention/index_scores"] == 2 * 2 * 2 * 40 * 2 * 9  # linear in the context
    lengths = decode_lengths(config, Workload(batch_size=2, seq_len=30, dtype="bf16"), 40)
    assert lengths.self_cache_bytes == 2 * 3 * 5 * (12 + 4) * 2  # the k selected latents of every layer
    # every cached indexer key of the two indexer layers
    assert lengths.index_cache_bytes == 2 * 2 * 40 * 8 * 2


@pytest.mark.torch
@pytest.mark.parametrize("n", [4, 12])
def test_torch_model_reconciles_exactly(n: int) -> None:
    pytest.importorskip("torch")
    from embedcalc.modeling import build_model, component_flops, component_params

    config = ModelConfig.model_validate(TINY)
    model = build_model(config)
    assert component_params(model) == {k: v for k, v in count_params(config).as_dict().items() if v}
    analytic = {
        k: v for k, v in analytic_flops(config, Workload(batch_size=2, seq_len=n)).breakdown.items() if v
    }
    assert component_flops(config, model, batch_size=2, seq_len=n) == analytic


@pytest.mark.torch
def test_preset_reconciles_on_the_meta_device() -> None:
    pytest.importorskip("torch")
    from embedcalc.modeling import build_model, component_params

    config = load_target("deepseek-v3.2").config
    assert sum(component_params(build_model(config)).values()) == DEEPSEEK_V32


@pytest.mark.parametrize(
    ("attention", "code", "named"),
    [
        ({"index_topk": 5}, "sparse_incomplete", "index_heads, index_head_dim"),
        ({"index_head_dim": 2}, "index_head_dim_under_rope", "index_head_dim (2)"),
        ({"kind": "mla"}, "field_of_other_kind", "attention.index_heads"),
        ({"index_topk": None}, "sparse_incomplete", "index_topk"),
    ],
)
def test_bad_sparse_specs_name_the_field(attention: dict[str, Any], code: str, named: str) -> None:
    spec = {**TINY["attention"], **attention}
    if code == "sparse_incomplete" and "index_topk" in attention:
        spec = {k: v for k, v in spec.items() if k not in ("index_heads", "index_head_dim")}
    spec = {k: v for k, v in spec.items() if v is not None}
    with pytest.raises(ValidationError) as info:
        ModelConfig.model_validate({**TINY, "attention": spec, "blocks": {}, "layers": None})
    assert code in str(info.value) and named in str(info.value)


def test_without_a_query_rank_the_indexer_reads_the_normalised_input() -> None:
    """Mistral Large 4: no q_lora_rank, one full-rank q; the indexer's queries come from the input through a
    LayerNorm of embed_dim (weight and bias) into index_q (embed_dim -> index_heads x index_head_dim)."""
    spec = {k: v for k, v in TINY["attention"].items() if k != "q_lora_rank"}
    config = ModelConfig.model_validate({**TINY, "attention": spec, "blocks": {}, "layers": None})
    params = dict(count_params(config).items())
    d, layers = config.embed_dim, config.num_layers
    heads, width = spec["index_heads"], spec["index_head_dim"]
    assert params["decoder/attention/index_input_norm"] == layers * 2 * d
    assert params["decoder/attention/index_q"] == layers * d * heads * width
    assert params["decoder/attention/q"] == layers * d * config.num_heads * (8 + 4)


def test_crossover_past_topk_counts_the_core_as_linear() -> None:
    """deepseek-v3.2's score work c n min(n, k) + I n² overtakes the layers' linear work L n at
    n* = (L - c k) / I once n* > k (the core's share there is linear): the sign changes between n* - 1 and n* + 1."""
    from embedcalc.analysis.crossover import crossover_fraction

    config = load_target("deepseek-v3.2").config
    n_star = crossover_fraction(config)
    assert n_star > 2048
    for n, sign in ((int(n_star) - 1, -1), (int(n_star) + 1, 1)):
        f = analytic_flops(config, Workload(seq_len=n))
        linear = f.forward - f.attention_score_flops - f.breakdown.as_dict()["head/lm"]
        assert (f.attention_score_flops - linear) * sign > 0, n


def _saved_attention_bytes(config: ModelConfig, b: int, n: int) -> int:
    """Bytes of the distinct storages the torch model's attention sublayers save for the backward pass (fp32,
    parameters excluded), recorded with ``saved_tensors_hooks`` while each attention module runs."""
    import torch

    from embedcalc.modeling import build_model

    model = build_model(config, attention="eager", device="cpu").train()
    ids = torch.randint(0, config.vocab_size, (b, n))
    return saved_bytes(model, lambda: model(ids), modules=[layer.attention for layer in model.decoder.layers])


@pytest.mark.torch
def test_training_saves_the_gathered_core_over_topk_keys_as_torch_does() -> None:
    """The n min(n, k) terms of the estimate are exactly what the torch reference saves: the measured bytes minus
    the analytic ones are linear in n (only MLA's per-token convention is left, never a pair term), at lengths on
    both sides of k = 5; the indexer saves nothing (it selects without autograd)."""
    pytest.importorskip("torch")
    from embedcalc.analysis.memory.training import saved_activations

    config = ModelConfig.model_validate({**TINY, "dropout": 0.0})
    b, residual = 2, {}
    for n in (3, 5, 9, 16):
        w = Workload(batch_size=b, seq_len=n, mode="training", dtype="fp32", attention="eager")
        analytic = {k: v for k, v in saved_activations(config, w).items() if "/attention/" in k}
        residual[n] = _saved_attention_bytes(config, b, n) - sum(analytic.values())
        # three layers' gathered K (12) and V (8) and weights of 4 heads, the mask, two indexers' int64 index
        pairs = b * n * min(n, 5)
        assert analytic["decoder/attention/scores"] == pairs * (3 * (4 * 4 * (12 + 8 + 1) + 1) + 2 * 8)
    per_token = {n: r / n for n, r in residual.items()}
    assert len(set(per_token.values())) == 1, per_token


def test_indexer_and_core_enter_inference_and_training_memory() -> None:
    """Inference: the gathered core over k keys (eager; a fused kernel's none under sdpa), and the indexer's
    transient n x n tensors as a candidate of their own; training adds the largest indexer's transient tensors
    once, and under sdpa saves the log-sum-exp and the selection only. Element-wise: softmax over n k pairs."""
    from embedcalc.analysis.elementwise import elementwise_flops
    from embedcalc.analysis.memory import estimate_memory
    from embedcalc.analysis.memory.inference import peak_candidates
    from embedcalc.analysis.memory.training import saved_activations
    from embedcalc.analysis.structure import Dims

    config = ModelConfig.model_validate({**TINY, "dropout": 0.0})
    b, n, e = 2, 40, 2
    w = Workload(batch_size=b, seq_len=n, dtype="bf16", attention="eager")
    peaks = peak_candidates(config, w, Dims.of(config, b, n, None))
    base = b * n * 2 * e * 32
    mla = b * n * e * (16 + 48 + 16 + 48 + 32 + 32)  # q latent, Q, kv latent + rope, K and V, the context
    assert peaks["decoder/attention"] == base + mla + b * n * 5 * e * (48 + 32 + 2 * 4)
    # index q, weights and keys per token; per pair the 2 heads' dot products and their sum, or scores + sort
    index = b * n * e * (2 * 8 + 2 + 8) + b * n * n * max(e * 3, 2 * e + 8)
    assert peaks["decoder/attention/indexer"] == base + b * n * e * (16 + 12 + 4) + index
    assert estimate_memory(config, w).activations_bytes == max(peaks.values())
    fused = peak_candidates(config, replace(w, attention="sdpa"), Dims.of(config, b, n, None))
    assert fused["decoder/attention"] == base + mla
    assert fused["decoder/attention/indexer"] == peaks["decoder/attention/indexer"]
    training = saved_activations(config, Workload(batch_size=b, seq_len=n, dtype="bf16", mode="training"))
    assert training.as_dict()["decoder/index_working_set"] == index
    # sdpa: 4 heads' fp32 log-sum-exp per query in 3 layers, the 2 indexer layers' int64 selection
    assert training.as_dict()["decoder/attention/scores"] == 3 * b * n * 4 * 4 + 2 * b * n * 5 * 8
    elementwise = elementwise_flops(config, w).as_dict()
    assert elementwise["decoder/softmax"] == 3 * b * 4 * n * 5 * 6
    assert elementwise["decoder/index_scores"] == 2 * b * n * n * (2 * 2 + 1)
