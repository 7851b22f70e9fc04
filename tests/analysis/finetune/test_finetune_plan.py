"""plan for fine-tunes: methods × devices, why a method is out, the Done-when of issue 32 (mistral-7b on 24 GB)."""

from __future__ import annotations

from embedcalc.analysis.finetune.adapters import FinetuneSpec
from embedcalc.api.finetune import FinetuneOptions
from embedcalc.api.finetune_plan import plan_finetune


def test_qlora_fits_a_24_gb_device_and_full_finetuning_does_not() -> None:
    plan = plan_finetune("mistral-7b", FinetuneOptions(FinetuneSpec("qlora")), train_tokens=100_000_000,
                         hardware=["rtx-4090"])  # fmt: skip
    rows = {r.method: r for r in plan.rows}
    assert rows["qlora"].fits and rows["qlora"].memory_bytes <= 24 * 2**30
    assert not rows["full"].fits
    assert "does not fit" in rows["full"].reasons[0] and "optimizer state alone" in rows["full"].reasons[0]
    assert plan.ok and plan.rows[0].fits
    # the run: tokens / (batch x seq) steps of step_s each
    q = rows["qlora"]
    assert q.wall_s is not None and q.step_s is not None
    assert abs(q.wall_s - q.step_s * -(-100_000_000 // 4096)) < 1e-6 * q.wall_s


def test_frozen_backward_is_cheaper_than_full_training() -> None:
    plan = plan_finetune("llama-2-7b", FinetuneOptions(FinetuneSpec("lora")), train_tokens=10_000_000,
                         hardware=["h100-sxm"], seq_len=2048)  # fmt: skip
    rows = {r.method: r for r in plan.rows}
    assert rows["lora"].step_s is not None and rows["full + offload"].step_s is not None
    assert rows["lora"].step_s < rows["full + offload"].step_s
    assert (
        rows["qlora"].step_s is not None and rows["qlora"].step_s > rows["lora"].step_s
    )  # NF4 dequantization
