"""Encoders of embedding models (issue 31): XLM-RoBERTa-XL, Jina-Embeddings-v3, GTE and EuroBERT against transformers.

The files are what transformers writes for its configuration class (``to_dict()``, every key): the class defaults
and small variants switching what the readers map (GQA, ``head_dim`` and biases for EuroBERT). Each is exact:
parameters against transformers' ``AutoModel`` on the meta device, forward FLOPs of a small variant against
``FlopCounterMode`` on transformers' eager path (full n x n scores, as embedcalc counts them), every key reported.
"""

from __future__ import annotations

from typing import Any

import pytest
from hf_reference import forward_flops, hf_model, mapped_config, numel, unaccounted_keys

from embedcalc.analysis.flops import forward_flops as analytic_flops
from embedcalc.analysis.params import count_params
from embedcalc.analysis.workload import Workload

SMALL = dict(vocab_size=256, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=96)
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "xlm-roberta-xl": ("xlm-roberta-xl", SMALL | dict(max_position_embeddings=66)),
    "jina-v3": ("jina_embeddings_v3", SMALL | dict(max_position_embeddings=66, type_vocab_size=2)),
    "gte": ("gte", SMALL | dict(max_position_embeddings=64, type_vocab_size=2)),
    "gte-no-segments": ("gte", SMALL | dict(max_position_embeddings=64, type_vocab_size=0, hidden_act="silu")),
    "eurobert": ("eurobert", SMALL | dict(max_position_embeddings=64, pad_token_id=0)),
    "eurobert-gqa": ("eurobert", SMALL | dict(num_key_value_heads=2, head_dim=8, attention_bias=True,
                                              mlp_bias=True, max_position_embeddings=64, pad_token_id=0)),
}  # fmt: skip
DEFAULTS = ("xlm-roberta-xl", "jina_embeddings_v3", "gte", "eurobert")


def _written(transformers: Any, model_type: str, **keys: Any) -> dict[str, Any]:
    raw: dict[str, Any] = transformers.CONFIG_MAPPING[model_type](**keys).to_dict()
    return raw


@pytest.mark.torch
@pytest.mark.parametrize("model_type", DEFAULTS)
def test_the_class_defaults_count_what_transformers_builds(transformers: Any, model_type: str) -> None:
    raw = _written(transformers, model_type)
    assert count_params(mapped_config(raw)).total == numel(hf_model(transformers, raw, "AutoModel"))
    assert unaccounted_keys(raw) == set()


@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(VARIANTS))
@pytest.mark.parametrize("seq_len", [7, 16])
def test_params_and_flops_equal_transformers(transformers: Any, name: str, seq_len: int) -> None:
    model_type, keys = VARIANTS[name]
    raw = _written(transformers, model_type, **keys)
    config = mapped_config(raw)
    model = hf_model(transformers, raw, "AutoModel")
    assert count_params(config).total == numel(model)
    ours = analytic_flops(config, Workload(batch_size=2, seq_len=seq_len)).forward
    assert forward_flops(model, batch=2, seq_len=seq_len, no_cache=False) == ours
    assert unaccounted_keys(raw) == set()


def test_xlm_roberta_xl_is_pre_norm_without_an_embedding_norm() -> None:
    config = mapped_config({"model_type": "xlm-roberta-xl", **SMALL, "max_position_embeddings": 66})
    assert (config.resolved_norm_placement, config.resolved_embedding_norm) == ("pre", False)
    assert config.max_seq_len == 64 and config.position_offset == 2  # RoBERTa's pad_token_id + 1


def test_eurobert_is_a_bidirectional_encoder_without_head_or_pooler() -> None:
    config = mapped_config({"model_type": "eurobert", **SMALL, "tie_word_embeddings": True})
    assert (config.architecture, config.resolved_lm_head, config.resolved_pooler) == ("encoder", False, False)


def test_gte_biases_only_the_down_projection_of_its_gated_mlp() -> None:
    """GteMLP: gate_proj and up_proj without bias, down_proj with one; q/k/v/o and the pooler biased."""
    from embedcalc.analysis.params import count_params as params

    config = mapped_config({"model_type": "gte", **SMALL, "max_position_embeddings": 64})
    breakdown = params(config)
    assert (config.activation, config.resolved_ffn_bias, config.resolved_ffn_out_bias) == (
        "geglu",
        False,
        True,
    )
    assert breakdown["encoder/ffn/in"] == 2 * 2 * 64 * 96 and breakdown["encoder/ffn/out"] == 2 * (
        96 * 64 + 64
    )


@pytest.mark.torch
def test_verify_builds_gtes_mlp_with_the_down_bias_alone(cli: Any, write_config: Any) -> None:
    """embedcalc's torch model (unsharded and over 2 tensor-parallel ranks) agrees with the analytic count."""
    import json

    raw = {"model_type": "gte", **SMALL, "max_position_embeddings": 64}
    path = write_config(raw, "config.json")
    for extra in ((), ("--tp", "2")):
        result = cli("verify", str(path), "--seq-len", "32", "--format", "json", *extra)
        assert result.exit_code == 0, result.stderr
        out = json.loads(result.stdout)["results"][0]
        assert out["agree"] is True and out.get("sharded", {"agree": True})["agree"] is True
