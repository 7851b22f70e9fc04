"""Heterogeneous blocks (the Nemotron NAS models, DESIGN.md §9/§16, issue 23): per block its own KV heads, its own
FFN width, no attention, no FFN, and a bias-free d x d linear in place of the attention or of the FFN
(DeciLM's ``replace_with_linear``, which keeps the sublayer's norm).

A tiny decoder with one block of each kind, counted by hand: parameters per component, forward FLOPs, the KV cache
(only the attention layers, each with its own KV heads), TP shards and collectives (the projections are
replicated); the torch model reconciles parameters and FLOPs exactly, under --tp 2 as well; generation's cache
tensors hold the analytic bytes; bad specs are refused naming the field.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from embedcalc.analysis.flops import forward_flops
from embedcalc.analysis.memory import estimate_memory
from embedcalc.analysis.parallel import parallel_problems, stage_params
from embedcalc.analysis.params import count_params
from embedcalc.analysis.workload import Parallelism, Workload
from embedcalc.config.schema import ModelConfig

D, V, H, HD, F, F_NARROW = 32, 64, 4, 8, 48, 24
KV_FLAT, KV_OWN = 2, 1
NAS: dict[str, Any] = {
    "name": "tiny-nas", "architecture": "decoder", "vocab_size": V, "max_seq_len": 64, "embed_dim": D,
    "num_heads": H, "num_kv_heads": KV_FLAT, "num_layers": 6, "ffn_dim": F, "activation": "swiglu",
    "norm": "rmsnorm", "position": "rope", "bias": False, "tie_embeddings": False, "dropout": 0.0,
    "blocks": {
        "no_attention": {"mixer": {"kind": "none"}, "ffn": {"ffn_dim": F_NARROW}},
        "linear": {"mixer": {"kind": "projection"}, "ffn": {"kind": "projection"}},
        "one_kv_head": {"attention": {"num_kv_heads": KV_OWN}, "ffn": {"kind": "none"}},
        "identity": {"mixer": {"kind": "none"}, "ffn": {"kind": "none"}},
    },
    "layers": [{"pattern": ["default", "no_attention", "linear", "one_kv_head", "identity", "default"]}],
}  # fmt: skip
ATTENTION_LAYERS = {KV_FLAT: 2, KV_OWN: 1}  # KV heads -> layers with them
DENSE_LAYERS = {F: 2, F_NARROW: 1}  # FFN width -> layers


def _config(**extra: Any) -> ModelConfig:
    return ModelConfig.model_validate({**NAS, **extra})


def test_every_block_kind_counts_by_hand() -> None:
    p = count_params(_config()).as_dict()
    assert p["decoder/attention/qkv"] == sum(n * D * (H + 2 * g) * HD for g, n in ATTENTION_LAYERS.items())
    assert p["decoder/attention/out"] == 3 * H * HD * D
    assert p["decoder/attention/norm"] == 3 * D  # the attention-free blocks have no input norm
    assert p["decoder/ffn/in"] == sum(n * D * 2 * f for f, n in DENSE_LAYERS.items())
    assert p["decoder/ffn/out"] == sum(n * f * D for f, n in DENSE_LAYERS.items())
    assert p["decoder/ffn/norm"] == 3 * D + D  # three dense FFNs, and the projected FFN keeps its norm
    assert p["decoder/mixer/projection"] == p["decoder/ffn/projection"] == D * D  # bias-free
    assert p["decoder/mixer/norm"] == D
    assert count_params(_config()).total == sum(p.values())
    derived = _config().derived()
    assert derived["mixer_layers"] == {"attention": 3, "none": 2, "projection": 1}
    assert derived["kv_cache_values_per_token"] == sum(n * 2 * g * HD for g, n in ATTENTION_LAYERS.items())


def test_forward_flops_by_hand() -> None:
    b, n = 2, 13
    t = b * n
    f = forward_flops(_config(), Workload(batch_size=b, seq_len=n)).breakdown.as_dict()
    assert f["decoder/attention/qkv"] == sum(
        k * 2 * t * D * (H + 2 * g) * HD for g, k in ATTENTION_LAYERS.items()
    )
    assert f["decoder/attention/scores"] == 3 * 2 * b * H * n * n * HD
    assert f["decoder/ffn/in"] == sum(k * 2 * t * D * 2 * w for w, k in DENSE_LAYERS.items())
    assert f["decoder/mixer/projection"] == f["decoder/ffn/projection"] == 2 * t * D * D


def test_only_attention_layers_cache_each_with_its_own_kv_heads() -> None:
    short = estimate_memory(_config(), Workload(batch_size=3, seq_len=8))
    long = estimate_memory(_config(), Workload(batch_size=3, seq_len=40))
    per_token = sum(n * 2 * g * HD for g, n in ATTENTION_LAYERS.items())
    assert short.kv_cache_bytes == 3 * 8 * per_token * 4
    assert long.kv_cache_bytes == 3 * 40 * per_token * 4
    assert long.recurrent_state_bytes == 0


def test_tensor_parallel_splits_each_layers_kv_heads_and_replicates_the_projections() -> None:
    """--tp 2: the one-KV-head layer's head is replicated on both ranks (a note), the others split; the
    projections and norms are whole on every rank."""
    config = _config()
    (rank,) = stage_params(config, Parallelism(tp=2))
    qkv = sum(n * D * (H // 2 + 2 * max(1, g // 2)) * HD for g, n in ATTENTION_LAYERS.items())
    out, ffn = 3 * (H // 2) * HD * D, sum(n * 3 * D * w // 2 for w, n in DENSE_LAYERS.items())
    norms = (3 + 4 + 1 + 1) * D  # attention, FFN (and the projected FFN's), the projected mixer's, final
    vocab = 2 * V * D // 2
    assert rank == qkv + out + ffn + 2 * D * D + norms + vocab
    errors, notes = parallel_problems(config, Parallelism(tp=2))
    assert not errors
    assert [n.code for n in notes] == ["tp_kv_replicated"] and "num_kv_heads (1)" in notes[0].message
    errors, _ = parallel_problems(config, Parallelism(tp=4))  # 4 query heads: 2 and 1 KV heads replicated
    assert not errors


@pytest.mark.parametrize(
    ("path", "value", "code"),
    [
        (("blocks", "one_kv_head", "attention"), {"num_kv_heads": 3}, "kv_heads_not_divisor"),
        (("blocks", "linear", "ffn"), {"kind": "projection", "ffn_dim": 16}, "field_of_other_kind"),
        (("attention",), {"kind": "mla", "num_kv_heads": 1, "kv_lora_rank": 8, "qk_nope_head_dim": 8,
                          "qk_rope_head_dim": 4, "v_head_dim": 8}, "field_of_other_kind"),
    ],
)  # fmt: skip
def test_bad_block_specs_are_refused_naming_the_field(path: tuple[str, ...], value: Any, code: str) -> None:
    data: dict[str, Any] = {**NAS, "blocks": {k: dict(v) for k, v in NAS["blocks"].items()}}
    target = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(ValidationError) as info:
        ModelConfig.model_validate(data)
    error = info.value.errors()[0]
    assert error["type"] in (code, "block_invalid")
    assert code == "kv_heads_not_divisor" or "num_kv_heads" in error["msg"] or "ffn_dim" in error["msg"]
    if code == "kv_heads_not_divisor":
        assert (
            "num_kv_heads (3) must divide num_heads (4)" in error["msg"]
            and "use num_kv_heads 2 or 4" in error["msg"]
        )


# --- the torch model ---------------------------------------------------------------------------------------------


@pytest.mark.torch
@pytest.mark.parametrize("attention", ["eager", "sdpa"])
def test_verify_reconciles_every_block_kind_exactly(attention: str) -> None:
    """``embedcalc.verify``: every parameter and FLOP row equals the torch model's."""
    pytest.importorskip("torch")
    import embedcalc

    result = embedcalc.verify(NAS, batch_size=2, seq_len=11, attention=attention)
    assert result.agree
    assert result.params.counted_total == count_params(_config()).total


