"""Llama 4 (text model, and the ``text_config`` of the multimodal file), DBRX, Cohere 2 and EXAONE 4 (issue 10):
each published config.json is exact.

As in ``test_hf_layer_families.py``: transformers builds the model from the fixture on the meta device and
embedcalc's parameter total equals its ``numel``; the KV cache equals the per-layer formula read from
transformers' own config object (a sliding window or an attention chunk caps the tokens a layer keeps, as
transformers' cache does); forward FLOPs equal ``FlopCounterMode`` on a tiny eager variant of every file.

Two facts of transformers 5 the tests work around, both outside what a count depends on: the Llama 4 files on the
hub write ``attn_temperature_tuning: 4``, which the strict Llama4TextConfig refuses (it wants a bool; any true
value switches the same element-wise scaling on), so the build passes ``True``; and Llama4TextMoe runs every
expert on every token (unrouted scores are 0), so ``FlopCounterMode`` counts num_local_experts experts per token
where embedcalc counts the top_k a token is routed to (DESIGN §9) — the test checks the difference exactly.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hf_reference import (
    fixture_path,
    forward_flops,
    kv_cache_formula,
    mapped_config,
    numel,
    published,
    raw_fixture,
    text_raw,
    unaccounted_keys,
)

from embedcalc.analysis.flops import forward_flops as analytic_flops
from embedcalc.analysis.memory import kv_cache_bytes
from embedcalc.analysis.params import count_params
from embedcalc.analysis.workload import Workload
from embedcalc.errors import ConfigError
from embedcalc.sources.hf import FAMILIES, map_hf_config
from embedcalc.sources.loading import load_target

# fixture -> its row (model_type, transformers' total, active): this module's group of
# tests/fixtures/published_sizes.yaml, whose sizes tests/sources/hf/test_published_sizes.py checks on both sides
PUBLISHED = published("test_hf_more_families")


def _buildable(raw: dict[str, Any]) -> dict[str, Any]:
    """The (text) model's keys as transformers 5 accepts them: attn_temperature_tuning as a bool."""
    text = dict(text_raw(raw))
    if "attn_temperature_tuning" in text:
        text["attn_temperature_tuning"] = bool(text["attn_temperature_tuning"])
    return text


def _hf_config(transformers: Any, raw: dict[str, Any]) -> Any:
    text = _buildable(raw)
    return transformers.CONFIG_MAPPING[text["model_type"]].from_dict(text)


def _hf_model(transformers: Any, raw: dict[str, Any], meta: bool = True) -> Any:
    import torch

    config = _hf_config(transformers, raw)
    if not meta:
        return transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()


def test_every_family_is_registered_with_a_fixture() -> None:
    assert {"llama4_text", "dbrx", "cohere2", "exaone4"} <= set(FAMILIES)
    assert {row.model_type for row in PUBLISHED.values()} == {"llama4", "dbrx", "cohere2", "exaone4"}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_report_accounts_for_every_key(name: str) -> None:
    assert not unaccounted_keys(raw_fixture(name), name)


def test_active_params_per_token() -> None:
    """Scout: 17B active (one routed expert of 16, the shared one, attention); DBRX: 36B (4 of 16 experts). The data
    file's active counts (which test_published_sizes.py checks embedcalc gives) are these."""
    scout, dbrx = PUBLISHED["llama-4-scout-17b-16e"], PUBLISHED["dbrx-instruct"]
    expert = 3 * 5120 * 8192
    assert scout.active == scout.total - 48 * 15 * expert
    assert math.floor(scout.active / 1e9) == 17
    assert dbrx.active == dbrx.total - 40 * 12 * 3 * 6144 * 10752
    assert math.floor(dbrx.active / 1e9) == 36


# --- KV cache -----------------------------------------------------------------------------------------------------


@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_kv_cache_equals_transformers_config(transformers: Any, name: str) -> None:
    cfg = _hf_config(transformers, raw_fixture(name))
    config = load_target(str(fixture_path(name))).config
    for tokens in (1, 1000, 8192, 32768):
        workload = Workload(seq_len=tokens, dtype="float16")
        assert kv_cache_bytes(config, workload) == kv_cache_formula(cfg, tokens, 2), tokens


# --- FLOPs on tiny eager variants ---------------------------------------------------------------------------------

