"""The last decoder families of issue 23 against transformers: MiniCPM3 and Apertus counted, Gemma 3n and Gemma 4
text refused (Llama-3.2-Vision's text model is counted in test_hf_mllama.py).

For each counted family a flagship file (``tests/fixtures/hf``: transformers' config class keys with the published
model's values, written here, not a hub copy; tests/fixtures/published_sizes.yaml names the source and checks the
total on both sides): every key of the file is mapped or ignored with a reason; the KV cache equals the per-layer
sum read off transformers' config object; variants the readers must follow count what transformers builds on the
meta device; and forward FLOPs equal ``FlopCounterMode`` on a small eager variant of the file. The refused ones:
the files transformers writes exit 3 naming the key whose layers the layer model cannot describe.
"""

from __future__ import annotations

from typing import Any

import pytest
from hf_reference import (
    forward_flops,
    hf_config,
    hf_model,
    kv_cache_formula,
    mapped_config,
    numel,
    published,
    raw_fixture,
    unaccounted_keys,
)

from embedcalc.analysis.flops import forward_flops as analytic_flops
from embedcalc.analysis.memory import kv_cache_bytes
from embedcalc.analysis.params import count_params
from embedcalc.analysis.workload import Workload

PUBLISHED = published("test_hf_decoder_families")


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_report_accounts_for_every_key(name: str) -> None:
    assert unaccounted_keys(raw_fixture(name)) == set()


# --- variants: what each reader must follow ---------------------------------------------------------------------

VARIANTS = [
    ("minicpm3-4b", {"q_lora_rank": None}),
    ("minicpm3-4b", {"attention_bias": True, "mlp_bias": True, "v_head_dim": 96}),
    ("minicpm3-4b", {"tie_word_embeddings": False, "scale_depth": None, "dim_model_base": None}),
    # ACT2FN's plain activations learn nothing; xIELU's two scalars go with hidden_act xielu
    ("apertus-8b-2509", {"hidden_act": "relu2", "attention_bias": True}),
    ("apertus-8b-2509", {"head_dim": 64, "num_key_value_heads": 32, "tie_word_embeddings": True}),
]


@pytest.mark.torch
@pytest.mark.parametrize(("name", "extra"), VARIANTS)
def test_variants_count_what_transformers_builds(
    hf_transformers: Any, name: str, extra: dict[str, Any]
) -> None:
    raw = raw_fixture(name) | extra
    assert count_params(mapped_config(raw)).total == numel(hf_model(hf_transformers, raw))


# --- KV cache ------------------------------------------------------------------------------------------------------


@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_kv_cache_follows_transformers_config(hf_transformers: Any, name: str) -> None:
    raw = raw_fixture(name)
    cfg, config = hf_config(hf_transformers, raw), mapped_config(raw)
    expected = {n: kv_cache_formula(cfg, n, 2) for n in (1, 1000, 8192)}
    assert {n: kv_cache_bytes(config, Workload(seq_len=n, dtype="float16")) for n in expected} == expected


# --- FLOPs on a small eager variant ----------------------------------------------------------------------------------

_SMALL = dict(
    hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4,
    head_dim=16, vocab_size=128, max_position_embeddings=64, kv_lora_rank=16, q_lora_rank=24, qk_nope_head_dim=8,
    qk_rope_head_dim=8, v_head_dim=8,
)  # fmt: skip


_TOKEN_IDS = ("pad_token_id", "bos_token_id", "eos_token_id")  # ids past the small vocabulary


def _small(raw: dict[str, Any]) -> dict[str, Any]:
    """The file with every size it has shrunk (a null stays null) and its token ids dropped."""
    return {
        k: _SMALL[k] if k in _SMALL and v is not None else v for k, v in raw.items() if k not in _TOKEN_IDS
    }


@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_forward_flops_equal_flop_counter(hf_transformers: Any, name: str) -> None:
    import torch

    small = _small(raw_fixture(name))
    torch.manual_seed(0)
    auto = hf_transformers.AutoModelForCausalLM
    model = auto.from_config(hf_config(hf_transformers, small), attn_implementation="eager").eval()
    config = mapped_config(small)
    measured = {shape: forward_flops(model, *shape) for shape in ((1, 5), (2, 16))}
    assert {
        (b, n): analytic_flops(config, Workload(batch_size=b, seq_len=n)).forward for b, n in measured
    } == measured