@pytest.mark.torch
def test_tp2_shards_and_collectives_equal_torch() -> None:
    """``verify --tp 2`` on a fake process group: each rank's shards (the one-KV-head layer's head replicated, the
    projections whole) and the collectives CommDebugMode records equal the analysis."""
    pytest.importorskip("torch")
    from embedcalc.reconcile.sharding import verify_sharded

    result = verify_sharded("tiny-nas", _config(), Parallelism(tp=2))
    assert result.agree, result.mismatches()
    assert {"decoder/mixer/projection", "decoder/ffn/projection"} <= {r.key for r in result.shards}


@pytest.mark.torch
def test_generation_caches_the_analytic_bytes() -> None:
    torch = pytest.importorskip("torch")
    from embedcalc.modeling import build_model
    from embedcalc.modeling.generate import allocate_cache, greedy_generate, reference_generate

    config = _config()
    model = build_model(config, attention="eager", device="cpu")
    prompt = torch.randint(0, V, (2, 7), generator=torch.Generator().manual_seed(0))  # (B, P)
    cache = allocate_cache(model, 2, 7 + 5)
    run = greedy_generate(model, prompt, 5, cache)
    assert run.tokens.tolist() == reference_generate(model, prompt, 5).tolist()
    assert (
        cache.nbytes
        == estimate_memory(config, Workload(batch_size=2, seq_len=7, gen_tokens=5)).kv_cache_bytes
    )


