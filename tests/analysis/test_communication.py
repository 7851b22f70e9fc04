"""Communication volume (analysis/comm/volumes.py) against the hand formulas of its docstring."""

from __future__ import annotations

import json
from typing import Any

import pytest

from embedcalc.analysis.comm.gradient_buckets import (
    DDP_BUCKET_BYTES,
    DDP_FIRST_BUCKET_BYTES,
    MIB,
    ddp_buckets,
    fsdp_units,
)
from embedcalc.analysis.comm.volumes import communication
from embedcalc.analysis.workload import Parallelism, Workload
from embedcalc.sources.loading import load_target

GPT2_PARAMS = 124_439_808


def _gpt2_step(**par: int) -> Workload:
    return Workload(batch_size=2, seq_len=64, mode="training", parallel=Parallelism(**par))


def test_dp_all_reduce_is_the_ring_volume_of_every_gradient() -> None:
    config = load_target("gpt2").config
    est = communication(config, _gpt2_step(dp=4))
    (ar,) = est.collectives
    grads = GPT2_PARAMS * 4  # float32 gradients
    assert (ar.kind, ar.group, ar.payload_bytes) == ("all-reduce", "dp", grads)
    assert ar.wire_bytes == 2 * 3 * grads // 4
    assert ar.count == 13  # what DDP made for gpt2 here (bench --nproc 2: 13 gloo all-reduces per step)


def test_zero3_is_fsdp2_units_gathered_twice_but_the_root_once() -> None:
    config = load_target("gpt2").config
    units = fsdp_units(config, tp=1, dp=2, dtype_bytes=4)
    assert len(units) == 12 + 1 and units[-1][0] == "root"
    block = 7_087_872 * 4  # every gpt2 block tensor has an even first dimension: no padding at dp 2
    assert all(size == block for _, size in units[:-1])
    gathered = 2 * sum(s for _, s in units) - units[-1][1]
    zero3 = communication(config, _gpt2_step(dp=2, zero=3)).wire_bytes
    assert zero3 == (gathered + sum(s for _, s in units)) // 2
    dp = communication(config, _gpt2_step(dp=2)).wire_bytes
    assert dp < zero3 < 3 * dp // 2 + 1  # under ZeRO's 1.5x: the root is not gathered again


def test_tp_all_reduces_per_projection_in_the_torch_layout() -> None:
    config = load_target("gpt2").config
    est = communication(config, _gpt2_step(tp=2))
    per_call = 2 * 64 * 768 * 4  # b n d, float32
    forward, loss, backward = est.collectives
    assert (forward.count, forward.payload_bytes) == (12 * 2 + 1, 25 * per_call)  # out, ffn out; the lookup
    assert (loss.count, loss.payload_bytes) == (3, 3 * 2 * 64 * 4)
    # q, k, v, ffn in; the head
    assert (backward.count, backward.payload_bytes) == (
        12 * 4 + 1,
        49 * per_call,
    )
    assert forward.wire_bytes == forward.payload_bytes  # 2 (N - 1) / N = 1 for N = 2


def test_inference_has_no_gradient_traffic() -> None:
    config = load_target("gpt2").config
    w = Workload(batch_size=2, seq_len=64, parallel=Parallelism(tp=2, dp=2))
    kinds = {(c.group, c.purpose) for c in communication(config, w).collectives}
    assert ("dp", "DDP gradient buckets") not in kinds
    assert communication(config, w).collectives[0].count == 12 * 2 + 1


def test_pipeline_sends_per_micro_batch() -> None:
    config = load_target("gpt2").config
    (send,) = communication(config, _gpt2_step(pp=4)).collectives
    assert send.count == 4 * 2
    assert send.wire_bytes == 8 * 2 * 64 * 768 * 4


def test_one_device_communicates_nothing() -> None:
    config = load_target("gpt2").config
    assert communication(config, _gpt2_step()).wire_bytes == 0


@pytest.mark.parametrize(("sizes", "calls"), [([], 0), ([1], 1), ([DDP_FIRST_BUCKET_BYTES], 1),
                                              ([DDP_FIRST_BUCKET_BYTES, 1], 2),
                                              ([1, DDP_FIRST_BUCKET_BYTES, DDP_BUCKET_BYTES], 2),
                                              ([2 * DDP_FIRST_BUCKET_BYTES, 30 * MIB, 1, 1], 3)])  # fmt: skip
def test_ddp_buckets(sizes: list[int], calls: int) -> None:
    assert ddp_buckets(sizes) == calls


def _communication(cli: Any, *flags: str) -> dict[str, Any]:
    result = cli("analyze", "gpt2", "--mode", "training", "--batch-size", "2", "--seq-len", "64", *flags,
                 "--format", "json")  # fmt: skip
    assert result.exit_code == 0, result.output
    comm: dict[str, Any] = json.loads(result.stdout)["results"][0]["communication"]
    return comm


def test_analyze_json_dp_all_reduce_equals_the_readme_formula(cli: Any) -> None:
    comm = _communication(cli, "--dp", "4")
    # docs/concepts/memory.md: DP all-reduce bytes per device = 2 (N - 1) / N x params x gradient bytes
    assert comm["by_group"] == {"dp": 2 * 3 * GPT2_PARAMS * 4 // 4}


def test_analyze_json_tp_and_zero3(cli: Any) -> None:
    tp = _communication(cli, "--tp", "2")["by_group"]["tp"]
    assert tp == (25 + 49) * 2 * 64 * 768 * 4 + 3 * 2 * 64 * 4
    config = load_target("gpt2").config
    units = fsdp_units(config, tp=1, dp=2, dtype_bytes=4)
    total, root = sum(s for _, s in units), units[-1][1]
    zero3 = _communication(cli, "--dp", "2", "--zero", "3")
    assert zero3["by_group"] == {"dp": (3 * total - root) // 2}
    assert _communication(cli)["wire_bytes"] == 0
