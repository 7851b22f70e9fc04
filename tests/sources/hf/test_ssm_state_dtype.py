"""The dtype of the recurrent state's scan part (``ssm_state_dtype``): transformers 5.24's torch path keeps the
scan's state in float32 whatever the model's dtype for Jamba (Mamba-1), Granite 4.0-H, Falcon-H1 and Nemotron-H
(Mamba-2) and Qwen3-Next (gated DeltaNet), the convolution window in the model's dtype, and MiniMax's lightning
state in the model's dtype; the readers say so and the state's bytes follow, measured on transformers' own cache
after a bf16 prefill and a decode step, and on what embedcalc's own generation allocates.

Nemotron-H also has ``mamba_ssm_cache_dtype`` (NemotronHConfig, default float32), which transformers never reads
and vLLM allocates the SSM state in: the reader maps it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hf_reference import (
    bf16_cache_and_estimate,
    bf16_decode_cache,
    mapped_config,
    quiet_transformers,
    raw_fixture,
)
from sources.hf.test_mixers_hf import CONV_TAIL_ONLY, FP32_SCAN_STATE, STATE_PASSING

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
    _, held, dtypes, memory = bf16_cache_and_estimate(quiet_transformers(), _raw())
    assert held == memory.recurrent_state_bytes and dtypes == {torch.float32}
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


def test_only_a_mixer_with_a_scan_state_has_an_ssm_state_dtype() -> None:
    from pydantic import ValidationError

    from embedcalc.config.mixer_spec import MixerSpec, resolve_mixer

    for spec in (dict(kind="mamba2", state_size=8, num_heads=4, head_dim=16),
                 dict(kind="mamba", state_size=8, inner_dim=64, dt_rank=4),
                 dict(kind="gated_deltanet", num_heads=4, head_dim=16, num_k_heads=2, head_k_dim=8),
                 dict(kind="lightning", num_heads=4, head_dim=16)):  # fmt: skip
        resolved = resolve_mixer(MixerSpec(**spec, ssm_state_dtype="fp32"))  # type: ignore[arg-type]
        assert resolved is not None and resolved.ssm_state_dtype == "fp32"
    with pytest.raises(ValidationError, match="ssm_state_dtype"):
        MixerSpec(kind="short_conv", inner_dim=64, conv_kernel=3, ssm_state_dtype="fp32")


def _held(cache: Any) -> dict[str, tuple[int, set[Any]]]:
    """The recurrent part of a transformers cache: ``conv`` and ``scan`` -> (bytes, dtypes); the scan's state is
    a hybrid layer's ``recurrent_states`` or MiniMaxCache's ``linear_cache``."""
    parts: dict[str, list[Any]] = {"conv": [], "scan": []}
    for layer in getattr(cache, "layers", []):
        for name, part in (("conv_states", "conv"), ("recurrent_states", "scan")):
            parts[part] += [t for t in (getattr(layer, name, None) or {}).values() if hasattr(t, "numel")]
    parts["scan"] += [t for t in getattr(cache, "linear_cache", []) if hasattr(t, "numel")]
    return {
        k: (sum(t.numel() * t.element_size() for t in ts), {t.dtype for t in ts}) for k, ts in parts.items()
    }


VARIANTS = STATE_PASSING | CONV_TAIL_ONLY


@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_the_state_is_what_transformers_cache_holds_at_bf16(name: str) -> None:
    """A bf16 prefill of 6 tokens and one decode step on transformers' model (small variants of the hub files):
    the cache's convolution windows and scan states hold exactly embedcalc's recurrent_state_bytes, the scan in
    float32 where the family's torch path keeps it so."""
    torch = pytest.importorskip("torch")
    raw = raw_fixture(name) | VARIANTS[name]
    held = _held(bf16_decode_cache(quiet_transformers(), raw))
    config = mapped_config(raw)
    assert (
        held["conv"][0] + held["scan"][0]
        == estimate_memory(config, Workload(batch_size=2, seq_len=6, dtype="bf16")).recurrent_state_bytes
    )
    if held["scan"][0]:
        assert held["scan"][1] == {torch.float32 if raw["model_type"] in FP32_SCAN_STATE else torch.bfloat16}
    expected = {"fp32" if raw["model_type"] in FP32_SCAN_STATE else None}
    assert {
        b.mixer.ssm_state_dtype for b in config.named_blocks.values() if b.mixer is not None
    } <= expected | {None}


@pytest.mark.torch
@pytest.mark.parametrize("name", ["jamba-mini-1.7", "qwen3-next-80b-a3b"])
def test_generation_keeps_a_float32_scan_state_beside_bf16_weights(
    write_config: Any, cli: Any, measured_local: Path, name: str
) -> None:
    """``bench --mode generate --dtype bf16`` on Mamba-1 and gated DeltaNet (Mamba-2: the Nemotron-H test above):
    the state embedcalc's model decodes with holds the analytic bytes, its scan part in float32."""
    import json

    path = write_config(raw_fixture(name) | VARIANTS[name], "config.json")
    flags = (
        "--mode generate --device cpu --format json --dtype bf16 --seq-len 9 --gen-tokens 2 --batch-size 2"
    )
    result = cli("bench", str(path), *flags.split(), "--repeat", "1", "--warmup", "0")
    assert result.exit_code == 0, result.stderr
    m = json.loads(result.stdout)["results"][0]["measurement"]
    mixers = [b.mixer for b, n in mapped_config(raw_fixture(name) | VARIANTS[name]).stack_plan("decoder").counts()
              for _ in range(n) if b.mixer is not None]  # fmt: skip
    analytic = sum(2 * (mx.conv_state_values * 2 + mx.ssm_state_values * 4) for mx in mixers)
    assert m["recurrent_state_bytes_measured"] == m["recurrent_state_bytes"] == analytic
