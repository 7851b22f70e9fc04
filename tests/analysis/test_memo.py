"""The search's memo (embedcalc/analysis/memo.py) changes no number: the time model and the serving memory asked
through one Memo shared by several devices, in any order and asked twice, equal the same calls without one; and
``lower_bound=False`` leaves the expected times as they are."""

from __future__ import annotations

from dataclasses import replace

import pytest

from embedcalc.analysis.memo import Memo
from embedcalc.analysis.memory.serving import max_concurrency, serving_memory
from embedcalc.analysis.time.estimate import TimeRequest, estimate_time
from embedcalc.analysis.workload import Parallelism, Workload
from embedcalc.devices.catalogue import Device, catalogue
from embedcalc.sources.loading import load_target

DEVICES = ("h100-sxm", "l40s", "a100-40gb")


def _devices() -> list[Device]:
    by_name = {d.name: d for d in catalogue()}
    return [by_name[name] for name in DEVICES]


@pytest.mark.parametrize("target", ["llama-3.1-8b", "mixtral-8x7b"])
def test_estimates_through_a_shared_memo_equal_fresh_ones(target: str) -> None:
    config = load_target(target).config
    memo = Memo()
    w = Workload(seq_len=512, gen_tokens=64, dtype="bf16")
    for kv in (None, "fp8"):
        for device in _devices():
            request = TimeRequest(device=device, kv_dtype=kv)
            for tp in (1, 2):
                for batch in (1, 8, 8):  # the second 8 is served from the memo
                    trial = replace(w, batch_size=batch, parallel=Parallelism(tp=tp))
                    fresh = estimate_time(config, trial, request)
                    kept = estimate_time(config, trial, request, lower_bound=False, memo=memo)
                    assert kept.lower_bound is None
                    assert replace(fresh, lower_bound=None).to_json() == kept.to_json()
                    assert fresh.decode_s_per_token_mean == kept.decode_s_per_token_mean


def test_training_estimate_through_a_memo_equals_a_fresh_one() -> None:
    config = load_target("llama-3.1-8b").config
    memo = Memo()
    w = Workload(
        batch_size=2, seq_len=2048, dtype="bf16", mode="training", parallel=Parallelism(tp=2, dp=4, cp=2)
    )
    for device in _devices() * 2:
        request = TimeRequest(device=device, train_tokens=10**9, devices=16)
        fresh = estimate_time(config, w, request, 10**9)
        kept = estimate_time(config, w, request, 10**9, lower_bound=False, memo=memo)
        assert replace(fresh, lower_bound=None).to_json() == kept.to_json()


def test_serving_memory_through_a_shared_memo_equals_a_fresh_one() -> None:
    config = load_target("llama-3.1-8b").config
    memo = Memo()
    w = Workload(seq_len=1024, gen_tokens=256, dtype="bf16")
    for device in _devices() * 2:
        for kv in (None, "fp8"):
            usable = int(device.memory * 0.9)
            most = max_concurrency(config, w, usable, kv)
            assert max_concurrency(config, w, usable, kv, memo=memo) == most
            for c in (1, 300, 2000):
                fresh = serving_memory(config, w, c, device.memory, 0.9, kv, most=most)
                assert serving_memory(config, w, c, device.memory, 0.9, kv, most=most, memo=memo) == fresh
