"""``verify --tp/--dp --zero 3/--pp``: the analytic per-device split against the shards torch really makes, on
torch's fake process group (DTensor tensor parallelism, FSDP2, a pipeline module split), exactly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from embedcalc.analysis.workload import Parallelism
from embedcalc.sources.loading import load_target

pytestmark = pytest.mark.torch
pytest.importorskip("torch")


def _verify(cli: Any, *args: str) -> tuple[int, dict[str, Any], str]:
    result = cli("verify", *args, "--format", "json")
    return result.exit_code, json.loads(result.stdout), result.stderr


@pytest.mark.slow  # about 4-9 s; the pipeline and column/row-parallel tests below cover sharding by default
def test_gpt2_tp2_dp2_zero3_agrees_on_every_rank_and_collective(cli: Any) -> None:
    code, out, err = _verify(cli, "gpt2", "--tp", "2", "--dp", "2", "--zero", "3")
    assert code == 0, err
    sharded = out["results"][0]["sharded"]
    assert sharded["agree"] and sharded["mismatches"] == []
    assert {r["rank"] for r in sharded["shards"]} == {0, 1, 2, 3}
    kinds = {(c["kind"], c["phase"]): c for c in sharded["collectives"]}
    assert kinds[("all-gather", "forward")]["torch_count"] == 12 + 1  # every block and the root
    assert kinds[("all-gather", "backward")]["torch_count"] == 12  # the root stays gathered
    assert kinds[("all-reduce", "backward")]["torch_count"] == 12 * 4 + 1  # q, k, v, ffn in; the head input


@pytest.mark.slow  # about 13 s: FSDP2 over gpt2 on the fake process group
def test_gpt2_dp2_zero3_reads_each_ranks_own_chunk(cli: Any) -> None:
    # issue 24: with no --tp, FSDP2 shards on a 1-D dp mesh; each rank's chunk of the odd 50,257-row token table is
    # torch's (rows rounded up per rank, the last rank short): 25,129 and 25,128 rows of 768
    code, out, err = _verify(cli, "gpt2", "--dp", "2", "--zero", "3")
    assert code == 0, err
    sharded = out["results"][0]["sharded"]
    assert sharded["agree"] and sharded["mismatches"] == []
    assert {r["rank"] for r in sharded["shards"]} == {0, 1}
    text = json.dumps(sharded)
    assert "19299072" in text and "19298304" in text


def test_pipeline_stages_match_the_module_split(cli: Any) -> None:
    code, out, err = _verify(cli, "gpt2", "--pp", "4")
    assert code == 0, err
    stages = out["results"][0]["sharded"]["stages"]
    assert len(stages) == 4 and all(s["ok"] for s in stages)
    assert "head.lm.weight (tied copy)" in stages[-1]["tensors"]  # the last stage's copy of the tied table


def test_a_row_parallel_layer_built_column_parallel_fails_naming_the_tensor(
    cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torch.distributed.tensor.parallel import ColwiseParallel

    from embedcalc.modeling import sharding

    right = sharding.tp_plan

    def wrong(model: Any) -> dict[str, Any]:
        plan = right(model)
        return {k: ColwiseParallel() if k.endswith("attention.out") else v for k, v in plan.items()}

    monkeypatch.setattr(sharding, "tp_plan", wrong)
    result = cli("verify", "gpt2", "--tp", "2")
    assert result.exit_code == 1
    assert "decoder/attention/out" in result.stderr and "decoder.layers.0.attention.out.bias" in result.stderr
    assert "Traceback" not in result.stderr


def test_zero_1_and_2_are_not_what_fsdp2_does(cli: Any) -> None:
    result = cli("verify", "gpt2", "--dp", "2", "--zero", "1")
    assert result.exit_code == 2 and "--zero 3" in result.output


@pytest.mark.slow
def test_llama_2_70b_at_tp_8(cli: Any) -> None:
    code, out, err = _verify(cli, "llama-2-70b", "--tp", "8")
    assert code == 0, err
    sharded = out["results"][0]["sharded"]
    qkv = next(r for r in sharded["shards"] if r["key"] == "decoder/attention/qkv")
    assert qkv["torch"] == 80 * (8192 * 8192 // 8 + 2 * 128 * 8192)  # one of the 8 KV heads per rank
    assert sharded["collectives"] and all(c["ok"] for c in sharded["collectives"])
    calls = {c["phase"]: (c["torch_count"], c["torch_bytes"]) for c in sharded["collectives"]}
    # the example of docs/concepts/memory.md
    assert calls == {"forward": (164, 84_410_560), "backward": (401, 210_239_488)}


@pytest.mark.slow
def test_mixture_of_experts_shards_agree_and_say_why_no_collectives() -> None:
    from embedcalc.reconcile.sharding import verify_sharded

    result = verify_sharded("mixtral-8x7b", load_target("mixtral-8x7b").config, Parallelism(tp=8))
    assert result.agree and result.collectives == []
    assert any("mixture-of-experts" in note for note in result.notes)


def test_albert_pp2_every_stage_holds_the_shared_block(cli: Any) -> None:
    # issue 24: ALBERT runs one block at all 12 positions; a pipeline stage cannot call a module on another device,
    # so both stages hold it (torch's split had put it on stage 0 only: 590,592 on stage 1 vs analytic 7,678,464)
    code, out, err = _verify(cli, "albert-base-v2", "--pp", "2")
    assert code == 0, err
    stages = out["results"][0]["sharded"]["stages"]
    assert [s["torch"] for s in stages] == [s["analytic"] for s in stages]
    block = "encoder.layers.0.attention.qkv.q.weight"
    assert all(block in s["tensors"] for s in stages)
    assert stages[1]["torch"] == 7_678_464


PHI2_YAML = """\
name: phi-2
architecture: decoder
vocab_size: 51200
max_seq_len: 2048
embed_dim: 2560
num_heads: 32
num_layers: 32
ffn_dim: 10240
activation: gelu_tanh
norm: layernorm
norm_placement: parallel
position: rope
rotary_dim: 32
tie_embeddings: false
lm_head_bias: true
"""


def test_phi2_lm_head_bias_is_split_with_the_vocabulary(cli: Any, tmp_path: Any) -> None:
    # issue 24: docs/concepts/layer-model.md's phi-2 YAML at --tp 2: the LM-head bias is vocab-parallel like its
    # weight (a ColwiseParallel bias), 25,600 of its 51,200 on each rank, and the training step runs in torch
    path = tmp_path / "phi2.yaml"
    path.write_text(PHI2_YAML)
    code, out, err = _verify(cli, str(path), "--set", "num_layers=2", "--tp", "2")
    assert code == 0, err
    sharded = out["results"][0]["sharded"]
    assert sharded["agree"] and sharded["collectives"], sharded["mismatches"]
    bias = [r for r in sharded["shards"] if r["key"] == "head/lm_bias"]
    assert [r["torch"] for r in bias] == [25_600, 25_600]


@pytest.mark.parametrize("name", ["qwen3-next-80b-a3b", "granite-4.0-h-small", "minimax-m1-80k"])
def test_tp_plan_splits_the_attention_gate_and_leaves_mixers_whole(name: str) -> None:
    # issue 24: the plan matched a Mamba / DeltaNet mixer's ``in_`` as an FFN input (torch split it, analyze did
    # not) and missed gated attention's output gate (analyze split it, torch did not)
    from embedcalc.reconcile.sharding import verify_sharded

    result = verify_sharded(name, load_target(name).config, Parallelism(tp=2))
    assert all(r.ok for r in result.shards), result.mismatches()
    keys = {r.key for r in result.shards}
    assert "decoder/mixer/in" in keys


@pytest.mark.slow  # about 6 s: FSDP2 forward of t5-small on real CPU storage
def test_t5_dp2_zero3_runs_its_training_step() -> None:
    # issue 24: T5 --dp 2 --zero 3 failed in torch (the stack computes its bias from block 0's table before block
    # 0's unit is gathered: "aten.embedding.default got mixed torch.Tensor and DTensor")
    from embedcalc.reconcile.sharding import verify_sharded

    t5 = verify_sharded("t5-small", load_target("t5-small").config, Parallelism(dp=2, zero=3))
    assert t5.agree and not t5.failed, t5.mismatches()


def test_relative_position_table_is_its_own_fsdp2_unit() -> None:
    # the table is an FSDP2 unit of its own, and analyze counts that unit's collectives
    from embedcalc.reconcile.sharding import verify_sharded

    config = load_target("gpt2", ["num_layers=2", "position=relative"]).config
    result = verify_sharded("gpt2", config, Parallelism(dp=2, zero=3))
    assert result.agree, result.mismatches()
    gathers = {(c.kind, c.phase): c.torch_count for c in result.collectives}
    assert gathers[("all-gather", "forward")] == 4  # the table, two blocks, the root


def test_moe_zero3_collectives_count_each_stacked_expert_tensor_once() -> None:
    # issue 24: FSDP2 all-gathers a layer's (E, ·, ·) expert tensor once; analyze multiplied it by E again
    # (mixtral at embed_dim 256, 3 experts over 2 ranks, padded to 4: 204,968,960 B analytic vs 28,808,192 in torch)
    from embedcalc.reconcile.sharding import verify_sharded

    small = ["num_layers=2", "embed_dim=256", "num_heads=4", "num_kv_heads=2", "vocab_size=1001",
             "ffn.expert_dim=512", "ffn.num_experts=3", "ffn.top_k=1"]  # fmt: skip
    result = verify_sharded(
        "mixtral-8x7b", load_target("mixtral-8x7b", small).config, Parallelism(dp=2, zero=3)
    )
    assert result.agree and result.collectives, result.mismatches()
    assert {c.kind for c in result.collectives} == {"all-gather", "reduce-scatter"}


def test_full_width_qk_norms_are_replicated_and_gathered_around() -> None:
    # issue 24: a q/k norm over all heads (OLMo 2) under --tp 2 was counted split by analyze while torch kept it
    # whole, and torch's step failed (normalized_shape 768 on a 384-wide local q). Now q and k are all-gathered
    # around the replicated norm (vLLM's Olmo2Attention) and analyze counts those gathers; the output gate of gated
    # attention is a fourth column-parallel input in the backward
    from embedcalc.reconcile.sharding import verify_sharded

    sets = ["num_layers=2", "attention.qk_norm=full", "num_kv_heads=4", "attention.output_gate=true"]
    result = verify_sharded("gpt2", load_target("gpt2", sets).config, Parallelism(tp=2))
    assert result.agree, result.mismatches()
    norms = [r for r in result.shards if r.key == "decoder/attention/qk_norm"]
    assert [r.torch for r in norms] == [
        2 * 2 * (768 + 256)
    ] * 2  # weight and bias of q's and k's norms, 2 layers
    gathers = {c.phase: (c.torch_count, c.torch_bytes) for c in result.collectives if c.kind == "all-gather"}
    assert gathers == {"forward": (4, 2 * 16 * (768 + 256) * 4), "backward": (4, 2 * 16 * (768 + 256) * 4)}


def test_full_width_qk_norms_gather_each_blocks_own_widths(tmp_path: Path) -> None:
    # a block with its own KV heads (the NAS models' per-block num_kv_heads) gathers its own k width around the
    # norm, not the flat one: analyze counted (q_dim + flat kv_dim) per layer, 73,728 B per pass here, torch 65,536
    from embedcalc.reconcile.sharding import verify_sharded

    path = tmp_path / "blocks.yaml"
    path.write_text(
        "name: qk-full-blocks\narchitecture: decoder\nvocab_size: 1000\nmax_seq_len: 64\nembed_dim: 256\n"
        "num_heads: 8\nnum_kv_heads: 4\nnum_layers: 3\nffn_dim: 512\nattention: {qk_norm: full}\n"
        "blocks: {narrow: {attention: {num_kv_heads: 2}}}\nlayers: [{pattern: [default, narrow, narrow]}]\n",
        encoding="utf-8",
    )
    result = verify_sharded(str(path), load_target(str(path)).config, Parallelism(tp=2))
    assert result.agree, result.mismatches()
    gathers = {c.phase: (c.torch_count, c.torch_bytes) for c in result.collectives if c.kind == "all-gather"}
    per_pass = 16 * 4 * ((256 + 4 * 32) + 2 * (256 + 2 * 32))  # tokens x fp32 x (q + k widths of each layer)
    assert per_pass == 65_536
    assert gathers == {"forward": (6, per_pass), "backward": (6, per_pass)}


@pytest.mark.parametrize("command", ["analyze", "verify"])
def test_full_width_qk_norm_with_replicated_kv_heads_is_refused_up_front(cli: Any, command: str) -> None:
    result = cli(command, "gpt2", "--set", "attention.qk_norm=full", "--set", "num_kv_heads=1", "--tp", "2")
    assert result.exit_code == 3
    assert "qk_norm full needs num_kv_heads (1)" in result.stderr and "Traceback" not in result.stderr
