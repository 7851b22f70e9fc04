"""The general reader's FLOP counter (embedcalc.modeling.meta_flops) counts what torch's FlopCounterMode counts, op by
op and module by module, on transformers' own classes built on the meta device: attention, fused MoE experts run as
batched matmuls, an encoder-decoder, and the per-token recurrent loops its memo is for (RWKV, Mamba's scan)."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = [pytest.mark.torch]
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from embedcalc.modeling.hf_classes import build_meta_class, choose_class, hf_config, quiet  # noqa: E402
from embedcalc.modeling.meta_flops import MetaFlopCounter  # noqa: E402

FAMILIES: dict[str, dict[str, Any]] = {
    "llama": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=100),
    "qwen3_moe": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=16, moe_intermediate_size=32, num_experts=8,
                      num_experts_per_tok=2, vocab_size=100),
    "t5": dict(d_model=64, d_ff=128, num_layers=2, num_heads=4, d_kv=16, vocab_size=100),
    "rwkv": dict(hidden_size=64, num_hidden_layers=2, attention_hidden_size=64, intermediate_size=128,
                 vocab_size=100, context_length=64),
    "mamba": dict(hidden_size=64, num_hidden_layers=2, vocab_size=100),
}  # fmt: skip


def _forward(model_type: str, counter: Any) -> tuple[Any, Any]:
    with quiet():
        config = hf_config({"model_type": model_type, **FAMILIES[model_type]})
    class_name, _, architecture, build_from, _ = choose_class(config)
    model = build_meta_class(class_name, build_from).eval()
    ids = torch.zeros(2, 24, dtype=torch.long, device="meta")
    inputs: dict[str, Any] = {"input_ids": ids}
    if architecture == "encoder-decoder":
        inputs["decoder_input_ids"] = torch.zeros(2, 8, dtype=torch.long, device="meta")
    with counter, quiet():
        out = model(**inputs)
    return out, counter.get_flop_counts()


@pytest.mark.parametrize("model_type", FAMILIES)
def test_the_count_is_flop_counter_modes_module_by_module(model_type: str) -> None:
    _, expected = _forward(model_type, FlopCounterMode(display=False))
    counter = MetaFlopCounter()
    _, got = _forward(model_type, counter)
    assert got == expected
    assert sum(expected["Global"].values()) > 0
    unmemoised = MetaFlopCounter(memo=False)
    _, plain = _forward(model_type, unmemoised)
    assert plain == expected and unmemoised.reused == 0


@pytest.mark.parametrize("model_type", ["rwkv", "mamba"])
def test_a_per_token_loop_reuses_its_ops_results_and_returns_the_same_shapes(model_type: str) -> None:
    reference, _ = _forward(model_type, MetaFlopCounter(memo=False))
    counter = MetaFlopCounter()
    out, _ = _forward(model_type, counter)
    # the 24-token loop repeats each op's signature: most ops are answered from the memo, not run again
    assert counter.reused > 100
    assert out.logits.shape == reference.logits.shape == (2, 24, 100)
    assert out.logits.dtype == reference.logits.dtype and out.logits.stride() == reference.logits.stride()


def test_on_fake_tensors_too() -> None:
    """A forward that asks a padding mask ``.all()`` runs on FakeTensors (hf_meta): FakeTensor routes metadata
    queries and ``prim.device`` through the mode, which leaves them to the tensor, as FlopCounterMode does."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    half = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, vocab_size=100, sliding_window=8)  # fmt: skip
    with quiet():
        config = hf_config({"model_type": "t5gemma", "encoder": half, "decoder": half, "vocab_size": 100})
    class_name, _, _, build_from, _ = choose_class(config)
    model = build_meta_class(class_name, build_from).eval()
    counts = []
    for counter in (FlopCounterMode(display=False), MetaFlopCounter(memo=False)):
        mode = FakeTensorMode(allow_non_fake_inputs=True)
        ids = mode.from_tensor(torch.zeros(2, 16, dtype=torch.long, device="meta"))
        with mode, counter, quiet():
            model(input_ids=ids, decoder_input_ids=ids)
        counts.append(counter.get_flop_counts())
    assert counts[0] == counts[1] and sum(counts[0]["Global"].values()) > 0


def test_the_coverage_scripts_counter_check_runs_both_counters() -> None:
    """scripts/hf_coverage.py --counter-check: the docs' claim that the counters agree is that script's output."""
    from paths import load_script

    coverage = load_script("hf_coverage")
    row = coverage._counter_check({"model_type": "rwkv", **FAMILIES["rwkv"]}, 8)
    assert row["counter"] == "equal"
    assert row["flop_counter_mode_s"] > 0 and row["meta_flop_counter_s"] > 0
    assert coverage._counter_check(
        {"model_type": "llama", "hidden_size": 63, "num_attention_heads": 4}, 8
    ) == {"counter": "no forward"}
