"""``bench --nproc``: a real torchrun launch over gloo (2 ranks on this CPU), a rank killed mid-run, the check
before launching, two "nodes" on localhost (two launches, one c10d rendezvous), a node alone timing out, and a
SIGKILL of the launcher.

The launches start real processes (torch imports in each), so they are ``slow`` and run by ``.ci/run``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from cli_process import cli_env, run_embedcalc

from embedcalc.analysis.workload import Workload
from embedcalc.api.distributed import RANK_PROCESS_BYTES, RANKS_PER_CORE, Nodes, launch_problems
from embedcalc.errors import EmbedcalcError, ExitCode

if TYPE_CHECKING:
    from embedcalc.analysis.report import Analysis

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


def _launch(
    tmp_path: Path, strategy: str, batch_size: int, seq_len: int, repeat: int, **env: str
) -> subprocess.CompletedProcess[str]:
    """``bench --nproc 2`` of the tiny decoder: training steps on the CPU under torchrun (gloo), one warm-up, no
    baseline, as JSON; ``env`` adds to the CLI's environment."""
    return run_embedcalc(
        "bench", str(_tiny(tmp_path)), "--nproc", "2", "--strategy", strategy, "--mode", "training",
        "--batch-size", str(batch_size), "--seq-len", str(seq_len), "--device", "cpu", "--warmup", "1",
        "--repeat", str(repeat), "--no-baseline", "--format", "json", env=cli_env(COLUMNS="120", **env),
        timeout=600,
    )  # fmt: skip


def _measured(tmp_path: Path, strategy: str, batch_size: int, repeat: int) -> dict[str, Any]:
    """The ``results[0]`` entry of a two-rank launch (seq_len 16) that must succeed."""
    proc = _launch(tmp_path, strategy, batch_size, 16, repeat)
    assert proc.returncode == 0, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout)["results"][0]
    return result


@pytest.mark.slow
def test_ddp_on_two_ranks_reports_every_rank_beside_the_prediction(tmp_path: Path) -> None:
    result = _measured(tmp_path, "ddp", batch_size=2, repeat=2)["distributed"]
    assert [r["rank"] for r in result["ranks"]] == [0, 1]
    for rank in result["ranks"]:
        assert rank["local_params"] == rank["predicted_params"]  # a DDP replica holds every parameter
        assert rank["peak_memory_bytes"] > 0 and rank["comm_calls_per_step"] > 0
    dp = next(c for c in result["communication"]["collectives"] if c["group"] == "dp")
    assert dp["payload_bytes"] == result["ranks"][0]["predicted_params"] * 4  # float32 gradients
    assert (
        set(result["predicted"]) == set(result["error_pct"]) == {"step_s", "tokens_per_s", "comm_s_per_step"}
    )
    # the expected step for local, 100 (measured - predicted) / predicted
    for key in (
        "step_s",
        "tokens_per_s",
    ):
        predicted = result["predicted"][key]
        assert result["error_pct"][key] == pytest.approx(
            100 * (result[key] - predicted) / predicted, rel=1e-9
        )


@pytest.mark.slow
def test_fsdp_ranks_hold_their_shard(tmp_path: Path) -> None:
    result = _measured(tmp_path, "fsdp", batch_size=1, repeat=1)
    ranks = result["distributed"]["ranks"]
    for rank in ranks:  # each rank's FSDP2 shard, tensor by tensor, equals the analytic chunk rule
        assert rank["local_params"] == rank["predicted_params"]
    assert sum(r["local_params"] for r in ranks) == result["params"]["total"]


@pytest.mark.slow
def test_a_killed_rank_ends_the_whole_group_cleanly(tmp_path: Path) -> None:
    marker = f"embedcalc-test-{uuid.uuid4()}"
    proc = _launch(tmp_path, "ddp", 1, 8, 50, EMBEDCALC_FAULT_RANK="1", EMBEDCALC_TEST_MARKER=marker)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert "rank 1 of 2 failed" in proc.stderr and "SIGKILL" in proc.stderr
    envelope = json.loads(proc.stdout)
    assert envelope["status"] == "error" and envelope["problems"][0]["code"] == "rank_failed"
    assert _processes_with(marker) == []  # no orphan ranks


