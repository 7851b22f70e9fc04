"""Measured generation (DESIGN.md §10): the static KV cache and the cached decode of the torch model.

Cached decode == full recomputation without a cache (logits at every step and greedy tokens, fp32) for standard,
GQA, MLA, sparse (DSA, with and without shared selections), sliding-window and chunked (rolling buffers), sinks,
ALiBi, parallel and shared-layer decoders and a T5
encoder-decoder, under SDPA and eager cores; the cache's numel × element size equals the analytic
``kv_cache_bytes`` of the same workload; ``bench --mode generate`` reports the measurement keys with the roofline
prediction beside them. Projection fusion (bench only) leaves the outputs unchanged.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from embedcalc.analysis.memory import kv_cache_bytes  # noqa: E402
from embedcalc.analysis.workload import Workload  # noqa: E402
from embedcalc.config.schema import ModelConfig  # noqa: E402
from embedcalc.modeling.generate import allocate_cache, greedy_generate, reference_generate  # noqa: E402
from embedcalc.modeling.model import TransformerModel, build_model  # noqa: E402
from embedcalc.sources.loading import load_target  # noqa: E402

pytestmark = pytest.mark.torch

BASE: dict[str, Any] = {
    "architecture": "decoder", "vocab_size": 97, "max_seq_len": 32, "embed_dim": 32, "num_heads": 4,
    "num_kv_heads": 4, "num_layers": 2, "ffn_dim": 64, "position": "rope", "activation": "swiglu",
    "norm": "rmsnorm", "bias": False, "tie_embeddings": False,
}  # fmt: skip
MLA = {"kind": "mla", "q_lora_rank": 8, "kv_lora_rank": 6, "qk_nope_head_dim": 4, "qk_rope_head_dim": 2,
       "v_head_dim": 3}  # fmt: skip
SPARSE = {**MLA, "kind": "sparse", "index_heads": 4, "index_head_dim": 4, "index_topk": 4}
CONFIGS: dict[str, dict[str, Any]] = {
    "standard": {"position": "learned", "activation": "gelu", "norm": "layernorm", "bias": True},
    "gqa": {"num_kv_heads": 2},
    "mqa_partial_rotary": {"num_kv_heads": 1, "rotary_dim": 4},
    "mla": {"attention": MLA},
    "mla_windowed": {"attention": {**MLA, "sliding_window": 3}},
    "sparse": {"attention": SPARSE},
    # Mistral Large 4's parts: no query rank (the indexer reads the normalised input), per-head query scales, a
    # NoPE layer, LeRoPE's learned frequency scales
    "sparse_mistral_large4": {
        "attention": {**{k: v for k, v in SPARSE.items() if k != "q_lora_rank"}, "query_scale": True},
        "rope_scale": True, "blocks": {"nope": {"attention": {"kind": "sparse", "qk_nope_head_dim": 6,
                                                              "qk_rope_head_dim": 0}}},
        "layers": [{"pattern": ["default", "nope"]}]},
    "sparse_shared": {"attention": SPARSE, "num_layers": 3,
                      "blocks": {"shared": {"attention": {"kind": "sparse", "index_shared": True}}},
                      "layers": [{"pattern": ["default", "shared", "shared"]}]},
    "sliding_window": {"num_kv_heads": 2, "blocks": {"local": {"attention": {"sliding_window": 3}}},
                       "layers": [{"pattern": ["local", "default"]}]},
    # GPT-Neo's local layers: the window masks, the cache keeps every token (no rolling buffer)
    "sliding_window_full_cache": {"blocks": {"local": {"attention": {"sliding_window": 3, "full_cache": True}}},
                                  "layers": [{"pattern": ["default", "local"]}]},
    "chunked": {"attention": {"chunk_size": 4}},
    # MiniMax-M3's block-sparse attention: 2 of the blocks of 3 keys per query, its own among them
    "block_sparse": {"num_kv_heads": 2, "attention": {"index_heads": 2, "index_head_dim": 8, "index_topk": 2,
                                                      "index_block_size": 3, "qk_norm": "head"}},
    "head_gate": {"attention": {"head_gate": True}, "num_kv_heads": 2},
    "block_heads": {"num_kv_heads": 2, "blocks": {"wide": {"attention": {"num_heads": 8, "sinks": True}}},
                    "layers": [{"pattern": ["wide", "default"]}]},
    # MiMo-V2-Flash's sliding layers: value heads narrower than the keys, sinks, twice the KV heads
    "v_head_dim_window": {"attention": {"v_head_dim": 4}, "blocks": {"local": {"attention": {
        "sliding_window": 3, "sinks": True, "num_kv_heads": 4}}}, "layers": [{"pattern": ["default", "local"]}],
        "num_kv_heads": 2},
    "sinks_window": {"attention": {"sinks": True, "sliding_window": 4}},
    "qk_norm": {"attention": {"qk_norm": "head"}, "num_kv_heads": 2},
    "alibi": {"position": "alibi"},
    "parallel_shared": {"norm_placement": "parallel", "shared_layers": True},
    "sinusoidal_post": {"position": "sinusoidal", "norm_placement": "post", "norm": "layernorm"},
    # Gemma 4's parts: full layers with their own heads and values from keys, KV sharing, per-layer inputs
    "gemma4_kv_shared": {
        "num_layers": 4, "num_kv_heads": 2, "norm_placement": "sandwich", "per_layer_input_dim": 4,
        "per_layer_vocab_size": 50, "attention": {"qk_norm": "head", "sliding_window": 3},
        "blocks": {"full": {"attention": {"sliding_window": None, "head_dim": 16, "num_kv_heads": 1,
                                          "values_from_keys": True}},
                   "shared_local": {"attention": {"kv_shared": True}},
                   "shared_full": {"attention": {"sliding_window": None, "head_dim": 16, "num_kv_heads": 1,
                                                 "kv_shared": True}}},
        "layers": [{"pattern": ["default", "full", "shared_local", "shared_full"]}]},
    # Gemma 3n's parts: AltUp copies of the stream and Laurel around every layer, with KV sharing and per-layer inputs
    "gemma3n_altup": {
        "num_layers": 4, "num_kv_heads": 2, "norm_placement": "sandwich", "per_layer_input_dim": 4,
        "per_layer_vocab_size": 50, "altup_inputs": 3, "laurel_rank": 4,
        "attention": {"qk_norm": "head", "sliding_window": 3},
        "blocks": {"full": {"attention": {"sliding_window": None}},
                   "shared_local": {"attention": {"kv_shared": True}},
                   "shared_full": {"attention": {"sliding_window": None, "kv_shared": True}}},
        "layers": [{"pattern": ["default", "full", "shared_local", "shared_full"]}]},
    # Gemma 4 26B-A4B's MoE block: routed experts beside a dense MLP (a shared expert), scales and branch norms
    "gemma4_moe": {"ffn": {"kind": "moe", "num_experts": 4, "top_k": 2, "expert_dim": 16, "num_shared_experts": 1,
                           "shared_expert_dim": 48, "router_scale": True, "branch_norms": True}},
}  # fmt: skip
PROMPT, GEN, BATCH = 5, 9, 2


def _model(name: str, impl: str, config: ModelConfig | None = None) -> TransformerModel:
    config = config or ModelConfig.model_validate({**BASE, **CONFIGS[name]})
    model = build_model(config, attention=impl, device="cpu")  # type: ignore[arg-type]
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():  # larger weights than the cheap fill, so greedy tokens vary from step to step
        for param in model.parameters():
            param.copy_(torch.randn(param.shape, generator=generator) * 0.3)
    return model


def _ids(model: TransformerModel, length: int, seed: int = 0) -> Any:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, model.config.vocab_size, (BATCH, length), generator=generator)


def _check_cached_equals_full(model: TransformerModel, source: Any = None) -> None:
    prompt = _ids(model, PROMPT, 1)
    sequence = torch.cat((prompt, _ids(model, GEN, 2)), dim=1)  # (B, P + G): teacher-forced tokens
    cache = allocate_cache(model, BATCH, PROMPT + GEN, source.shape[1] if source is not None else 0)
    with torch.inference_mode():
        full = (model(source, sequence) if source is not None else model(sequence)).logits  # (B, P + G, V)
        memory = model.encode(source) if source is not None else None
        steps = [model.decode_step(prompt, cache, memory)]  # (B, P, V)
        for i in range(PROMPT, PROMPT + GEN):
            steps.append(model.decode_step(sequence[:, i : i + 1], cache))  # (B, 1, V)
    assert cache.position == PROMPT + GEN
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-4, atol=1e-4)
    cache = allocate_cache(model, BATCH, PROMPT + GEN, source.shape[1] if source is not None else 0)
    got = greedy_generate(model, prompt, GEN - 1, cache, source).tokens  # G steps fill P + G - 1 slots
    want = reference_generate(model, prompt, GEN - 1, source)
    assert got.shape == (BATCH, GEN)
    assert torch.equal(got, want)


# every config with SDPA by default, with eager attention too in the slow suite
@pytest.mark.parametrize("impl", ["sdpa", pytest.param("eager", marks=pytest.mark.slow)])
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_cached_decode_equals_full_recomputation(name: str, impl: str) -> None:
    _check_cached_equals_full(_model(name, impl))


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_encoder_decoder_cached_decode(impl: str) -> None:
    config = load_target("t5-small").config.model_copy(
        update={"num_layers": 2, "num_decoder_layers": 2, "embed_dim": 32, "num_heads": 4, "num_kv_heads": 4,
                "head_dim": 8, "ffn_dim": 64, "vocab_size": 97}
    )  # fmt: skip
    config = ModelConfig.model_validate(config.model_dump(exclude_unset=True))
    model = _model("", impl, config)
    _check_cached_equals_full(model, _ids(model, 7, 4))


def _analytic(config: ModelConfig, **workload: Any) -> int:
    return kv_cache_bytes(config, Workload(**workload))


@pytest.mark.parametrize(
    "name",
    [
        "gqa",
        "mla",
        "sparse",
        "sparse_shared",
        "sparse_mistral_large4",
        "sliding_window",
        "sliding_window_full_cache",
        "v_head_dim_window",
        "chunked",
        "block_sparse",
        "parallel_shared",
        "gemma4_kv_shared",
        "gemma3n_altup",
    ],
)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_cache_bytes_equal_analytic(name: str, dtype: str) -> None:
    config = ModelConfig.model_validate({**BASE, **CONFIGS[name]})
    model = build_model(config, device="meta", dtype=getattr(torch, dtype))
    cache = allocate_cache(model, 3, 6 + 5)
    assert cache.nbytes == _analytic(config, batch_size=3, seq_len=6, gen_tokens=5, dtype=dtype)


def test_cache_bytes_equal_analytic_encoder_decoder() -> None:
    config = load_target("t5-small").config
    model = build_model(config, device="meta")
    cache = allocate_cache(model, 2, 16 + 8, 16)
    assert cache.nbytes == _analytic(config, batch_size=2, seq_len=16, gen_tokens=8)
    cache = allocate_cache(model, 2, 4 + 8, 16)  # a short decoder prompt (tgt_len) and a longer source
    assert cache.nbytes == _analytic(config, batch_size=2, seq_len=16, tgt_len=4, gen_tokens=8)


MEASUREMENT_KEYS = ("ttft_s", "decode_s_per_token_median", "decode_s_per_token_p90", "decode_tokens_per_s",
                    "kv_cache_bytes_measured", "peak_memory_bytes")  # fmt: skip


def _bench_generate(cli: Any, target: str, *extra: str) -> dict[str, Any]:
    """``bench --mode generate`` in-process (the process boundary of bench has its own tests in
    tests/cli/test_bench_cli.py; a subprocess here cost a torch import per test)."""
    result = cli("bench", target, "--mode", "generate", "--device", "cpu", "--format", "json", *extra)
    assert result.exit_code == 0, (result.stderr, result.exception)
    envelope = json.loads(result.stdout)
    assert envelope["command"] == "bench"
    entry: dict[str, Any] = envelope["results"][0]
    return entry


def _check_measurement(entry: dict[str, Any]) -> None:
    m = entry["measurement"]
    for (
        key
    ) in MEASUREMENT_KEYS:  # a tiny model's peak RSS growth can be 0 (it fits in pages already resident)
        assert m[key] is not None and m[key] >= (0 if key == "peak_memory_bytes" else 1e-12), key
        assert key in m["predicted"], key
    assert m["kv_cache_bytes_measured"] == entry["memory"]["kv_cache_bytes"] == m["kv_cache_bytes"]
    assert m["kv_cache_bytes_measured"] == m["predicted"]["kv_cache_bytes_measured"]
    assert set(m["error_pct"]) == set(m["predicted"]) == set(MEASUREMENT_KEYS)
    for key in MEASUREMENT_KEYS:  # one convention: 100 (measured - predicted) / predicted
        expected = 100 * (m[key] - m["predicted"][key]) / m["predicted"][key] if m["predicted"][key] else None
        assert m["error_pct"][key] == pytest.approx(expected, rel=1e-9), key
    assert "expected time for local" in m["prediction_note"]
    assert m["decode_s_per_token_p10"] <= m["decode_s_per_token_median"] <= m["decode_s_per_token_p90"]


def test_bench_generate_tiny_decoder(cli: Any, tmp_path: Any, measured_local: Path) -> None:
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps({**BASE, **CONFIGS["sliding_window"]}))
    entry = _bench_generate(cli, str(path), "--gen-tokens", "12", "--seq-len", "8", "--batch-size", "2",
                            "--repeat", "2", "--warmup", "1")  # fmt: skip
    _check_measurement(entry)
    assert entry["measurement"]["gen_tokens"] == 12


def test_bench_generate_refuses_an_encoder_and_zero_tokens(cli: Any) -> None:
    encoder = cli("bench", "bert-base", "--mode", "generate", "--gen-tokens", "4", "--device", "cpu")
    assert encoder.exit_code == 2 and "encoder" in encoder.stderr
    zero = cli("bench", "gpt2", "--mode", "generate", "--device", "cpu")
    assert zero.exit_code == 2 and "--gen-tokens" in zero.stderr


@pytest.mark.slow  # about 15-20 s; the default suite runs generate end to end on a tiny decoder
def test_bench_generate_gpt2(cli: Any, measured_local: Path) -> None:
    """The done-when test of DESIGN.md §10: gpt2, 32 tokens, CPU, JSON (about 15 s here)."""
    entry = _bench_generate(cli, "gpt2", "--gen-tokens", "32", "--repeat", "1", "--warmup", "0")
    _check_measurement(entry)


@pytest.mark.slow
def test_bench_generate_encoder_decoder_bfloat16(cli: Any, measured_local: Path) -> None:
    entry = _bench_generate(cli, "t5-small", "--gen-tokens", "8", "--seq-len", "32", "--dtype", "bfloat16",
                            "--repeat", "1", "--warmup", "0")  # fmt: skip
    _check_measurement(entry)


@pytest.mark.parametrize("name", ["gqa", "standard", "mla", "qk_norm", "gemma4_kv_shared"])
def test_fused_projections_keep_outputs(name: str) -> None:
    from embedcalc.modeling.fusion import FusedGatedInput, FusedQKV, fuse_projections

    model = _model(name, "sdpa")
    ids = _ids(model, PROMPT + GEN)
    with torch.inference_mode():
        before = model(ids).logits
        fused = fuse_projections(model)
        after = model(ids).logits
    kinds = {type(m) for m in model.modules()}
    assert fused > 0 and (FusedQKV in kinds or name == "mla")
    assert (FusedGatedInput in kinds) == (model.config.activation == "swiglu")
    torch.testing.assert_close(after, before, rtol=1e-4, atol=1e-4)
    _check_cached_equals_full(model)
