"""The roofline's bytes moved come from the layer model (issue 20): prefill KV writes per layer window and MLA's
compressed cache, attention cores in each block's own widths, and the routed experts a step's tokens reach."""

from __future__ import annotations

import pytest

from embedcalc.analysis.params import param_tensors
from embedcalc.analysis.roofline import (
    Traffic,
    experts_reached,
    matmul_flops,
    phase_traffic,
    prefill_lengths,
    weights_of,
)  # fmt: skip
from embedcalc.analysis.workload import Workload
from embedcalc.sources.loading import load_target


def _prefill(target: str, seq_len: int = 1024, batch_size: int = 1) -> dict[str, Traffic]:
    config = load_target(target).config
    w = Workload(batch_size=batch_size, seq_len=seq_len, dtype="bfloat16")
    weights = weights_of(config, w)
    return phase_traffic(
        config, w, matmul_flops(config, w, True), prefill_lengths(config, w), False, 2, weights
    )


@pytest.mark.parametrize(("target", "written"), [
    ("gemma-2-9b", 42 * 1024 * 2 * 8 * 256 * 2),  # every one of the 42 layers (local window 4096 > 1024)
    ("deepseek-v3", 61 * 1024 * (512 + 64) * 2),  # MLA: the latent and the shared rope key, 61 layers
])  # fmt: skip
def test_prefill_writes_the_kv_cache_the_memory_model_holds(target: str, written: int) -> None:
    traffic = _prefill(target)
    assert sum(t.kv_write_bytes for t in traffic.values()) == written
    assert written in (352_321_536, 71_958_528)


def test_mla_cores_read_the_decompressed_heads_of_every_layer() -> None:
    config = load_target("deepseek-v3").config
    a = config.named_blocks["default"].attention
    scores = _prefill("deepseek-v3")["decoder/attention/scores"]
    # Q and K of all 128 heads x 192, 61 layers, 1024 tokens, bf16
    assert scores.activation_bytes == 2 * 1024 * a.q_dim * 61 * 2


def test_routed_experts_read_are_the_expected_distinct_experts_of_the_tokens() -> None:
    config = load_target("deepseek-v3").config
    every = sum(t.numel for t in param_tensors(config) if t.key == "decoder/moe/experts") * 2
    one = _prefill("deepseek-v3", seq_len=1)["decoder/moe/experts"]
    assert one.weight_bytes == every * 8 // 256
    many = _prefill("deepseek-v3", seq_len=16)["decoder/moe/experts"]
    assert every * 8 // 256 < many.weight_bytes < every * 16 * 8 // 256
    assert experts_reached(256, 8, 1) == 8
    assert experts_reached(256, 8, 10_000) == pytest.approx(256)
    assert experts_reached(8, 2, 2) == pytest.approx(8 * (1 - 0.75**2))


@pytest.mark.torch
@pytest.mark.parametrize("kind", ["mla", "sparse"])
def test_a_latent_decode_step_counts_what_the_torch_model_runs(kind: str) -> None:
    """The time model's decode step (decode_step_flops) of latent attention is the absorbed form embedcalc's torch
    model decodes with (modeling/latent_attention._absorbed): FlopCounterMode over one decode step of the built
    model, against a cache of 11 tokens, counts exactly the analytic step's FLOPs at KV length 12."""
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    from embedcalc.analysis.roofline import decode_step_flops
    from embedcalc.config.schema import ModelConfig
    from embedcalc.modeling import build_model
    from embedcalc.modeling.generate import allocate_cache

    attention = {"kind": kind, "q_lora_rank": 16, "kv_lora_rank": 12, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4,
                 "v_head_dim": 8} | ({"index_heads": 2, "index_head_dim": 8, "index_topk": 5} if kind == "sparse"
                                     else {})  # fmt: skip
    config = ModelConfig.model_validate({
        "name": f"tiny-{kind}", "architecture": "decoder", "vocab_size": 64, "max_seq_len": 32, "embed_dim": 32,
        "num_heads": 4, "num_layers": 2, "ffn_dim": 48, "activation": "swiglu", "norm": "rmsnorm",
        "norm_placement": "pre", "position": "rope", "bias": False, "tie_embeddings": False, "lm_head": True,
        "attention": attention,
    })  # fmt: skip
    model = build_model(config, device="cpu", dtype=torch.float32)
    ids = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        cache = allocate_cache(model, batch_size=2, total_tokens=12)
        model.decode_step(ids[:, :11], cache)
        with FlopCounterMode(display=False) as counter:
            model.decode_step(ids[:, 11:], cache)
    analytic = decode_step_flops(config, Workload(batch_size=2, seq_len=11), 12)
    assert counter.get_total_flops() == sum(analytic.values())