def test_a_thousand_ranks_are_refused_before_launch_with_the_numbers() -> None:
    proc = run_embedcalc(
        "bench", "gpt2", "--nproc", "1000", "--device", "cpu", env=cli_env(COLUMNS="200"), timeout=120
    )
    assert proc.returncode == 4, proc.stderr  # DESIGN §6: the environment can't do it
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    cores = len(os.sched_getaffinity(0))
    assert f"1000 ranks on {cores} core" in proc.stderr and f"{RANKS_PER_CORE} ranks per core" in proc.stderr
    assert "344.33 MiB per torch process, measured" in proc.stderr  # RANK_PROCESS_BYTES
    largest = re.search(r"use --nproc (\d+) or fewer", proc.stderr)
    assert largest is not None and 0 < int(largest.group(1)) <= cores * RANKS_PER_CORE


def _gpt2(nproc: int) -> Analysis:
    from embedcalc.api.bench import measured_analysis
    from embedcalc.api.load import load_target
    from embedcalc.reconcile.distributed import strategy_parallelism

    return measured_analysis(load_target("gpt2", None), Workload(parallel=strategy_parallelism("ddp", nproc)))


def test_the_launch_check_counts_each_rank_process_and_bounds_ranks_per_core() -> None:
    from embedcalc.reconcile.bench import predicted_bytes

    analysis = _gpt2(4)
    per_rank = RANK_PROCESS_BYTES + predicted_bytes(analysis)
    fits = launch_problems(
        analysis, 4, cores=2, free_host=4 * per_rank, gpus=None, free_gpu=None, force=False
    )
    assert fits.problems == [] and fits.largest_nproc == 4
    short = launch_problems(
        analysis, 4, cores=2, free_host=4 * per_rank - 1, gpus=None, free_gpu=None, force=False
    )
    assert len(short.problems) == 1 and f"({4 * per_rank:,} bytes)" in short.problems[0]
    assert short.largest_nproc == 3 and short.forceable
    assert launch_problems(analysis, 4, 2, 4 * per_rank - 1, None, None, force=True).problems == []
    crowded = launch_problems(analysis, 5, cores=2, free_host=10**15, gpus=None, free_gpu=None, force=True)
    assert "over the bound of 2 ranks per core (4)" in crowded.problems[0]
    assert crowded.largest_nproc == 4 and not crowded.forceable  # --force lifts memory only
    # CUDA: one rank per GPU, each rank's model on its GPU, only the processes in this machine's RAM
    gpu = launch_problems(
        analysis, 3, cores=16, free_host=3 * RANK_PROCESS_BYTES, gpus=2, free_gpu=10**12, force=False
    )
    assert gpu.problems == ["3 ranks need a GPU each and this machine has 2"] and gpu.largest_nproc == 2


@pytest.mark.parametrize(
    ("nodes", "message"),
    [
        ({"nnodes": 2}, "--nnodes 2 needs --rdzv-endpoint HOST:PORT"),
        (
            {"nnodes": 2, "node_rank": 2, "endpoint": "h:1"},
            "--node-rank 2 is not a node of --nnodes 2; use 0 to 1",
        ),
        ({"nnodes": 2, "endpoint": "h:0"}, "the port must be 1 to 65535"),
        ({"nnodes": 2, "endpoint": ":29400"}, "give node 0's address as HOST:PORT"),
        ({"timeout_s": 0}, "--rdzv-timeout must be at least 1 second"),
    ],
)
def test_bad_node_settings_are_usage_errors_naming_the_flag(nodes: dict[str, Any], message: str) -> None:
    with pytest.raises(EmbedcalcError) as caught:
        Nodes(**nodes)
    assert caught.value.exit_code == ExitCode.USAGE and message in str(caught.value)


def test_an_endpoint_without_a_port_gets_torchruns_and_ipv6_keeps_its_brackets() -> None:
    assert Nodes(2, 1, "node0.example").endpoint == "node0.example:29400"
    assert Nodes(2, 0, " 10.0.0.1:1234 ").endpoint == "10.0.0.1:1234"
    assert Nodes(2, 0, "[::1]:1234").endpoint == "[::1]:1234"


def test_node_flags_without_nproc_are_refused() -> None:
    proc = run_embedcalc("bench", "gpt2", "--nnodes", "2", "--rdzv-endpoint", "h:1", timeout=120)
    assert proc.returncode == 2 and "--nnodes and --rdzv-endpoint go only with --nproc N" in proc.stderr