_TINY: dict[str, dict[str, Any]] = {
    "llama-4-scout-17b-16e": dict(
        hidden_size=64, intermediate_size=32, intermediate_size_mlp=96, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, vocab_size=128, max_position_embeddings=64, attention_chunk_size=8,
        num_local_experts=4, num_experts_per_tok=1, interleave_moe_layer_step=2, moe_layers=None,
        no_rope_layers=[1, 1, 1, 0], rope_scaling=None,
    ),
    "dbrx-instruct": dict(
        d_model=64, n_heads=4, n_layers=2, vocab_size=128, max_seq_len=64,
        attn_config={"clip_qkv": 8, "kv_n_heads": 2, "model_type": "", "rope_theta": 500000},
        ffn_config={"ffn_hidden_size": 32, "model_type": "", "moe_num_experts": 4, "moe_top_k": 2},
    ),
    "c4ai-command-r7b-12-2024": dict(
        hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, vocab_size=128, max_position_embeddings=64, sliding_window=8,
    ),
    "exaone-4.0-32b": dict(
        hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, vocab_size=128, max_position_embeddings=64, sliding_window=8, rope_scaling=None,
    ),
}  # fmt: skip
_TOKEN_IDS = ("pad_token_id", "bos_token_id", "eos_token_id")


def _tiny(name: str) -> dict[str, Any]:
    small = dict(text_raw(raw_fixture(name))) | _TINY[name]
    small.pop("moe_layers", None)
    return {k: v for k, v in small.items() if k not in _TOKEN_IDS}


@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(_TINY))
def test_forward_flops_equal_flop_counter(transformers: Any, name: str) -> None:
    import torch

    small = _tiny(name)
    torch.manual_seed(0)
    # real weights, so transformers' routing runs; no grad: FlopCounterMode's module tracker rejects the
    # grad-less views of DBRX's fused expert weights
    model = _hf_model(transformers, small, meta=False).requires_grad_(False)
    config = mapped_config(small)
    assert numel(model) == count_params(config).total
    measured = forward_flops(model, batch=2, seq_len=16)
    analytic = analytic_flops(config, Workload(batch_size=2, seq_len=16)).forward
    if name.startswith("llama-4"):
        # Llama4TextMoe: every expert on every token; embedcalc counts the top_k routed ones
        t, d, fe, unrouted, moe_layers = 2 * 16, 64, 32, 4 - 1, 2
        analytic += moe_layers * 2 * t * unrouted * 3 * d * fe
    assert measured == analytic


@pytest.mark.torch
def test_llama4_with_every_expert_routed_is_exact(transformers: Any) -> None:
    """top_k = num_local_experts: transformers' dense expert compute is then exactly the routed one."""
    import torch

    small = _tiny("llama-4-scout-17b-16e") | {"num_experts_per_tok": 4}
    torch.manual_seed(0)
    model = _hf_model(transformers, small, meta=False)
    expected = analytic_flops(mapped_config(small), Workload(batch_size=2, seq_len=16)).forward
    assert forward_flops(model, batch=2, seq_len=16) == expected


# --- layouts and file variants -------------------------------------------------------------------------------------


def test_scout_layout_chunked_rope_layers_and_global_nope_layers() -> None:
    config = load_target(str(fixture_path("llama-4-scout-17b-16e"))).config
    plan = config.stack_plan("decoder")
    blocks = [plan.block_at(i) for i in range(8)]
    assert [b.attention.chunk for b in blocks] == [8192, 8192, 8192, None] * 2
    assert all(b.ffn.moe and b.ffn.num_experts == 16 and b.ffn.top_k == 1 for b in blocks)
    assert blocks[0].ffn.shared_dim == 8192 and not blocks[0].ffn.router_bias
    assert all(b.attention.qk_norm == "none" for b in blocks)  # L2 norm: no parameters


@pytest.mark.torch
@pytest.mark.parametrize(
    "change",
    [
        {"interleave_moe_layer_step": 2, "moe_layers": None},  # Maverick: dense and MoE layers alternate
        {"moe_layers": []},  # every layer dense, of intermediate_size_mlp
        {"no_rope_layers": [], "no_rope_layer_interval": 2},
        {"attention_chunk_size": None, "use_qk_norm": False},
    ],
)
def test_llama4_text_file_variants_equal_transformers(transformers: Any, change: dict[str, Any]) -> None:
    """The text model as its own file (model_type llama4_text), with the layouts the config class allows."""
    text = dict(raw_fixture("llama-4-scout-17b-16e")["text_config"]) | change
    text["num_hidden_layers"] = 8
    if isinstance(text.get("no_rope_layers"), list) and text["no_rope_layers"]:
        text["no_rope_layers"] = text["no_rope_layers"][:8]
    if isinstance(text.get("moe_layers"), list) and text["moe_layers"]:
        text["moe_layers"] = text["moe_layers"][:8]
    config = mapped_config(text)
    assert count_params(config).total == numel(_hf_model(transformers, text))
    cfg = _hf_config(transformers, text)
    for tokens in (100, 20000):
        assert kv_cache_bytes(config, Workload(seq_len=tokens, dtype="float16")) == kv_cache_formula(
            cfg, tokens, 2
        )


