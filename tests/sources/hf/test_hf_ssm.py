"""State-space families (issue 31): Mamba, Falcon-Mamba, Mamba-2 (attention-free) and Bamba (Mamba-2 beside GQA
attention) against transformers.

The files are what transformers itself writes (``to_dict()`` of its configuration class, every key written out) for
the class defaults and for variants that switch each option the readers map (biases, an explicit
``intermediate_size``, ``time_step_rank``, groups, attention layers), plus the published Falcon-Mamba-7B file
(tests/fixtures/hf/falcon-mamba-7b.json, whose ``expand`` 16 is overridden by its ``intermediate_size`` 8192).
Each is exact: parameters against transformers' model on the meta device; the recurrent state (and Bamba's KV cache)
against what transformers' cache holds after a bf16 prefill and a decode step (the scan's state in float32); forward
FLOPs on small eager variants against ``FlopCounterMode`` on transformers' CPU path, less exactly the terms
analysis/mixers.py documents (Mamba-1: the convolution's padded tail; Mamba-2: that and the inter-chunk state
passing as a matrix product).
"""

from __future__ import annotations

from typing import Any

import pytest
from hf_reference import (
    bf16_cache_and_estimate,
    forward_flops,
    hf_model,
    mapped_config,
    numel,
    raw_fixture,
)
from hf_reference import unaccounted_keys as unaccounted
from sources.hf.test_mixers_hf import torch_path_extra

from embedcalc.analysis.flops import forward_flops as analytic_flops
from embedcalc.analysis.params import count_params
from embedcalc.analysis.workload import Workload
from embedcalc.errors import ConfigError
from embedcalc.sources.hf import map_hf_config

SMALL_MAMBA = dict(hidden_size=64, num_hidden_layers=3, vocab_size=256, state_size=8)
SMALL_MAMBA2 = dict(hidden_size=64, num_hidden_layers=3, vocab_size=256, state_size=8, num_heads=8, head_dim=16,
                    n_groups=2, chunk_size=8)  # fmt: skip
SMALL_BAMBA = dict(hidden_size=64, num_hidden_layers=4, vocab_size=256, intermediate_size=96, num_attention_heads=4,
                   num_key_value_heads=2, mamba_n_heads=8, mamba_d_state=8, mamba_n_groups=2, mamba_chunk_size=8,
                   attn_layer_indices=[1], max_position_embeddings=512)  # fmt: skip
# (model_type, the class keys that differ from its defaults): small variants switching every option the readers map
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "mamba": ("mamba", SMALL_MAMBA),
    "mamba-biased": ("mamba", SMALL_MAMBA | dict(use_bias=True, use_conv_bias=False, time_step_rank=5)),
    "mamba-tied-off": ("mamba", SMALL_MAMBA | dict(tie_word_embeddings=False, expand=3, conv_kernel=3)),
    "falcon-mamba": ("falcon_mamba", SMALL_MAMBA | dict(tie_word_embeddings=False)),
    "mamba2": ("mamba2", SMALL_MAMBA2),
    "mamba2-biased": ("mamba2", SMALL_MAMBA2 | dict(use_bias=True, use_conv_bias=False, n_groups=1)),
    "bamba": ("bamba", SMALL_BAMBA),
    "bamba-biased": ("bamba", SMALL_BAMBA | dict(attention_bias=True, mlp_bias=True, mamba_proj_bias=True,
                                                 mamba_conv_bias=False, attn_layer_indices=[0, 3])),
    "bamba-mamba-only": ("bamba", SMALL_BAMBA | dict(attn_layer_indices=None)),
}  # fmt: skip
DEFAULTS = ("mamba", "falcon_mamba", "mamba2", "bamba")


def _written(transformers: Any, model_type: str, **keys: Any) -> dict[str, Any]:
    """The config.json transformers writes for its class with ``keys`` (every key, as ``to_dict()`` has it)."""
    raw: dict[str, Any] = transformers.CONFIG_MAPPING[model_type](**keys).to_dict()
    return raw


def _variant(transformers: Any, name: str) -> dict[str, Any]:
    model_type, keys = VARIANTS[name]
    return _written(transformers, model_type, **keys)


@pytest.mark.torch
@pytest.mark.parametrize("model_type", DEFAULTS)
def test_the_class_defaults_count_what_transformers_builds(transformers: Any, model_type: str) -> None:
    raw = _written(transformers, model_type)
    assert count_params(mapped_config(raw)).total == numel(hf_model(transformers, raw))
    assert unaccounted(raw) == set()


@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_each_variant_counts_what_transformers_builds(transformers: Any, name: str) -> None:
    raw = _variant(transformers, name)
    assert count_params(mapped_config(raw)).total == numel(hf_model(transformers, raw))
    assert unaccounted(raw) == set()


