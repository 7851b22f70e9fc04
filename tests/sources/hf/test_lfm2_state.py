"""LFM2's short-convolution state (issue 23 gap check): transformers' cache allocates the conv window as
(B, hidden_size, conv_L_cache) — L_cache columns, not L_cache - 1 — after a prefill shorter or longer than the
window and after a decode step; embedcalc's analytic state (inner_dim x conv_kernel per layer) is that allocation.
(embedcalc's own ``bench --mode generate`` state equals the analytic one: test_mixers_hf.py.)
"""

from __future__ import annotations

import pytest
from hf_reference import mapped_config, quiet_transformers

from embedcalc.analysis.memory import estimate_memory
from embedcalc.analysis.workload import Workload

RAW = {
    "model_type": "lfm2", "vocab_size": 64, "hidden_size": 32, "num_hidden_layers": 3,
    "layer_types": ["conv", "full_attention", "conv"], "num_attention_heads": 2, "num_key_value_heads": 1,
    "intermediate_size": 48, "conv_L_cache": 3, "block_auto_adjust_ff_dim": False, "max_position_embeddings": 128,
}  # fmt: skip


@pytest.mark.torch
@pytest.mark.parametrize("prompt", [1, 2, 7])
def test_the_conv_state_is_what_transformers_allocates(prompt: int) -> None:
    torch = pytest.importorskip("torch")
    transformers = quiet_transformers()
    model = transformers.Lfm2ForCausalLM(transformers.Lfm2Config(**RAW)).eval()
    ids = torch.randint(0, 64, (2, prompt))
    with torch.no_grad():
        cache = model(ids, use_cache=True).past_key_values
        cache = model(ids[:, :1], past_key_values=cache, use_cache=True).past_key_values
    shapes = [
        tuple(t.shape) for layer in cache.layers for t in (getattr(layer, "conv_states", None) or {}).values()
    ]
    assert shapes == [(2, 32, 3), (2, 32, 3)]
    held = sum(2 * 32 * 3 for _ in shapes) * 4  # fp32
    assert (
        held
        == estimate_memory(mapped_config(RAW), Workload(batch_size=2, seq_len=prompt)).recurrent_state_bytes
    )