def test_multimodal_llama4_counts_its_text_model() -> None:
    raw = raw_fixture("llama-4-scout-17b-16e")
    mapping = map_hf_config(raw, "test")
    text = dict(raw["text_config"]) | {"tie_word_embeddings": False, "_name_or_path": "x"}
    assert {k: v for k, v in mapping.data.items() if k != "name"} == {
        k: v for k, v in map_hf_config(text, "test").data.items() if k != "name"
    }
    assert any("text model" in note for note in mapping.report.notes)
    assert {"vision_config", "boi_token_index"} <= {i.key for i in mapping.report.ignored}


def test_exaone4_string_pattern_keeps_the_last_layer_global() -> None:
    raw = raw_fixture("exaone-4.0-32b") | {"sliding_window_pattern": "LLLG", "num_hidden_layers": 6}
    plan = mapped_config(raw).stack_plan("decoder")
    assert [plan.block_at(i).attention.window for i in range(6)] == [4096, 4096, 4096, None, 4096, None]
    no_window = mapped_config(raw_fixture("exaone-4.0-32b") | {"sliding_window": None})
    assert no_window.stack_plan("decoder").blocks[0].attention.window is None
    assert len(no_window.stack_plan("decoder").blocks) == 1


@pytest.mark.torch
def test_exaone4_layer_types_file_equals_transformers(transformers: Any) -> None:
    types = ["sliding_attention", "full_attention"] * 2
    raw = raw_fixture("exaone-4.0-32b") | {"num_hidden_layers": 4, "layer_types": types}
    cfg = _hf_config(transformers, raw)
    config = mapped_config(raw)
    assert count_params(config).total == numel(_hf_model(transformers, raw))
    assert kv_cache_bytes(config, Workload(seq_len=9000, dtype="float16")) == kv_cache_formula(cfg, 9000, 2)


def test_cohere2_head_dim_is_hidden_over_heads_whatever_the_file_says() -> None:
    raw = raw_fixture("c4ai-command-r7b-12-2024")
    assert (
        count_params(mapped_config(raw | {"head_dim": 64})).total
        == PUBLISHED["c4ai-command-r7b-12-2024"].total
    )
    plan = mapped_config(raw).stack_plan("decoder")
    assert [plan.block_at(i).attention.window for i in range(4)] == [4096, 4096, 4096, None]


@pytest.mark.parametrize(
    ("name", "extra", "key"),
    [
        ("dbrx-instruct", {"tie_word_embeddings": True}, "tie_word_embeddings"),
        ("dbrx-instruct", {"ffn_config": {"ffn_hidden_size": 10752, "moe_num_shared": 1}}, "ffn_config.moe_num_shared"),
        ("c4ai-command-r7b-12-2024", {"order_of_interleaved_layers": "global_attn_first"},
         "order_of_interleaved_layers"),
        ("c4ai-command-r7b-12-2024", {"use_embedding_sharing": False}, "use_embedding_sharing"),
        ("exaone-4.0-32b", {"sliding_window_pattern": "LLXG"}, "sliding_window_pattern"),
    ],
)  # fmt: skip
def test_refusals_name_the_key(name: str, extra: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        map_hf_config(raw_fixture(name) | extra, "test")
    assert [p.path for p in info.value.problems] == [key]


def test_dbrx_defaults_of_the_nested_configs() -> None:
    """A file without attn_config / ffn_config: DbrxAttentionConfig's 1 KV head, DbrxFFNConfig's 4 experts."""
    config = mapped_config({"model_type": "dbrx"})
    block = config.stack_plan("decoder").blocks[0]
    assert (block.attention.num_kv_heads, block.ffn.num_experts, block.ffn.top_k, block.ffn.expert_dim) == (
        1, 4, 1, 3584)  # fmt: skip
