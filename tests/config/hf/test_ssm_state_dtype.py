"""Nemotron-H's ``mamba_ssm_cache_dtype`` (NemotronHConfig, default float32): the dtype of the Mamba-2 SSM state
only. transformers 5.24 never reads the key — its torch path keeps the SSM state in float32 whatever the model's
dtype and the convolution window in the model's dtype — and vLLM allocates the SSM state in the key's dtype; so
the reader maps it to the mixer's ``ssm_state_dtype`` and the state's bytes follow it: at bf16 the conv window in
2 bytes, the SSM state in 4, what transformers' cache holds after a prefill and a decode step, and what
embedcalc's own generation allocates.
"""

from __future__ import annotations

from typing import Any

import pytest
from hf_reference import hf_model, mapped_config, quiet_transformers, raw_fixture

from embedcalc.analysis.memory import estimate_memory
from embedcalc.analysis.workload import Workload

SMALL = dict(
    hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16, attention_head_dim=16,
    intermediate_size=48, mamba_num_heads=4, mamba_head_dim=16, ssm_state_size=8, n_groups=2, chunk_size=8,
    vocab_size=256, hybrid_override_pattern="M-M*-", num_hidden_layers=5,
)  # fmt: skip


def _raw(**extra: Any) -> dict[str, Any]:
    raw = raw_fixture("nemotron-h-8b-base-8k") | SMALL | extra
    for key in ("n_routed_experts", "num_experts_per_tok", "moe_intermediate_size"):
        raw.pop(key, None)
    return raw


@pytest.mark.parametrize(
    ("written", "expected"),
    [(None, "fp32"), ("float32", "fp32"), ("bfloat16", "bf16"), ("float16", "fp16"), ("auto", None)],
)
def test_the_reader_maps_the_ssm_state_dtype(written: str | None, expected: str | None) -> None:
    raw = _raw() if written is None else _raw(mamba_ssm_cache_dtype=written)
    raw.pop("mamba_ssm_cache_dtype", None) if written is None else None
    mixers = {
        b.mixer.ssm_state_dtype for b in mapped_config(raw).named_blocks.values() if b.mixer is not None
    }
    assert mixers == {expected}


def test_a_bad_ssm_state_dtype_names_the_key(tmp_path: Any, cli: Any) -> None:
    import json

    path = tmp_path / "config.json"
    path.write_text(json.dumps(_raw(mamba_ssm_cache_dtype="int3")), encoding="utf-8")
    result = cli("check", str(path))
    assert result.exit_code == 3
    assert "mamba_ssm_cache_dtype" in result.stderr and "float32, bfloat16" in " ".join(result.stderr.split())


@pytest.mark.torch
def test_bf16_state_bytes_equal_transformers_cache() -> None:
    """A bf16 prefill of 6 tokens and one decode step on transformers' NemotronHForCausalLM: its cache's conv and
    recurrent states (2 Mamba-2 layers, 2 sequences) hold exactly embedcalc's recurrent_state_bytes at bf16."""
    torch = pytest.importorskip("torch")
    transformers = quiet_transformers()
    raw = _raw()
    model = hf_model(transformers, raw).to(torch.bfloat16).eval()
    ids = torch.randint(0, 256, (2, 6))
    with torch.no_grad():
        cache = model(ids, use_cache=True).past_key_values
        cache = model(ids[:, :1], past_key_values=cache, use_cache=True).past_key_values
    held = 0
    for layer in cache.layers:
        for name in ("conv_states", "recurrent_states"):
            states = getattr(layer, name, None) or {}
            held += sum(t.numel() * t.element_size() for t in states.values() if hasattr(t, "numel"))
    config = mapped_config(raw)
    w = Workload(batch_size=2, seq_len=6, dtype="bf16")
    assert held == estimate_memory(config, w).recurrent_state_bytes
    conv, ssm = 2 * 2 * (64 + 2 * 2 * 8) * 4, 2 * 2 * 4 * 16 * 8  # conv window at 2 bytes, SSM state at 4
    assert held == conv * 2 + ssm * 4


@pytest.mark.torch
def test_generation_allocates_the_ssm_state_in_its_dtype(
    write_config: Any, cli: Any, measured_local: Any
) -> None:
    """``bench --mode generate --dtype bf16``: the state tensors embedcalc's model decodes with hold the analytic
    bytes (the SSM state in float32)."""
    import json

    path = write_config(_raw(), "config.json")
    flags = (
        "--mode generate --device cpu --format json --dtype bf16 --seq-len 9 --gen-tokens 2 --batch-size 2"
    )
    result = cli("bench", str(path), *flags.split(), "--repeat", "1", "--warmup", "0")
    assert result.exit_code == 0, result.stderr
    m = json.loads(result.stdout)["results"][0]["measurement"]
    assert (
        m["recurrent_state_bytes_measured"]
        == m["recurrent_state_bytes"]
        == 2 * 2 * ((64 + 32) * 4 * 2 + 512 * 4)
    )


def test_only_a_mamba2_mixer_has_an_ssm_state_dtype() -> None:
    from pydantic import ValidationError

    from embedcalc.config.mixers import MixerSpec, resolve_mixer

    mamba2 = MixerSpec(kind="mamba2", state_size=8, num_heads=4, head_dim=16, ssm_state_dtype="fp32")
    resolved = resolve_mixer(mamba2)
    assert resolved is not None and resolved.ssm_state_dtype == "fp32"
    with pytest.raises(ValidationError, match="ssm_state_dtype"):
        MixerSpec(kind="short_conv", inner_dim=64, conv_kernel=3, ssm_state_dtype="fp32")