def test_refused_before_launch_when_the_ranks_cannot_fit(tmp_path: Path) -> None:
    proc = run_embedcalc(
        "bench", "gpt2", "--nproc", "2", "--mode", "training", "--batch-size", "100000", "--seq-len", "1024",
        "--device", "cpu", env=cli_env(COLUMNS="120"), timeout=120,
    )  # fmt: skip
    assert proc.returncode == 4, proc.stderr
    assert "ranks are predicted to need" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_tensor_parallel_ranks_hold_the_predicted_shard_and_issue_the_predicted_collectives(
    tmp_path: Path,
) -> None:
    result = _measured(tmp_path, "tp", batch_size=2, repeat=2)["distributed"]
    predicted_calls = sum(c["count"] for c in result["communication"]["collectives"])
    for rank in result["ranks"]:
        assert rank["local_params"] == rank["predicted_params"]
        assert rank["comm_calls_per_step"] == predicted_calls  # gloo all-reduces seen by the profiler


# --- several nodes: two launches on this machine meet on one c10d rendezvous ------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start(*args: str, marker: str, **env: str) -> subprocess.Popen[str]:
    """``embedcalc ARGS`` in the background, its processes (and its ranks') marked in their environment."""
    return subprocess.Popen(
        [sys.executable, "-m", "embedcalc", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        encoding="utf-8", stdin=subprocess.DEVNULL, env=cli_env(COLUMNS="160", EMBEDCALC_TEST_MARKER=marker, **env),
    )  # fmt: skip


def _node(rank: int, port: int, *extra: str, target: str = "gpt2") -> tuple[str, ...]:
    return ("bench", target, "--nproc", "1", "--nnodes", "2", "--node-rank", str(rank), "--rdzv-endpoint",
            f"127.0.0.1:{port}", "--device", "cpu", *extra, "--format", "json")  # fmt: skip


def _reap(marker: str) -> None:
    """Kill whatever a failed test left behind (only the test's own, marked processes)."""
    for pid in _processes_with(marker):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
def test_two_nodes_on_localhost_meet_and_node_0_reports_both_ranks() -> None:
    marker, port = f"embedcalc-test-{uuid.uuid4()}", _free_port()
    # FSDP2 forwards (each all-gathers the weights across the two nodes): 100 s here, DDP training steps 300 s
    run = ("--strategy", "fsdp", "--seq-len", "16", "--warmup", "0", "--repeat", "1", "--no-baseline",
           "--rdzv-timeout", "240")  # fmt: skip
    try:
        node1 = _start(*_node(1, port, *run), marker=marker)  # the client first: it waits for node 0's store
        node0 = _start(*_node(0, port, *run), marker=marker)
        out0, err0 = node0.communicate(timeout=600)
        out1, err1 = node1.communicate(timeout=120)
    finally:
        _reap(marker)
    assert node0.returncode == 0, err0
    assert node1.returncode == 0, err1
    report = json.loads(out0)["results"][0]["distributed"]
    assert report["nproc"] == 2 and [r["rank"] for r in report["ranks"]] == [0, 1]
    assert sorted(r["node_rank"] for r in report["ranks"]) == [0, 1]
    for rank in report["ranks"]:  # each rank holds its own FSDP2 shard of gpt2, gathered from the other node
        assert rank["local_params"] == rank["predicted_params"]
        assert rank["comm_calls_per_step"] > 0
    assert sum(r["local_params"] for r in report["ranks"]) == 124_439_808
    elsewhere = json.loads(out1)["results"][0]["distributed"]
    on_node0 = next(r["rank"] for r in report["ranks"] if r["node_rank"] == 0)
    on_node1 = next(r["rank"] for r in report["ranks"] if r["node_rank"] == 1)
    assert elsewhere["report_on"]["rank"] == on_node0 and elsewhere["ranks_here"] == [on_node1]
    assert _processes_with(marker) == []


@pytest.mark.slow
@pytest.mark.parametrize(
    ("node_rank", "message"),
    [
        (0, "did not complete within --rdzv-timeout 3 s: 2 nodes were expected"),
        (1, "could not reach node 0's rendezvous at 127.0.0.1:"),
    ],
)
def test_a_node_alone_times_out_cleanly_and_leaves_no_process(node_rank: int, message: str) -> None:
    marker = f"embedcalc-test-{uuid.uuid4()}"
    try:
        node = _start(*_node(node_rank, _free_port(), "--rdzv-timeout", "3"), marker=marker)
        out, err = node.communicate(timeout=300)
    finally:
        _reap(marker)
    assert node.returncode == 4, err  # the environment can't do it: the other node is not there
    assert message in err and "Traceback" not in err and "frame #" not in err
    envelope = json.loads(out)
    assert envelope["status"] == "error" and envelope["problems"][0]["code"] == "rendezvous_failed"
    assert _processes_with(marker) == []


@pytest.mark.slow
def test_node_0_refuses_a_port_in_use() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        proc = run_embedcalc(*_node(0, taken.getsockname()[1], "--rdzv-timeout", "3"), timeout=300)
    assert proc.returncode == 4, proc.stderr
    assert "node 0 could not host the rendezvous store" in proc.stderr and "EADDRINUSE" in proc.stderr
    assert "Traceback" not in proc.stderr and "frame #" not in proc.stderr


@pytest.mark.slow
def test_nodes_running_different_commands_do_not_meet(tmp_path: Path) -> None:
    marker, port, tiny = f"embedcalc-test-{uuid.uuid4()}", _free_port(), str(_tiny(tmp_path))
    try:  # the same model, a different --seq-len: a different rendezvous id, so neither sees the other
        nodes = [_start(*_node(r, port, "--seq-len", str(8 * (r + 1)), "--rdzv-timeout", "8", target=tiny),
                        marker=marker) for r in (0, 1)]  # fmt: skip
        errors = [node.communicate(timeout=300)[1] for node in nodes]
    finally:
        _reap(marker)
    assert [node.returncode for node in nodes] == [4, 4], errors
    ids = [re.findall(r"rendezvous (embedcalc-[0-9a-f]{12})", err) for err in errors]
    assert all(len(found) == 1 for found in ids) and ids[0] != ids[1], errors
    assert "did not complete within --rdzv-timeout 8 s" in errors[0]
    assert "node 0 went away before every node joined" in errors[1] or "did not complete" in errors[1]
    assert _processes_with(marker) == []


@pytest.mark.slow
def test_a_rank_lost_mid_run_ends_both_nodes(tmp_path: Path) -> None:
    marker, port, tiny = f"embedcalc-test-{uuid.uuid4()}", _free_port(), str(_tiny(tmp_path))
    run = ("--mode", "training", "--seq-len", "8", "--warmup", "1", "--repeat", "50", "--no-baseline")
    try:  # global rank 1 kills itself before its first timed step, whichever node it is on
        nodes = [
            _start(*_node(r, port, *run, target=tiny), marker=marker, EMBEDCALC_FAULT_RANK="1")
            for r in (1, 0)
        ]
        outputs = [node.communicate(timeout=600) for node in nodes]
    finally:
        _reap(marker)
    for node, (out, err) in zip(nodes, outputs, strict=True):
        assert node.returncode == 1, err  # a runtime failure, as on one node
        assert "Traceback" not in err and "frame #" not in err
        assert json.loads(out)["problems"][0]["code"] == "rank_failed"
    errors = "".join(err for _, err in outputs)
    assert "rank 1 of 2 failed (signal SIGKILL)" in errors  # the node that ran it names it
    assert _processes_with(marker) == []


def _rank_rss(marker: str) -> dict[int, int]:
    """Resident bytes of each live rank (a multiprocessing ``spawn`` child) of the marked launch."""
    ranks = {}
    for pid in _processes_with(marker):
        try:
            if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes():
                ranks[pid] = int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf(
                    "SC_PAGE_SIZE"
                )
        except OSError:
            continue
    return ranks


@pytest.mark.slow
def test_sigkill_of_the_launcher_leaves_no_rank(tmp_path: Path) -> None:
    marker = f"embedcalc-test-{uuid.uuid4()}"
    launcher = _start("bench", str(_tiny(tmp_path)), "--nproc", "2", "--mode", "training", "--batch-size", "1",
                      "--seq-len", "8", "--device", "cpu", "--warmup", "1", "--repeat", "1000000", "--no-baseline",
                      marker=marker)  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        # both ranks running their model: past torch's import, past start-up
        while time.monotonic() < deadline:
            ranks = _rank_rss(marker)
            if len(ranks) == 2 and min(ranks.values()) > 300_000_000:
                break
            assert launcher.poll() is None, launcher.communicate()[1]
            time.sleep(0.2)
        assert len(ranks) == 2
        launcher.kill()  # SIGKILL: no handler of torchrun's agent runs
        launcher.wait()
        gone_by = time.monotonic() + 5  # without the parent-death signal they ran on for 8 s here
        while _processes_with(marker) and time.monotonic() < gone_by:
            time.sleep(0.05)
        assert _processes_with(marker) == []
    finally:
        launcher.kill()
        _reap(marker)
