"""LongCat-Flash (``families/longcat.py``: two MLA sublayers, two dense MLPs and a shortcut MoE with zero experts
per decoder layer) against the model transformers builds: small files written by ``LongcatFlashConfig`` and the
same keys as written by hand, with and without a router bias.

The parameter total equals transformers' numel on the meta device less the ``gate_up_proj`` rows transformers
allocates for the zero experts (``LongcatFlashExperts``: ``total_experts`` row blocks; its forward sends a zero
expert's tokens through ``identity_expert`` and never reads them), the active count the total less the routed
experts a token skips, the KV cache the bytes transformers' own cache holds after a forward, every key is mapped or
ignored with a reason, and forward FLOPs equal ``FlopCounterMode`` on an eager CPU build whose routers never pick a
zero expert (their score correction set very low): top_k real experts per token, embedcalc's count.
"""

from __future__ import annotations

from typing import Any

import pytest
from hf_reference import forward_flops, mapped_config, quiet_transformers, unaccounted_keys

from embedcalc.analysis.flops import forward_flops as analytic_flops
from embedcalc.analysis.memory import kv_cache_bytes
from embedcalc.analysis.params import active_params, count_params
from embedcalc.analysis.workload import Workload


@pytest.fixture(scope="module")
def transformers() -> Any:
    pytest.importorskip("torch")
    return quiet_transformers()


_SMALL = dict(vocab_size=256, hidden_size=64, num_layers=2, num_attention_heads=4, ffn_hidden_size=96,
              q_lora_rank=16, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=16, head_dim=8,
              moe_topk=2, n_routed_experts=4, zero_expert_num=3, expert_ffn_hidden_size=32,
              max_position_embeddings=256)  # fmt: skip
VARIANTS: dict[str, dict[str, Any]] = {
    "small": _SMALL,
    "router_bias_three_layers": _SMALL | dict(num_layers=3, router_bias=True, zero_expert_num=1, moe_topk=3),
    "no_zero_experts": _SMALL | dict(zero_expert_num=0, attention_bias=True),
}  # fmt: skip


def _config(transformers: Any, name: str) -> Any:
    return transformers.LongcatFlashConfig(**VARIANTS[name])


def _phantom(cfg: Any, model: Any) -> int:
    """The zero experts' gate_up_proj rows transformers allocates and never reads: 5.24's experts hold
    n_routed_experts + zero_expert_num of them, 5.25's only the routed ones (0 then)."""
    allocated = model.model.layers[0].mlp.experts.gate_up_proj.shape[0]
    return (
        cfg.num_layers * (allocated - cfg.n_routed_experts) * 2 * cfg.expert_ffn_hidden_size * cfg.hidden_size
    )


@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_counts_what_transformers_builds(transformers: Any, name: str) -> None:
    import torch

    cfg = _config(transformers, name)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    total = sum(p.numel() for p in model.parameters()) - _phantom(cfg, model)
    expert = 3 * cfg.hidden_size * cfg.expert_ffn_hidden_size
    unused = cfg.num_layers * (cfg.n_routed_experts - cfg.moe_topk) * expert
    torch.manual_seed(0)
    built = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager").eval()
    with torch.no_grad():
        cache = built(torch.randint(0, 256, (2, 9)), use_cache=True).past_key_values
    kv = sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values))
    for raw in (cfg.to_dict(), {"model_type": "longcat_flash", **VARIANTS[name]}):
        ours = mapped_config(raw)
        assert count_params(ours).total == total
        assert active_params(ours) == total - unused
        assert kv_cache_bytes(ours, Workload(batch_size=2, seq_len=9, dtype="float32")) == kv
        assert unaccounted_keys(raw) == set()


@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_forward_flops_equal_flop_counter(transformers: Any, name: str) -> None:
    import torch

    cfg = _config(transformers, name)
    torch.manual_seed(0)
    # eager experts: 5.25's default grouped_mm is a kernel FlopCounterMode does not count
    model = transformers.AutoModelForCausalLM.from_config(
        cfg, attn_implementation="eager", experts_implementation="eager"
    ).eval()
    with torch.no_grad():
        for layer in model.model.layers:  # no token picks a zero expert: top_k real experts each
            layer.mlp.router.e_score_correction_bias[cfg.n_routed_experts :] = -1e9
    measured = forward_flops(model, batch=2, seq_len=16)
    assert (
        analytic_flops(mapped_config(cfg.to_dict()), Workload(batch_size=2, seq_len=16)).forward == measured
    )


def test_the_default_config_is_the_published_size() -> None:
    """LongcatFlashConfig's defaults are LongCat-Flash's shape: 560.7B parameters, the "560B" of its report
    (transformers' numel is 741.1B with the zero experts' unused gate_up_proj rows)."""
    from embedcalc.sources.hf.families.longcat import FAMILIES

    raw = {"model_type": "longcat_flash"} | {
        k: v for k, v in FAMILIES[0].defaults.items() if k not in ("num_hidden_layers", "intermediate_size")
    }
    assert count_params(mapped_config(raw)).total == 560_664_958_976


@pytest.mark.torch
def test_verify_checkpoint_names_the_zero_experts_unused_rows(
    transformers: Any, cli: Any, tmp_path: Any
) -> None:
    """``verify --checkpoint`` of a checkpoint transformers saves: every tensor placed with the config's shape (the
    router scoring the zero experts too); the experts hold exactly the zero experts' unused gate_up_proj rows more
    than the model uses, which verify reports rather than counts."""
    import json

    import torch

    cfg = _config(transformers, "small")
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    model.save_pretrained(tmp_path / "longcat")
    result = cli("verify", str(tmp_path / "longcat"), "--checkpoint", "--format", "json")
    check = json.loads(result.stdout)["results"][0]
    assert check["shape_errors"] == [] and check["missing"] == []
    assert check["stored_params"] - check["analytic_params"] == _phantom(cfg, model)
