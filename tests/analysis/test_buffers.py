"""Persistent buffers in the weights' memory (issue 23 gap; analysis/buffers.py): MiniMax's lightning decay tables
counted per layer, equal to what transformers' ``MiniMaxForCausalLM`` registers (``named_buffers`` on the meta
device, the ones its ``state_dict`` saves) and to embedcalc's own torch model, in every memory path (inference and
training weights, pipeline stages, the sweep grid).
"""

from __future__ import annotations

from typing import Any

import pytest
from hf_reference import hf_config, mapped_config, quiet_transformers, raw_fixture
from sources.hf.test_mixers_hf import CONV_TAIL_ONLY

from embedcalc.analysis.buffers import buffer_terms
from embedcalc.analysis.memory import estimate_memory
from embedcalc.analysis.params import count_params
from embedcalc.analysis.structure import Dims
from embedcalc.analysis.workload import Parallelism, Workload
from embedcalc.sources.loading import load_target


def load_preset(name: str) -> Any:
    return load_target(name).config


M1_BUFFER_BYTES = 70 * 64 * (1 + 2 * 256 + 256 * 256) * 2  # 70 lightning layers, H 64, B 256, bf16


def _hf_buffers(raw: dict[str, Any], dtype: Any) -> tuple[int, int]:
    """(values, bytes) of the persistent buffers of transformers' model of ``raw`` built on the meta device."""
    import torch

    transformers = quiet_transformers()
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(hf_config(transformers, raw), dtype=dtype)
    params = {name for name, _ in model.named_parameters()}
    saved = set(model.state_dict()) - params
    held = [b for name, b in model.named_buffers() if name in saved]
    assert {name.rsplit(".", 1)[-1] for name in saved} == {
        "slope_rate",
        "query_decay",
        "key_decay",
        "diagonal_decay",
    }
    return sum(b.numel() for b in held), sum(b.numel() * b.element_size() for b in held)


@pytest.mark.torch
@pytest.mark.parametrize(("dtype", "element"), [("float32", 4), ("bfloat16", 2)])
def test_small_minimax_buffers_equal_transformers(dtype: str, element: int) -> None:
    """3 lightning layers of 4 heads, blocks of 8: 3 x 4 x (1 + 16 + 64) values, in the model's dtype."""
    import torch

    raw = raw_fixture("minimax-m1-80k") | CONV_TAIL_ONLY["minimax-m1-80k"]
    values, nbytes = _hf_buffers(raw, getattr(torch, dtype))
    config = mapped_config(raw)
    assert buffer_terms(config, Dims.of(config)) == {"decoder/mixer/ssm": values} and values == 3 * 4 * 81
    memory = estimate_memory(config, Workload(dtype="fp32" if element == 4 else "bf16"))
    assert memory.buffers_bytes == nbytes
    assert memory.weights_bytes == element * count_params(config).total + nbytes


@pytest.mark.torch
def test_minimax_m1_buffers_equal_transformers_on_the_meta_device() -> None:
    """The full MiniMax-M1-80k file: 295,899,520 values, 591,799,040 bytes in bf16, in the fixture's mapping and in
    the preset."""
    import torch

    raw = raw_fixture("minimax-m1-80k")
    values, nbytes = _hf_buffers(raw, torch.bfloat16)
    assert (values, nbytes) == (295_899_520, M1_BUFFER_BYTES) == (M1_BUFFER_BYTES // 2, 591_799_040)
    config = mapped_config(raw)
    assert buffer_terms(config, Dims.of(config)) == {"decoder/mixer/ssm": values}
    preset = load_preset("minimax-m1-80k")
    memory = estimate_memory(preset, Workload(dtype="bf16"))
    assert memory.buffers_bytes == nbytes
    assert memory.weights_bytes == 2 * count_params(preset).total + nbytes


@pytest.mark.torch
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_torch_model_holds_the_analytic_buffers(dtype: str) -> None:
    """embedcalc's model registers the same four tables per lightning layer, persistent, under ``mixer/ssm``, and
    their values are transformers' (layer 1 of 4)."""
    import torch

    from embedcalc.modeling import build_model, component_buffers

    raw = raw_fixture("minimax-m1-80k") | CONV_TAIL_ONLY["minimax-m1-80k"]
    config = mapped_config(raw)
    model = build_model(config, device="cpu", dtype=getattr(torch, dtype))
    assert component_buffers(model) == buffer_terms(config, Dims.of(config))
    persistent = {
        k: v for k, v in model.state_dict().items() if k.rsplit(".", 1)[-1].endswith(("decay", "rate"))
    }
    nbytes = sum(t.numel() * t.element_size() for t in persistent.values())
    assert (
        nbytes
        == estimate_memory(config, Workload(dtype="fp32" if dtype == "float32" else "bf16")).buffers_bytes
    )
    transformers = quiet_transformers()
    from transformers.models.minimax import modeling_minimax as hf_minimax

    theirs = hf_minimax.MiniMaxLightningAttention(hf_config(transformers, raw), layer_idx=1)
    ours = model.decoder.layers[1].mixer.ssm
    for name in ("slope_rate", "query_decay", "key_decay", "diagonal_decay"):
        expected = getattr(theirs, name).to(getattr(torch, dtype))
        assert getattr(ours, name).shape == expected.shape
        torch.testing.assert_close(getattr(ours, name), expected, rtol=0, atol=0)


def test_buffers_follow_their_layers_and_are_never_sharded() -> None:
    """Pipeline stages hold their own layers' tables; TP replicates them (the mixer is not split) and ZeRO-3 does
    not shard them; training holds them in its weight dtype (2 bytes in mixed precision)."""
    config = load_preset("minimax-m1-80k")
    per_layer = 64 * (1 + 2 * 256 + 256 * 256) * 2
    stages = estimate_memory(config, Workload(dtype="bf16", parallel=Parallelism(pp=3, tp=2))).stages
    # 80 layers over 3 stages: 27, 27, 26; every eighth layer is softmax attention
    lightning = [sum(1 for i in range(lo, hi) if i % 8 != 7) for lo, hi in ((0, 27), (27, 54), (54, 80))]
    assert [s.buffers_bytes for s in stages] == [n * per_layer for n in lightning] and sum(lightning) == 70
    train = Workload(mode="training", dtype="bf16", parallel=Parallelism(dp=8, zero=3))
    memory = estimate_memory(config, train)
    assert memory.buffers_bytes == M1_BUFFER_BYTES
    assert memory.weights_bytes == -(-2 * count_params(config).total // 8) + M1_BUFFER_BYTES


def test_the_sweep_grid_counts_the_buffers_as_the_scalar_path() -> None:
    from embedcalc.analysis.grid import evaluate_grid

    config = load_preset("minimax-m1-80k")
    for mode in ("inference", "training"):
        grid = evaluate_grid(config, Workload(mode=mode, dtype="bf16"), {"seq_len": (128, 4096)})
        memory = estimate_memory(config, Workload(mode=mode, dtype="bf16", seq_len=4096))
        assert grid.columns[f"{mode}_weights_bytes"][1] == memory.weights_bytes
        assert grid.columns[f"{mode}_total_bytes"][1] == memory.total_bytes


def test_models_without_persistent_buffers_hold_none() -> None:
    config = load_preset("llama-3.1-8b")
    memory = estimate_memory(config, Workload())
    assert memory.buffers_bytes == 0 and "buffers_bytes" not in memory.as_dict()
