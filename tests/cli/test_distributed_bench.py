"""``bench --nproc``: a real torchrun launch over gloo (2 ranks on this CPU), a rank killed mid-run, the fit check.

The launches start real processes (torch imports in each), so they are ``slow`` and run by ``.ci/run``.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest
from conftest import cli_env, run_embedcalc

pytestmark = [pytest.mark.torch]

TINY = """\
name: tiny-decoder
architecture: decoder
vocab_size: 128
max_seq_len: 32
embed_dim: 64
num_heads: 4
num_layers: 2
activation: swiglu
norm: rmsnorm
position: rope
bias: false
"""


def _tiny(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY)
    return path


def _processes_with(marker: str) -> list[int]:
    """PIDs of live processes whose environment carries ``marker`` (the test's own launch)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if marker.encode() in (entry / "environ").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@pytest.mark.slow
def test_ddp_on_two_ranks_reports_every_rank_beside_the_prediction(tmp_path: Path) -> None:
    proc = run_embedcalc(
        "bench", str(_tiny(tmp_path)), "--nproc", "2", "--strategy", "ddp", "--mode", "training",
        "--batch-size", "2", "--seq-len", "16", "--device", "cpu", "--warmup", "1", "--repeat", "2",
        "--no-baseline", "--format", "json", env=cli_env(COLUMNS="120"), timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)["results"][0]["distributed"]
    assert [r["rank"] for r in result["ranks"]] == [0, 1]
    for rank in result["ranks"]:
        assert rank["local_params"] == rank["predicted_params"]  # a DDP replica holds every parameter
        assert rank["peak_memory_bytes"] > 0 and rank["comm_calls_per_step"] > 0
    dp = next(c for c in result["communication"]["collectives"] if c["group"] == "dp")
    assert dp["payload_bytes"] == result["ranks"][0]["predicted_params"] * 4  # float32 gradients


@pytest.mark.slow
def test_fsdp_ranks_hold_their_shard(tmp_path: Path) -> None:
    proc = run_embedcalc(
        "bench", str(_tiny(tmp_path)), "--nproc", "2", "--strategy", "fsdp", "--mode", "training",
        "--batch-size", "1", "--seq-len", "16", "--device", "cpu", "--warmup", "1", "--repeat", "1",
        "--no-baseline", "--format", "json", env=cli_env(COLUMNS="120"), timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)["results"][0]
    ranks = result["distributed"]["ranks"]
    for rank in ranks:  # each rank's FSDP2 shard, tensor by tensor, equals the analytic chunk rule
        assert rank["local_params"] == rank["predicted_params"]
    assert sum(r["local_params"] for r in ranks) == result["params"]["total"]


@pytest.mark.slow
def test_a_killed_rank_ends_the_whole_group_cleanly(tmp_path: Path) -> None:
    marker = f"embedcalc-test-{uuid.uuid4()}"
    proc = run_embedcalc(
        "bench", str(_tiny(tmp_path)), "--nproc", "2", "--strategy", "ddp", "--mode", "training",
        "--batch-size", "1", "--seq-len", "8", "--device", "cpu", "--warmup", "1", "--repeat", "50",
        "--no-baseline", "--format", "json",
        env=cli_env(COLUMNS="120", EMBEDCALC_FAULT_RANK="1", EMBEDCALC_TEST_MARKER=marker), timeout=600,
    )  # fmt: skip
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert "rank 1 of 2 failed" in proc.stderr and "SIGKILL" in proc.stderr
    envelope = json.loads(proc.stdout)
    assert envelope["status"] == "error" and envelope["problems"][0]["code"] == "rank_failed"
    assert _processes_with(marker) == []  # no orphan ranks


def test_refused_before_launch_when_the_ranks_cannot_fit(tmp_path: Path) -> None:
    proc = run_embedcalc(
        "bench", "gpt2", "--nproc", "2", "--mode", "training", "--batch-size", "100000", "--seq-len", "1024",
        "--device", "cpu", env=cli_env(COLUMNS="120"), timeout=120,
    )  # fmt: skip
    assert proc.returncode == 4, proc.stderr
    assert "ranks are predicted to need" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_tensor_parallel_ranks_hold_the_predicted_shard_and_issue_the_predicted_collectives(tmp_path: Path) -> None:
    proc = run_embedcalc(
        "bench", str(_tiny(tmp_path)), "--nproc", "2", "--strategy", "tp", "--mode", "training",
        "--batch-size", "2", "--seq-len", "16", "--device", "cpu", "--warmup", "1", "--repeat", "2",
        "--no-baseline", "--format", "json", env=cli_env(COLUMNS="120"), timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)["results"][0]["distributed"]
    predicted_calls = sum(c["count"] for c in result["communication"]["collectives"])
    for rank in result["ranks"]:
        assert rank["local_params"] == rank["predicted_params"]
        assert rank["comm_calls_per_step"] == predicted_calls  # gloo all-reduces seen by the profiler
