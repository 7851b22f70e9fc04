"""Cross-attention over an external sequence in the config (``attention.cross``, ``context_tokens``,
``tanh_gates``, ``extra_token_rows``): what is accepted, and each refusal with the field at fault, its value and the
fix (exit 3 from ``check``, no traceback). The KV cache the layer model derives is that of the external tokens.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from embedcalc.analysis.memory import kv_cache_bytes
from embedcalc.analysis.workload import Workload
from embedcalc.config.schema import ModelConfig

CROSS = {"cross": True, "qk_norm": "head", "tanh_gates": True}
BASE: dict[str, Any] = {
    "name": "tiny-vision-text", "architecture": "decoder", "vocab_size": 128, "max_seq_len": 64, "embed_dim": 32,
    "num_heads": 4, "num_kv_heads": 2, "num_layers": 3, "ffn_dim": 48, "activation": "swiglu", "norm": "rmsnorm",
    "norm_placement": "pre", "position": "rope", "bias": False, "tie_embeddings": False, "lm_head": True,
    "context_tokens": 10, "blocks": {"cross": {"attention": CROSS}},
    "layers": [{"pattern": ["default", "cross", "default"]}],
}  # fmt: skip


def _refused(data: dict[str, Any]) -> tuple[str, str, str]:
    with pytest.raises(ValidationError) as info:
        ModelConfig.model_validate(data)
    error = info.value.errors()[0]
    return error["type"], ".".join(str(p) for p in error["loc"]), error["msg"]


def test_the_cross_block_resolves_with_the_external_length() -> None:
    config = ModelConfig.model_validate(BASE)
    cross = config.stack_plan("decoder").block_at(1).attention
    assert cross is not None and cross.external and cross.context == 10 and cross.tanh_gates
    assert config.stack_plan("decoder").block_at(0).attention.context == 0  # type: ignore[union-attr]
    derived = config.derived()
    assert derived["cross_attention_layers"] == 1
    assert derived["context_kv_cache_values"] == 2 * 2 * 8 * 10  # K and V, 2 KV heads of 8, 10 tokens
    assert derived["kv_cache_values_per_token"] == 2 * (2 * 2 * 8)  # the two self-attention layers only


@pytest.mark.parametrize("seq_len", [1, 17, 64])
def test_the_cross_cache_does_not_grow_with_the_text(seq_len: int) -> None:
    config = ModelConfig.model_validate(BASE)
    fp32 = 4
    expected = fp32 * (2 * (2 * 2 * 8) * seq_len + 2 * 2 * 8 * 10)
    assert kv_cache_bytes(config, Workload(seq_len=seq_len)) == expected


@pytest.mark.parametrize(
    ("change", "code", "path", "words"),
    [
        ({"context_tokens": None}, "context_tokens_missing", "context_tokens", "blocks.cross.attention.cross"),
        ({"blocks": {}, "layers": None}, "context_tokens_unused", "context_tokens", "remove context_tokens"),
        ({"blocks": {"cross": {"attention": {**CROSS, "sliding_window": 8}}}}, "field_with_cross", "blocks",
         "blocks.cross.attention.sliding_window (8)"),
        ({"blocks": {"cross": {"attention": {**CROSS, "sinks": True}}}}, "field_with_cross", "blocks",
         "remove sinks"),
        ({"norm_placement": "parallel"}, "cross_not_parallel", "blocks", "norm_placement pre"),
        ({"tie_embeddings": True, "extra_token_rows": 8}, "extra_rows_tied", "extra_token_rows",
         "tie_embeddings: false"),
    ],
)  # fmt: skip
def test_refusals_name_the_field_and_the_fix(
    change: dict[str, Any], code: str, path: str, words: str
) -> None:
    data = {**BASE, **change}
    data = {k: v for k, v in data.items() if v is not None}
    found, loc, message = _refused(data)
    assert (found, loc) == (code, path), message
    assert words in message


def test_an_inherited_window_is_refused_and_can_be_dropped() -> None:
    """Mistral-style flat sliding_window reaches every block; a cross block writes sliding_window: null."""
    windowed = {**BASE, "sliding_window": 16}
    assert _refused(windowed)[0] == "field_with_cross"
    dropped = {**windowed, "blocks": {"cross": {"attention": {**CROSS, "sliding_window": None}}}}
    config = ModelConfig.model_validate(dropped)
    assert config.stack_plan("decoder").block_at(1).attention.window is None  # type: ignore[union-attr]


def test_cross_is_for_decoders_and_standard_attention() -> None:
    mla = {"kind": "mla", "kv_lora_rank": 8, "qk_nope_head_dim": 4, "qk_rope_head_dim": 4, "v_head_dim": 4}
    assert (
        _refused({**BASE, "blocks": {"cross": {"attention": {"cross": True, **mla}}}})[0]
        == "cross_needs_standard"
    )
    encoder = {**BASE, "architecture": "encoder", "lm_head": False, "position": "learned"}
    assert _refused(encoder)[0] == "cross_needs_decoder"


def test_check_exits_3_naming_the_field(cli: Any, tmp_path: Path) -> None:
    path = tmp_path / "no-context.yaml"
    path.write_text(
        yaml.safe_dump({k: v for k, v in BASE.items() if k != "context_tokens"}), encoding="utf-8"
    )
    result = cli("check", str(path))
    assert result.exit_code == 3
    err = " ".join(result.stderr.split())
    assert "context_tokens" in err and "blocks.cross.attention.cross" in err and "Traceback" not in err
    assert result.stdout == ""


def test_the_crossover_counts_cross_attention_as_linear() -> None:
    """n* = linear / quadratic per token (analysis/crossover.py): the two self-attention layers give
    2 d (q + 2 kv) + 2 q d + 2 d 2f + 2 f d = 15,360 and 4 q = 128 each; the cross layer's Q, out, FFN and its cores
    over the 10 external tokens, 4 m q, are linear: 2,048 + 2,048 + 9,216 + 1,280."""
    from embedcalc.analysis.crossover import crossover_seq_len

    config = ModelConfig.model_validate(BASE)
    assert crossover_seq_len(config) == (2 * 15_360 + 2_048 + 2_048 + 9_216 + 1_280) // (2 * 128) == 177
