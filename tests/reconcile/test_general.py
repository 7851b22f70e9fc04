"""The general reader (DESIGN §19, issue 31 item 3): transformers' own class on the meta device, placed on embedcalc's
breakdown keys, agrees exactly with the native readers where both read a family; a family without a native mapping
is counted through it (Mamba, checked against the paper's parameter and state formulas); without torch or
transformers the refusal says which extra brings it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import embedcalc
from embedcalc.analysis.workload import Workload

pytestmark = [pytest.mark.torch]
pytest.importorskip("torch")
pytest.importorskip("transformers")

_SMALL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, vocab_size=100,
              max_position_embeddings=64)  # fmt: skip
# small variants of natively mapped families: dense GQA, MoE (fused experts), MoE with a shared expert and
# dense-first layers (DeepSeek-V3's MLA), GPT-2's Conv1D, BERT (encoder: AutoModel with pooler), T5 (seq2seq)
NATIVE: dict[str, dict[str, Any]] = {
    "llama": _SMALL | dict(num_key_value_heads=2),
    "mixtral": _SMALL | dict(num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2),
    "qwen3_moe": _SMALL | dict(num_key_value_heads=2, head_dim=16, moe_intermediate_size=32, num_experts=8,
                               num_experts_per_tok=2),
    "deepseek_v3": _SMALL | dict(num_hidden_layers=3, first_k_dense_replace=1, num_key_value_heads=4,
                                 moe_intermediate_size=32, n_routed_experts=8, num_experts_per_tok=2,
                                 n_shared_experts=1, q_lora_rank=32, kv_lora_rank=16, qk_rope_head_dim=8,
                                 qk_nope_head_dim=16, v_head_dim=16, n_group=2, topk_group=1),
    "gpt2": dict(n_embd=64, n_layer=2, n_head=4, vocab_size=100, n_positions=64, bos_token_id=0, eos_token_id=0),
    "bert": _SMALL,
    "t5": dict(d_model=64, d_ff=128, num_layers=2, num_heads=4, d_kv=16, vocab_size=100),
}  # fmt: skip
RUN = Workload(batch_size=2, seq_len=16, gen_tokens=4)


def _core(flops: dict[str, int]) -> dict[str, int]:
    """The native FLOPs breakdown with each attention's scores and context merged into ``attention/core``."""
    out: dict[str, int] = {}
    for key, value in flops.items():
        stem, _, last = key.rpartition("/")
        name = f"{stem}/core" if last in ("scores", "context") else key
        out[name] = out.get(name, 0) + value
    return out


@pytest.mark.parametrize("model_type", NATIVE)
def test_general_reader_equals_the_native_reader(model_type: str) -> None:
    from embedcalc.api.general import read_general

    raw = {"model_type": model_type, **NATIVE[model_type]}
    native = embedcalc.analyze(dict(raw), RUN)
    general = read_general(raw, run=RUN)
    assert general.params.as_dict() == native.params.as_dict()
    assert general.active_params == native.active_params
    assert general.flops is not None, general.flops_error
    assert general.flops.total == native.flops.forward
    assert general.flops.as_dict() == _core(native.flops.breakdown.as_dict())
    assert general.kv_cache_bytes == native.memory.kv_cache_bytes
    assert general.recurrent_state_bytes == 0


def test_moe_experts_are_read_off_the_module_tree() -> None:
    from embedcalc.api.general import read_general

    general = read_general({"model_type": "deepseek_v3", **NATIVE["deepseek_v3"]}, run=RUN)
    assert [(e.num_experts, e.top_k) for e in general.experts] == [
        (8, 2),
        (8, 2),
    ]  # layers 1 and 2; layer 0 dense
    assert general.active_params is not None and general.active_params < general.params.total


def test_a_family_without_a_native_mapping_is_counted_through_transformers() -> None:
    """Mamba (Gu & Dao 2023, transformers' MambaMixer): d=64, E=2d=128, N=16, conv k=4, dt rank ceil(d/16)=4."""
    from embedcalc.api.general import read_general

    with pytest.raises(embedcalc.ConfigError) as refused:
        embedcalc.load({"model_type": "mamba", "hidden_size": 64})
    assert refused.value.code == "hf_unsupported_family"
    general = read_general({"model_type": "mamba", "hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 100},
                           run=Workload(seq_len=16, dtype="bf16"))  # fmt: skip
    d, e, n, k, r = 64, 128, 16, 4, 4
    layer = d * 2 * e + (e * k + e) + e * (r + 2 * n) + (r * e + e) + e * n + e + e * d + d
    assert general.params.total == 100 * d + 2 * layer + d
    assert general.params["decoder/mixer/in"] == 2 * d * 2 * e
    assert general.params["decoder/mixer/ssm"] == 2 * (e * n + e)  # A_log and D
    assert general.counted_by == "counted by transformers' MambaForCausalLM on the meta device"
    assert general.kv_cache_bytes == 0
    assert general.recurrent_state_bytes == 2 * (e * k + e * n) * 2  # conv + SSM state per layer, bf16
    assert general.flops is not None and general.flops["decoder/mixer/in"] == 2 * 2 * 16 * d * 2 * e


def test_analyze_says_which_reader(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from embedcalc.cli.app import app

    mamba = tmp_path / "config.json"
    mamba.write_text(json.dumps({"model_type": "mamba", "hidden_size": 64, "num_hidden_layers": 2}))
    llama = tmp_path / "llama.json"
    llama.write_text(json.dumps({"model_type": "llama", **NATIVE["llama"]}))
    runner = CliRunner()
    general = runner.invoke(app, ["analyze", str(mamba), "--seq-len", "16", "--format", "json"])
    assert general.exit_code == 0, general.output
    entry = json.loads(general.stdout)["results"][0]
    assert entry["reader"] == "transformers-meta"
    assert entry["counted_by"] == "counted by transformers' MambaForCausalLM on the meta device"
    native = runner.invoke(app, ["analyze", str(llama), "--seq-len", "16", "--format", "json"])
    assert json.loads(native.stdout)["results"][0]["reader"] == "native"
    table = runner.invoke(app, ["analyze", str(mamba), "--seq-len", "16"])
    assert table.exit_code == 0 and "mixer/in" in table.stdout
    timed = runner.invoke(app, ["analyze", str(mamba), "--hardware", "h100-sxm"])
    assert timed.exit_code == 3 and "layer model" in timed.stderr


def test_without_transformers_the_refusal_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import importlib.util

    from embedcalc.analysis.budget import Budget
    from embedcalc.api import general
    from embedcalc.api.analyze import analyze_or_general
    from embedcalc.api.timing import TimeOptions

    mamba = tmp_path / "config.json"
    mamba.write_text(json.dumps({"model_type": "mamba", "hidden_size": 64}))
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "transformers" else real(n, *a)
    )
    with pytest.raises(embedcalc.ConfigError) as refused:
        analyze_or_general(str(mamba), None, Workload(), TimeOptions(), Budget())
    assert refused.value.code == "hf_unsupported_family"
    assert general.EXTRA in refused.value.message
    assert "With transformers installed" in refused.value.message
    assert general.EXTRA in refused.value.problems[0].message
