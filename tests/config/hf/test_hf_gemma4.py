"""Gemma 4 text models from their hub files (transformers 5.24 ``Gemma4TextConfig`` / ``Gemma4ForCausalLM``).

Fixtures: ``gemma-4-31b.json`` has google/gemma-4-31B's text_config shape (60 layers, 5 sliding : 1 full, full
layers of head_dim 512 with 4 KV heads and values from keys, no per-layer embeddings); ``gemma-4-e2b.json``
google/gemma-4-E2B's (35 layers, 4 : 1, per-layer embeddings of 256, the last 20 layers sharing K/V, double-wide
MLPs there), as the public ports of those checkpoints quote them; both written in transformers 5's layout
(``global_head_dim``, ``num_global_key_value_heads``). Their totals are pinned in published_sizes.yaml and checked
against transformers there; here: every key accounted for, the KV cache per layer as transformers' config lays it
out (``per_layer_config``, ``kv_sharing_modes``), a file re-saved by transformers (``per_layer_config`` instead of
the global keys) counting the same, and what is refused.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hf_reference import fixture_path, hf_config, published, raw_fixture, text_raw

from embedcalc.analysis.memory import kv_cache_bytes
from embedcalc.analysis.params import active_params, count_params
from embedcalc.analysis.workload import Workload
from embedcalc.config.hf import map_hf_config
from embedcalc.config.loading import load_target
from embedcalc.errors import ConfigError

PUBLISHED = published("test_hf_gemma4")


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_report_accounts_for_every_key(name: str) -> None:
    raw = text_raw(raw_fixture(name))
    report = map_hf_config(raw, name).report
    seen = {k.strip() for m in report.mapped for k in m.key.split(",")} | {i.key for i in report.ignored}
    assert set(raw) <= seen, set(raw) - seen


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_count_and_active_are_the_published_total(name: str) -> None:
    config = load_target(str(fixture_path(name))).config
    assert count_params(config).total == active_params(config) == PUBLISHED[name].total


def _kv_cache(cfg: Any, tokens: int, dtype_bytes: int) -> int:
    """The KV cache transformers' DynamicCache lays out for ``cfg``: per layer its own head_dim and KV heads
    (``per_layer_config``), none for a layer whose ``kv_sharing_modes`` entry is ``reuse`` (a DummyLayer), a
    sliding layer keeping at most its window."""
    total = 0
    for index, (kind, mode) in enumerate(zip(cfg.layer_types, cfg.kv_sharing_modes, strict=True)):
        if mode == "reuse":
            continue
        layer = cfg.per_layer_config[index]
        kept = min(tokens, cfg.sliding_window) if kind == "sliding_attention" else tokens
        total += 2 * layer.num_key_value_heads * layer.head_dim * kept * dtype_bytes
    return total


@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_kv_cache_equals_transformers_layout(hf_transformers: Any, name: str) -> None:
    cfg = hf_config(hf_transformers, raw_fixture(name))
    config = load_target(str(fixture_path(name))).config
    for tokens in (1, 1000, 8192):
        assert kv_cache_bytes(config, Workload(seq_len=tokens, dtype="bf16")) == _kv_cache(cfg, tokens, 2)


@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_a_resaved_file_counts_the_same(hf_transformers: Any, name: str) -> None:
    """transformers' to_dict() writes per_layer_config ({layer: {head_dim, ...}}) and drops global_head_dim."""
    cfg = hf_config(hf_transformers, raw_fixture(name))
    resaved = cfg.to_dict()
    assert "per_layer_config" in resaved and "global_head_dim" not in resaved
    config = load_target(str(fixture_path(name))).config
    again = map_hf_config(resaved, f"{name} re-saved").data
    assert again["blocks"] == config.model_dump(exclude_unset=True)["blocks"]


def _refused(raw: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as caught:
        map_hf_config(raw, "test")
    return str(caught.value)


def test_the_moe_block_is_refused_naming_the_key() -> None:
    raw = copy.deepcopy(raw_fixture("gemma-4-31b"))
    raw["text_config"] |= {"enable_moe_block": True, "num_experts": 128, "top_k_experts": 8,
                           "moe_intermediate_size": 704}  # fmt: skip
    assert "enable_moe_block" in _refused(raw)


def test_sharing_more_layers_than_a_type_has_producers_is_refused() -> None:
    raw = copy.deepcopy(raw_fixture("gemma-4-e2b"))
    raw["text_config"]["num_kv_shared_layers"] = 34  # only layer 0 (sliding) before them: no full producer
    assert "num_kv_shared_layers = 34" in _refused(raw)


def test_a_bare_model_type_reads_the_class_defaults(tmp_path: Path) -> None:
    """Gemma4TextConfig's defaults: 30 layers, per-layer embeddings of 256, full layers of head_dim 512."""
    config = load_target(str(_write(tmp_path, {"model_type": "gemma4_text"}))).config
    assert config.per_layer_input_dim == 256 and config.num_layers == 30
    assert {b.attention.head_dim for b in config.named_blocks.values() if b.attention} == {256, 512}


def _write(directory: Path, raw: dict[str, Any]) -> Path:
    path = directory / "config.json"
    path.write_text(json.dumps(raw, default=str))
    return path


@pytest.mark.torch
def test_the_default_multimodal_file_counts_its_text_model(hf_transformers: Any, tmp_path: Path) -> None:
    """Gemma4Config().to_dict(), as transformers writes it (text_config with per_layer_config, vision and audio
    configs beside it): counted as Gemma4ForCausalLM of the default text config, which has per-layer embeddings and
    full layers of head_dim 512."""
    import torch

    raw = hf_transformers.Gemma4Config().to_dict()
    config = load_target(str(_write(tmp_path, raw))).config
    with torch.device("meta"):
        model = hf_transformers.Gemma4ForCausalLM(hf_transformers.Gemma4TextConfig())
    assert count_params(config).total == sum(p.numel() for p in model.parameters())