def test_the_published_falcon_mamba_file_is_read_with_its_intermediate_size() -> None:
    """tiiuae/falcon-mamba-7b writes expand 16 and intermediate_size 8192: FalconMambaConfig keeps the written width
    (7,272,665,088 parameters, as transformers builds them: tests/fixtures/published_sizes.yaml)."""
    raw = raw_fixture("falcon-mamba-7b")
    config = mapped_config(raw)
    (mixer,) = {b.mixer for b in config.named_blocks.values() if b.mixer is not None}
    assert (mixer.inner_dim, mixer.dt_rank, mixer.state_size) == (8192, 256, 16)
    assert count_params(config).total == 7_272_665_088
    report = map_hf_config(raw, "test").report
    assert "overrides expand" in next(i.reason for i in report.ignored if i.key == "expand")
    assert unaccounted(raw) == set()


@pytest.mark.torch
@pytest.mark.parametrize("name", ["mamba", "falcon-mamba", "mamba2", "bamba", "bamba-biased"])
def test_the_state_and_kv_cache_are_what_transformers_cache_holds_at_bf16(
    transformers: Any, name: str
) -> None:
    """A bf16 prefill of 6 tokens and one decode step: the cache's conv windows (bf16) and scan states (float32)
    hold exactly embedcalc's recurrent_state_bytes, and Bamba's attention layers the KV cache of 7 tokens."""
    import torch

    kv, recurrent, dtypes, memory = bf16_cache_and_estimate(transformers, _variant(transformers, name))
    assert (kv, recurrent) == (memory.kv_cache_bytes, memory.recurrent_state_bytes)
    assert dtypes == {torch.float32}


@pytest.mark.torch
@pytest.mark.parametrize(
    "name", ["mamba", "mamba-biased", "falcon-mamba", "mamba2", "mamba2-biased", "bamba"]
)
@pytest.mark.parametrize("seq_len", [5, 16])
def test_forward_flops_equal_transformers_torch_path(transformers: Any, name: str, seq_len: int) -> None:
    import torch

    raw = _variant(transformers, name)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(
        transformers.CONFIG_MAPPING[raw["model_type"]].from_dict(raw), attn_implementation="eager"
    ).eval()
    b = 2
    config = mapped_config(raw)
    ours = analytic_flops(config, Workload(batch_size=b, seq_len=seq_len)).forward
    assert forward_flops(model, batch=b, seq_len=seq_len) == ours + torch_path_extra(config, b, seq_len)


def test_an_attention_free_model_has_no_head_size_warnings(cli: Any, write_config: Any) -> None:
    """Mamba has no attention: its placeholder head count (1, head_dim 768) must not warn about FlashAttention."""
    path = write_config(raw_fixture("falcon-mamba-7b"), "config.json")
    result = cli("check", str(path))
    assert result.exit_code == 0, result.stderr
    assert "head_dim" not in result.stderr and "FlashAttention" not in result.stderr


@pytest.mark.parametrize(
    ("change", "key"),
    [({"head_dim": 48}, "head_dim"), ({"n_groups": 3}, "n_groups"), ({"state_size": 0}, "state_size")],
)
def test_a_mamba2_file_with_an_impossible_shape_is_refused_naming_the_key(
    change: dict[str, Any], key: str
) -> None:
    raw = {"model_type": "mamba2", **SMALL_MAMBA2, **change}
    with pytest.raises(ConfigError) as info:
        map_hf_config(raw, "test")
    assert [p.path for p in info.value.problems] == [key]
    assert info.value.exit_code == 3


def test_bamba_attention_indices_outside_the_stack_are_refused() -> None:
    with pytest.raises(ConfigError) as info:
        map_hf_config({"model_type": "bamba", **SMALL_BAMBA, "attn_layer_indices": [4]}, "test")
    assert [p.path for p in info.value.problems] == ["attn_layer_indices"]


def test_bamba_layers_follow_attn_layer_indices() -> None:
    config = mapped_config({"model_type": "bamba", **SMALL_BAMBA, "attn_layer_indices": [0, 2]})
    plan = config.stack_plan("decoder")
    assert [plan.block_at(i).attention is not None for i in range(4)] == [True, False, True, False]
    assert all(plan.block_at(i).ffn is not None for i in range(4))
    assert config.rotary_dim == 8  # head_dim 16, BambaConfig's partial_rotary_factor 0.5


@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.parametrize("name", ["mamba", "falcon-mamba", "mamba2", "bamba"])
def test_generation_decodes_with_the_analytic_state(
    transformers: Any, cli: Any, write_config: Any, name: str
) -> None:
    """``bench --mode generate --dtype bf16`` on the small variants: the state tensors embedcalc's model decodes
    with hold the analytic bytes (the scan's state in float32), Bamba's attention layer its KV cache."""
    import json

    raw = _variant(transformers, name)  # Bamba's small variant has a 512-token context (RoPE tables)
    path = write_config(raw, "config.json")
    flags = (
        "--mode generate --device cpu --format json --dtype bf16 --seq-len 9 --gen-tokens 2 --batch-size 2"
    )
    result = cli("bench", str(path), *flags.split(), "--repeat", "1", "--warmup", "0")
    assert result.exit_code == 0, result.stderr
    m = json.loads(result.stdout)["results"][0]["measurement"]
    assert m["recurrent_state_bytes_measured"] == m["recurrent_state_bytes"] > 0
    assert m["recurrent_state_matches"] is True and m.get("kv_cache_matches", True) is True
