"""``--cp`` against a real run: causal attention in TransformerEngine's load-balanced context-parallel layout, two
ranks of torch.distributed (gloo, this CPU) passing keys and values round the ring
(:mod:`embedcalc.modeling.ring_attention`). Its output is full causal attention's, and what each rank sends is the
analyzer's ring volume (:mod:`embedcalc.analysis.comm.volumes`) for the same layer, to the byte."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from embedcalc.analysis.comm.volumes import communication
from embedcalc.analysis.workload import Parallelism, Workload
from embedcalc.sources.loading import load_target

WORLD, BATCH, KV_HEADS, SEQ, HEAD_DIM = 2, 2, 2, 32, 8


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rank(rank: int, port: int, out: str) -> None:
    import torch.distributed as dist

    from embedcalc.modeling.ring_attention import local_chunks, ring_attention

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        gen = torch.Generator().manual_seed(0)  # every rank draws the same full sequence, keeps its chunks
        q, k, v = (torch.randn(BATCH, KV_HEADS, SEQ, HEAD_DIM, generator=gen) for _ in range(3))
        got = ring_attention(*(local_chunks(x, rank, WORLD) for x in (q, k, v)), rank, WORLD)
        want = local_chunks(
            torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True), rank, WORLD
        )
        torch.save({"error": float((got.out - want).abs().max()), "sent": got.sent_bytes, "sends": got.sends},
                   Path(out) / f"{rank}.pt")  # fmt: skip
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, float]]:
    out = tmp_path_factory.mktemp("ring")
    mp.spawn(_rank, args=(_port(), str(out)), nprocs=WORLD, join=True)
    return [torch.load(out / f"{r}.pt") for r in range(WORLD)]


def test_the_ring_computes_full_causal_attention(ranks: list[dict[str, float]]) -> None:
    assert all(r["error"] < 1e-5 for r in ranks), ranks


def test_each_rank_sends_what_the_analyzer_counts_for_the_layer(ranks: list[dict[str, float]]) -> None:
    # a one-layer decoder of these widths: 2 KV heads of 8 (as many query heads), fp32
    config = load_target(
        "gpt2", ["num_layers=1", f"embed_dim={KV_HEADS * HEAD_DIM}", f"num_heads={KV_HEADS}"]
    ).config
    w = Workload(batch_size=BATCH, seq_len=SEQ, mode="training", dtype="fp32", parallel=Parallelism(cp=WORLD))
    [forward] = [c for c in communication(config, w).collectives if c.group == "cp" and c.phase == "forward"]
    assert forward.count == WORLD - 1 and all(r["sends"] == forward.count for r in ranks)
    assert all(r["sent"] == forward.payload_bytes for r in ranks)
