"""A sparse layer with ``index_shared`` reuses the top-k selection of an earlier sparse layer with an indexer
(GLM-5); the first sparse layer of a stack has none to reuse. Validation refuses that layout (exit 3, naming the
field and the fix) exactly where the torch model could not be built: a property over random layer layouts of
indexer, sharing, mixer-only and standard-attention blocks, drawn as the fuzz draws layer-model configs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from embedcalc.config.schema import ModelConfig

SPARSE = {"kind": "sparse", "q_lora_rank": 16, "kv_lora_rank": 12, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4,
          "v_head_dim": 8, "index_heads": 2, "index_head_dim": 8, "index_topk": 5}  # fmt: skip
BASE: dict[str, Any] = {
    "name": "tiny-dsa", "architecture": "decoder", "vocab_size": 128, "max_seq_len": 64, "embed_dim": 32,
    "num_heads": 4, "ffn_dim": 48, "activation": "swiglu", "norm": "rmsnorm", "norm_placement": "pre",
    "position": "rope", "bias": False, "tie_embeddings": False, "lm_head": True,
}  # fmt: skip
BLOCKS = {
    "indexer": {"attention": {"kind": "sparse", "index_shared": False}},
    "shared": {"attention": {"kind": "sparse", "index_shared": True}},
    "ssm": {"mixer": {"kind": "none"}},
    "dense": {"attention": {"kind": "standard"}},
}


def _first_sparse_shares(names: list[str], default_shares: bool) -> bool:
    """Whether the first sparse layer of ``names`` has index_shared (the rule under test, written out)."""
    for name in names:
        if name in ("ssm", "dense"):
            continue
        return default_shares if name == "default" else name == "shared"
    return False


def _config(names: list[str], default_shares: bool, shared_layers: bool = False) -> dict[str, Any]:
    return {
        **BASE, "num_layers": len(names), "attention": {**SPARSE, "index_shared": default_shares},
        "blocks": BLOCKS, "layers": [{"pattern": names}], "shared_layers": shared_layers,
    }  # fmt: skip


@pytest.mark.torch
@given(
    names=st.lists(st.sampled_from(["default", "indexer", "shared", "ssm", "dense"]), min_size=1, max_size=6),
    default_shares=st.booleans(),
)
def test_check_refuses_exactly_the_layouts_torch_cannot_build(names: list[str], default_shares: bool) -> None:
    pytest.importorskip("torch")
    from embedcalc.modeling import build_model

    data = _config(names, default_shares)
    if _first_sparse_shares(names, default_shares):
        with pytest.raises(ValidationError) as info:
            ModelConfig.model_validate(data)
        assert info.value.errors()[0]["type"] == "index_shared_first"
        assert "index_shared: false" in str(info.value)
        return
    build_model(ModelConfig.model_validate(data), device="meta")  # builds: the rule refused nothing buildable


def test_the_default_layers_and_shared_layers_are_checked_too() -> None:
    """No ``layers``: every layer is the default block, so a sharing default has nothing to share from; one block
    shared across depth (ALBERT-style) likewise."""
    alone = {**BASE, "num_layers": 2, "attention": {**SPARSE, "index_shared": True}}
    with pytest.raises(ValidationError, match=r"attention\.index_shared: layer 0 \(block default\)"):
        ModelConfig.model_validate(alone)
    with pytest.raises(ValidationError, match="is the first sparse layer of its stack"):
        ModelConfig.model_validate(_config(["shared", "shared"], False, shared_layers=True))
    ModelConfig.model_validate({**alone, "attention": SPARSE})


def test_check_exits_3_naming_the_field_and_the_fix(cli: Any, tmp_path: Path) -> None:
    path = tmp_path / "shared-first.yaml"
    path.write_text(yaml.safe_dump(_config(["ssm", "shared", "indexer"], False)), encoding="utf-8")
    result = cli("check", str(path))
    assert result.exit_code == 3
    err = " ".join(result.stderr.split())
    assert "blocks.shared.attention.index_shared: layer 1 (block shared)" in err
    assert "set index_shared: false" in err and "Traceback" not in err
    assert result.stdout == ""