def test_a_num_heads_sweep_keeps_each_blocks_kv_heads(cli: Any, write_config: Any) -> None:
    """The grid path (analysis/grid.py) reads a block's own KV heads as fixed while num_heads varies: each valid
    point counts what the single-config path counts, and a point whose num_heads the block's KV heads do not divide
    is listed invalid naming that block's field."""
    import json

    data = {
        **NAS,
        "blocks": {
            **NAS["blocks"],
            "one_kv_head": {"attention": {"num_kv_heads": 4}, "ffn": {"kind": "none"}},
        },
    }
    path = write_config(data)
    result = cli("sweep", str(path), "--num-heads", "2,4,8", "--format", "json")
    assert result.exit_code == 0, result.stderr
    points = {p["num_heads"]: p for p in json.loads(result.stdout)["results"][0]["points"]}
    assert [p["path"] for p in points[2]["problems"]] == ["blocks.one_kv_head.attention.num_kv_heads"]
    for heads in (4, 8):
        single = count_params(ModelConfig.model_validate({**data, "num_heads": heads})).total
        assert points[heads]["params"]["total"] == single


@pytest.mark.torch
def test_the_bench_miniature_scales_each_blocks_kv_heads() -> None:
    """bench and bench --mode generate page in with a miniature of the model (4 query heads): a block's own KV
    heads are scaled as the flat ones (MHA stays MHA, MQA MQA, GQA 2), so the miniature of a config with 8 query
    heads and a block of 8 KV heads is a valid config that verify reconciles (it was refused: 8 does not divide 4)."""
    pytest.importorskip("torch")
    import embedcalc
    from embedcalc.modeling.benchmark import miniature

    blocks = {**NAS["blocks"], "one_kv_head": {"attention": {"num_kv_heads": 8}, "ffn": {"kind": "none"}}}
    tiny = miniature(_config(num_heads=8, blocks=blocks))
    own = {b.name: b.attention.num_kv_heads for b in tiny.named_blocks.values() if b.attention is not None}
    assert own == {"default": 2, "one_kv_head": 4}
    assert embedcalc.verify(tiny.model_dump(exclude_unset=True), seq_len=8, attention="eager").agree
