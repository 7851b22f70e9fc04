"""UMT5 (issue 31): mT5's layout with a relative position bias table in every layer's self-attention
(``relative_bias_per_layer``), against transformers' UMT5ForConditionalGeneration and embedcalc's own torch model.

The files are what UMT5Config writes (``to_dict()``): its defaults, and a small variant whose stacks differ in depth.
Parameters equal transformers' on the meta device (the v1.1-style untied head, as from_pretrained keeps it); forward
FLOPs of the small variant equal ``FlopCounterMode`` on transformers' eager path; ``verify`` agrees component by
component (each layer builds and applies its own table), unsharded and over 2 tensor-parallel ranks.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hf_reference import forward_flops, hf_model, mapped_config, numel, unaccounted_keys

from embedcalc.analysis.flops import forward_flops as analytic_flops
from embedcalc.analysis.params import count_params
from embedcalc.analysis.workload import Workload

SMALL = dict(vocab_size=256, d_model=64, d_kv=16, d_ff=96, num_layers=3, num_decoder_layers=2, num_heads=4,
             relative_attention_num_buckets=8, tie_word_embeddings=False)  # fmt: skip


def _written(transformers: Any, **keys: Any) -> dict[str, Any]:
    raw: dict[str, Any] = transformers.UMT5Config(**keys).to_dict()
    return raw


@pytest.mark.torch
@pytest.mark.parametrize("keys", [{}, SMALL], ids=["defaults", "small"])
def test_params_equal_transformers(transformers: Any, keys: dict[str, Any]) -> None:
    raw = _written(transformers, **keys)
    config = mapped_config(raw)
    assert count_params(config).total == numel(hf_model(transformers, raw, "AutoModelForSeq2SeqLM"))
    assert unaccounted_keys(raw) == set()


@pytest.mark.torch
@pytest.mark.parametrize(("src", "tgt"), [(9, 5), (16, 16)])
def test_forward_flops_equal_transformers(transformers: Any, src: int, tgt: int) -> None:
    raw = _written(transformers, **SMALL)
    model = hf_model(transformers, raw, "AutoModelForSeq2SeqLM")
    ours = analytic_flops(mapped_config(raw), Workload(batch_size=2, seq_len=src, tgt_len=tgt)).forward
    assert forward_flops(model, batch=2, seq_len=src, tgt_len=tgt) == ours


def test_every_layer_holds_a_table() -> None:
    """3 encoder and 2 decoder layers, each with buckets x heads = 8 x 4; T5 would have one per stack."""
    raw = {"model_type": "umt5", **SMALL}
    breakdown = count_params(mapped_config(raw))
    assert breakdown["encoder/attention/relative_bias"] == 3 * 8 * 4
    assert breakdown["decoder/attention/relative_bias"] == 2 * 8 * 4
    t5 = count_params(mapped_config(raw | {"model_type": "mt5"}))
    assert t5["encoder/attention/relative_bias"] == t5["decoder/attention/relative_bias"] == 8 * 4


@pytest.mark.torch
def test_verify_builds_a_table_per_layer(cli: Any, write_config: Any) -> None:
    path = write_config({"model_type": "umt5", **SMALL}, "config.json")
    for extra in ((), ("--tp", "2")):
        result = cli("verify", str(path), "--seq-len", "12", "--format", "json", *extra)
        assert result.exit_code == 0, result.stderr
        out = json.loads(result.stdout)["results"][0]
        assert out["agree"] is True and out.get("sharded", {"agree": True})["agree"] is True


def test_a_per_layer_table_needs_the_relative_bias(cli: Any, tmp_path: Any) -> None:
    path = tmp_path / "m.yaml"
    path.write_text("architecture: decoder\nvocab_size: 256\nmax_seq_len: 64\nembed_dim: 64\nnum_heads: 4\n"
                    "num_layers: 2\nposition: rope\nrelative_bias_per_layer: true\n", encoding="utf-8")  # fmt: skip
    result = cli("check", str(path))
    assert result.exit_code == 3
    assert "relative_bias_per_layer" in result.stderr and "position: relative" in " ".join(
        result.stderr.split()
    )
