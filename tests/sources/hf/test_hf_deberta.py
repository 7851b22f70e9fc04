"""DeBERTa-v2/v3 (``deberta-v2``): disentangled attention counted exactly. Small variants of the published
microsoft/deberta-v3-base file, one per option (share_att_key, each pos_att_type term alone, the norm, absolute
positions with segments and unbucketed distances, no relative attention, embedding_size's projection): parameters
equal transformers' DebertaV2Model and forward FLOPs equal FlopCounterMode on it (built on the CPU: DebertaV2Model's
padding check reads a value, so it cannot run on the meta device); embedcalc's own torch model reconciles every
component exactly (verify); files transformers would build differently are refused by key.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hf_reference import mapped_config
from paths import HF_FIXTURES

from embedcalc.analysis.flops import forward_flops
from embedcalc.analysis.params import count_params
from embedcalc.analysis.workload import Workload
from embedcalc.errors import ConfigError
from embedcalc.sources.hf import map_hf_config

SMALL = dict(hidden_size=64, intermediate_size=96, num_attention_heads=4, num_hidden_layers=2, vocab_size=101,
             position_buckets=8)  # fmt: skip
VARIANTS: dict[str, dict[str, Any]] = {
    "v3": {},
    "own-projections": dict(share_att_key=False),
    "c2p-only": dict(share_att_key=False, pos_att_type="c2p"),
    "p2c-list-no-norm": dict(pos_att_type=["p2c"], norm_rel_ebd="none"),
    "absolute-segments-unbucketed": dict(
        position_biased_input=True, type_vocab_size=2, position_buckets=-1, max_relative_positions=16
    ),
    "no-relative": dict(relative_attention=False, position_biased_input=True, norm_rel_ebd="none"),
    "embedding-projection": dict(embedding_size=32),
}


def _raw(**extra: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((HF_FIXTURES / "deberta-v3-base.json").read_text())
    return data | extra


@pytest.mark.torch
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_params_and_flops_equal_transformers(variant: str) -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from torch.utils.flop_counter import FlopCounterMode

    raw = _raw(**(SMALL | VARIANTS[variant]))
    config = mapped_config(raw)
    torch.manual_seed(0)
    model = transformers.AutoModel.from_config(transformers.DebertaV2Config.from_dict(raw),
                                               attn_implementation="eager").eval()  # fmt: skip
    assert type(model).__name__ == "DebertaV2Model"
    assert count_params(config).total == sum(p.numel() for p in model.parameters())
    ids = torch.ones(2, 12, dtype=torch.long)
    with FlopCounterMode(display=False) as counter:
        model(input_ids=ids, attention_mask=torch.ones_like(ids))
    assert counter.get_total_flops() == forward_flops(config, Workload(batch_size=2, seq_len=12)).forward


@pytest.mark.torch
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_verify_reconciles_every_component(variant: str) -> None:
    pytest.importorskip("torch")
    import embedcalc

    result = embedcalc.verify(mapped_config(_raw(**(SMALL | VARIANTS[variant]))), seq_len=12, batch_size=2)
    assert result.agree


def test_the_published_file_maps_the_v3_options() -> None:
    spec = mapped_config(_raw()).disentangled
    assert spec is not None
    assert (spec.rows, spec.bucketed, spec.max_distance, spec.c2p, spec.p2c, spec.share_keys, spec.norm) == (
        512, True, 512, True, True, True, True)  # fmt: skip


def test_position_terms_are_linear_in_the_sequence() -> None:
    """c2p and p2c score n queries (keys) against 2 span positions: linear in n; the table's projection is not."""
    config = mapped_config(_raw())
    short, long = (forward_flops(config, Workload(seq_len=n)).breakdown for n in (128, 256))
    assert long["encoder/attention/pos_scores"] == 2 * short["encoder/attention/pos_scores"]
    assert long["encoder/attention/pos_proj"] == short["encoder/attention/pos_proj"]


@pytest.mark.parametrize(("extra", "key"), [
    ({"conv_kernel_size": 3}, "conv_kernel_size"),
    ({"pos_att_type": "p2c|p2p"}, "pos_att_type"),
    ({"relative_attention": False}, "norm_rel_ebd"),
    ({"embedding_size": 32, "position_biased_input": True}, "embedding_size"),
])  # fmt: skip
def test_files_transformers_builds_differently_are_refused_by_key(extra: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        map_hf_config(_raw(**extra), "test")
    assert [p.path for p in info.value.problems] == [key]
