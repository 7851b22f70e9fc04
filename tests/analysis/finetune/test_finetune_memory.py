"""Memory of a fine-tune: NF4 bytes exact against bitsandbytes' tensors (when it is installed), the recipe of full
fine-tuning equal to analyze's training memory, and what a frozen base model does not save."""

from __future__ import annotations

from typing import Any

import pytest

from embedcalc.analysis.finetune.adapters import FinetuneSpec, count_finetune
from embedcalc.analysis.finetune.memory import DYNAMIC_MAP_BYTES, finetune_memory, nf4_bytes
from embedcalc.analysis.memory.training import optimizer_state_bytes
from embedcalc.analysis.report import analyze as analyze_config
from embedcalc.analysis.workload import Workload
from embedcalc.sources.loading import load_target

TRAIN = Workload(batch_size=2, seq_len=256, dtype="bf16", mode="training")


def _memory(preset: str, spec: FinetuneSpec, workload: Workload = TRAIN, offload: Any = "none") -> Any:
    config = load_target(preset).config
    return finetune_memory(config, workload, count_finetune(config, spec), offload)


@pytest.mark.torch
@pytest.mark.parametrize("shape", [(64, 64), (1000, 300), (4096, 11008), (7, 9)])
def test_nf4_bytes_equal_bitsandbytes(shape: tuple[int, int]) -> None:
    torch = pytest.importorskip("torch")
    functional = pytest.importorskip("bitsandbytes.functional")
    w = torch.zeros(shape, dtype=torch.bfloat16).normal_()
    packed, state = functional.quantize_4bit(w, blocksize=64, compress_statistics=True, quant_type="nf4")
    tensors = [packed, state.absmax, state.state2.absmax, state.offset, state.code, state.state2.code]
    held = sum(t.numel() * t.element_size() for t in tensors)
    assert held == nf4_bytes(w.numel())
    assert state.state2.code.numel() * state.state2.code.element_size() == DYNAMIC_MAP_BYTES
    _, other = functional.quantize_4bit(w, blocksize=64, compress_statistics=True, quant_type="nf4")
    assert other.state2.code.data_ptr() != state.state2.code.data_ptr()  # each tensor's own tables


def test_nf4_is_about_half_a_byte_per_weight() -> None:
    n = 4096 * 4096
    assert n // 2 < nf4_bytes(n) < n // 2 + n // 60
    assert nf4_bytes(n, double_quant=False) > nf4_bytes(n)


def test_full_finetuning_equals_training_memory() -> None:
    config = load_target("gpt2").config
    analysis = analyze_config("gpt2", config, TRAIN)
    mem = finetune_memory(config, TRAIN, count_finetune(config, FinetuneSpec()))
    assert mem.trainable_weights_bytes == analysis.memory.weights_bytes
    assert mem.gradients_bytes == analysis.memory.gradients_bytes
    assert mem.optimizer_bytes == analysis.memory.optimizer_bytes
    assert mem.activations_bytes == analysis.memory.activations_bytes


def test_qlora_stores_linears_in_nf4_and_lora_in_the_model_dtype() -> None:
    lora = _memory("llama-2-7b", FinetuneSpec("lora", 16, targets=("all-linear",)))
    qlora = _memory("llama-2-7b", FinetuneSpec("qlora", 16, targets=("all-linear",)))
    assert lora.frozen_weights_bytes == 2 * 6_738_415_616
    assert qlora.frozen_weights_bytes < lora.frozen_weights_bytes / 3
    assert qlora.trainable_weights_bytes == lora.trainable_weights_bytes == 4 * 39_976_960  # fp32 adapters
    assert qlora.optimizer_bytes == 8 * 39_976_960  # AdamW: two fp32 moments, no master copy


def test_frozen_linears_save_less_than_full_training() -> None:
    full = _memory("llama-2-7b", FinetuneSpec())
    qv = _memory("llama-2-7b", FinetuneSpec("lora", 8, targets=("q_proj", "v_proj")))
    every = _memory("llama-2-7b", FinetuneSpec("lora", 8, targets=("all-linear",)))
    assert qv.activations_bytes < every.activations_bytes < full.activations_bytes + 32 * 7 * 2 * 512 * 8 * 2


def test_eight_bit_and_paged_optimizers() -> None:
    assert (
        optimizer_state_bytes((4096, 4096), "adamw_8bit", False)
        == 2 * 4096 * 4096 + 2 * 4 * 4096 * 4096 // 256
    )
    assert optimizer_state_bytes((100,), "adamw_8bit", False) == 800  # under 4096 values: fp32 states
    paged = _memory(
        "llama-2-7b",
        FinetuneSpec("lora", 8),
        Workload(batch_size=1, seq_len=128, dtype="bf16", mode="training", optimizer="paged_adamw"),
    )
    assert paged.pageable_bytes == paged.optimizer_bytes > 0
    assert paged.device_bytes_unpaged == paged.device_bytes - paged.optimizer_bytes


def test_offload_moves_state_to_the_host() -> None:
    spec = FinetuneSpec()
    none = _memory("gpt2", spec)
    opt = _memory("gpt2", spec, offload="optimizer")
    params = _memory("gpt2", spec, offload="params")
    assert opt.device_bytes == none.device_bytes - none.gradients_bytes - none.optimizer_bytes
    assert opt.host_bytes == none.gradients_bytes + none.optimizer_bytes
    assert opt.pcie_bytes_per_step == 2 * 2 * 124_439_808  # bf16 gradients down, bf16 weights up
    assert params.device_bytes < opt.device_bytes
    assert params.host_bytes > opt.host_bytes


def test_the_loss_backward_working_set_is_two_fp32_logits() -> None:
    """nll_loss's and log_softmax's gradients, fp32 tokens x vocabulary each, at the start of the backward; none
    without an LM head (bert-base's backbone)."""
    gpt2 = _memory("gpt2", FinetuneSpec("lora"))
    assert gpt2.loss_backward_bytes == 2 * 4 * 2 * 256 * 50257
    assert gpt2.device_bytes == gpt2.breakdown.total and gpt2.breakdown.as_dict()["loss_backward"] > 0
    assert _memory("bert-base", FinetuneSpec("lora", targets=("all-linear",))).loss_backward_bytes == 0


def test_dora_keeps_no_merged_weight_for_the_backward() -> None:
    """DoRA's W + s B A is normed and detached: it adds the two rescaled outputs per module (2 t out), not the
    out x in merged weight."""
    lora = _memory("llama-2-7b", FinetuneSpec("lora", 8, targets=("q_proj", "v_proj")))
    dora = _memory("llama-2-7b", FinetuneSpec("dora", 8, targets=("q_proj", "v_proj")))
    assert dora.activations_bytes - lora.activations_bytes == 32 * 2 * (2 * 512 * 2 * 4096)
