"""MiniMax-M3's text model (``sources/hf/families/minimax_m3.py``: block-sparse attention, dense and MoE layers) against
the model transformers builds: small files written by ``MiniMaxM3VLTextConfig``, the same keys without the lists
the class derives, an old hub file (``sparse_attention_config``, ``moe_layer_freq``, ``hidden_act: swigluoai``) and
the multimodal wrapper's ``text_config``. The parameter total equals transformers' numel on the meta device, the
active count the total less the routed experts a token skips, the KV cache the bytes transformers' own cache holds
after a forward (keys, values and each block-sparse layer's indexer keys), every key is mapped or ignored with a
reason, and forward FLOPs equal ``FlopCounterMode`` on an eager CPU build (the core over every key, the unselected
blocks masked, and the indexer's projections and scores).
"""

from __future__ import annotations

from typing import Any

import pytest
from hf_reference import forward_flops, mapped_config, quiet_transformers, unaccounted_keys

from embedcalc.analysis.flops import forward_flops as analytic_flops
from embedcalc.analysis.memory import kv_cache_bytes
from embedcalc.analysis.params import active_params, count_params
from embedcalc.analysis.workload import Workload
from embedcalc.errors import ConfigError
from embedcalc.sources.hf import map_hf_config


@pytest.fixture(scope="module")
def transformers() -> Any:
    pytest.importorskip("torch")
    return quiet_transformers()


_SMALL = dict(vocab_size=256, hidden_size=64, intermediate_size=32, num_hidden_layers=4, num_attention_heads=4,
              num_key_value_heads=2, head_dim=16, max_position_embeddings=256, num_local_experts=4,
              num_experts_per_tok=2, dense_intermediate_size=96, shared_intermediate_size=24, rotary_dim=8,
              index_n_heads=2, index_head_dim=16, index_block_size=4, index_topk_blocks=2,
              bos_token_id=1, eos_token_id=2)  # fmt: skip
_SPARSE = "minimax_m3_sparse"
VARIANTS: dict[str, dict[str, Any]] = {
    "mixed": _SMALL | dict(layer_types=["full_attention", _SPARSE, _SPARSE, "full_attention"],
                           mlp_layer_types=["dense", "sparse", "sparse", "dense"]),
    "all_sparse_moe": _SMALL | dict(layer_types=[_SPARSE] * 4, index_local_blocks=2),
    "dense_attention": _SMALL | dict(mlp_layer_types=["dense", "sparse", "dense", "sparse"]),
}  # fmt: skip
# an old hub file: the indexer in sparse_attention_config, the MoE layers in moe_layer_freq, swigluoai
_LEGACY = {k: v for k, v in _SMALL.items() if not k.startswith("index_")} | dict(
    hidden_act="swigluoai", moe_layer_freq=[0, 1, 1, 1],
    sparse_attention_config=dict(sparse_attention_freq=[0, 1, 0, 1], sparse_num_index_heads=2, sparse_index_dim=16,
                                 sparse_block_size=4, sparse_topk_blocks=3, sparse_local_block=1),
)  # fmt: skip


def _config(transformers: Any, name: str) -> Any:
    kwargs = _LEGACY if name == "legacy" else VARIANTS[name]
    return transformers.MiniMaxM3VLTextConfig(**kwargs)


def _files(transformers: Any, name: str) -> list[dict[str, Any]]:
    """The file the class writes, the hand-written one (its arguments, no derived lists), the wrapper's."""
    written = _config(transformers, name).to_dict()
    hand = {"model_type": "minimax_m3_vl_text", **(_LEGACY if name == "legacy" else VARIANTS[name])}
    wrapper = {"model_type": "minimax_m3_vl", "text_config": written}
    return [written, hand, wrapper]


def _cache_bytes(transformers: Any, cfg: Any, tokens: int) -> int:
    """What transformers' own cache holds after a forward of ``tokens`` tokens (batch 2, fp32)."""
    import torch

    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager").eval()
    with torch.no_grad():
        out = model(torch.randint(0, cfg.vocab_size, (2, tokens)), use_cache=True)
    cache = out.past_key_values
    parts = [getattr(layer, name, None) for layer in cache.layers for name in ("keys", "values", "idx_keys")]
    return sum(t.numel() * t.element_size() for t in parts if t is not None)


NAMES = [*sorted(VARIANTS), "legacy"]


@pytest.mark.torch
@pytest.mark.parametrize("name", NAMES)
def test_counts_what_transformers_builds(transformers: Any, name: str) -> None:
    import torch

    cfg = _config(transformers, name)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    total = sum(p.numel() for p in model.parameters())
    unused = (
        cfg.mlp_layer_types.count("sparse") * (cfg.num_local_experts - cfg.num_experts_per_tok) * 3 * 64 * 32
    )
    kv = {tokens: _cache_bytes(transformers, cfg, tokens) for tokens in (1, 9)}
    for raw in _files(transformers, name):
        ours = mapped_config(raw)
        assert count_params(ours).total == total
        assert active_params(ours) == total - unused
        for tokens, measured in kv.items():
            assert kv_cache_bytes(ours, Workload(batch_size=2, seq_len=tokens, dtype="float32")) == measured
        if "text_config" not in raw:  # the wrapper's report names the text file's keys, checked here
            assert unaccounted_keys(raw) == set()


@pytest.mark.torch
@pytest.mark.parametrize("name", NAMES)
def test_forward_flops_equal_flop_counter(transformers: Any, name: str) -> None:
    import torch

    cfg = _config(transformers, name)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(
        cfg, attn_implementation="eager", experts_implementation="eager"
    ).eval()
    measured = forward_flops(model, batch=2, seq_len=16)
    assert (
        analytic_flops(mapped_config(cfg.to_dict()), Workload(batch_size=2, seq_len=16)).forward == measured
    )


def test_causal_pairs_are_the_kept_blocks_keys() -> None:
    """Causally a query at position i sees min(i + 1, (k - 1) B + i mod B + 1) keys: its own block and k - 1 full
    ones (4 blocks of 4 kept, 40 tokens)."""
    from embedcalc.analysis.attention import score_pairs

    n, k, b = 40, 2, 4
    assert score_pairs(n, True, blocks=(k, b)) == sum(min(i + 1, (k - 1) * b + i % b + 1) for i in range(n))
    assert score_pairs(n, False, blocks=(k, b)) == n * n


def test_no_local_block_is_refused() -> None:
    """Without a local block the keys a query sees depend on the data: the key is named."""
    raw = {"model_type": "minimax_m3_vl_text", **VARIANTS["all_sparse_moe"], "index_local_blocks": 0}
    with pytest.raises(ConfigError) as info:
        map_hf_config(raw, "test")
    assert [p.path for p in info.value.problems] == ["index_local_blocks"]
