"""``analyze --dtype all`` (issue 34, item 6): every dtype's memory in one table, as accelerate's estimate-memory
shows it, with the largest layer that device_map="auto" and offloading need on one device."""

from __future__ import annotations

import json

from typer.testing import CliRunner

import embedcalc
from embedcalc.analysis.memory.largest import largest_layer
from embedcalc.api.dtypes import memory_by_dtype
from embedcalc.cli.app import app
from embedcalc.config.dtypes import DTYPES, INFERENCE_ONLY_DTYPES
from embedcalc.sources.loading import load_target

runner = CliRunner()


def test_largest_layer_is_the_embedding_or_one_whole_layer() -> None:
    llama = embedcalc.analyze("llama-3.1-8b", dtype="fp32")
    layer = largest_layer(llama.config, llama.workload)
    assert (
        layer.name == "embedding/token" and layer.params == 128_256 * 4_096
    )  # 2.10 GB in fp32, as accelerate
    assert layer.bytes == 4 * layer.params
    mixtral = embedcalc.analyze("mixtral-8x7b")
    layer = largest_layer(mixtral.config, mixtral.workload)
    experts = 8 * 3 * 4096 * 14336  # w1, w3, w2 of 8 experts
    attention = 2 * 4096 * 4096 + 2 * 4096 * 1024  # q, o; k, v of 8 KV heads
    assert (
        layer.name.startswith("decoder layer") and layer.params == experts + attention + 4096 * 8 + 2 * 4096
    )
    assert layer.bytes == 2 * layer.params  # bf16


def test_every_row_is_analyzes_own_figure_for_that_dtype() -> None:
    result = memory_by_dtype(load_target("gpt2"), "gpt2", embedcalc.Workload(seq_len=256))
    assert [r.dtype for r in result.rows] == list(DTYPES)
    for row in result.rows:
        inference = embedcalc.analyze("gpt2", dtype=row.dtype, seq_len=256).to_json()["memory"]
        assert row.weights_bytes == inference["weights_bytes"]
        assert row.inference_bytes == inference["total_bytes"]
        if row.dtype in INFERENCE_ONLY_DTYPES:
            assert row.training_bytes is None and "cannot be trained" in row.why[0]
        else:
            training = embedcalc.analyze("gpt2", dtype=row.dtype, seq_len=256, mode="training").to_json()
            assert row.training_bytes == training["memory"]["total_bytes"]


def test_cli_dtype_all_table_json_and_refusals() -> None:
    table = runner.invoke(app, ["analyze", "llama-3.1-8b", "--dtype", "ALL"], env={"COLUMNS": "80"})
    assert table.exit_code == 0, table.output
    lines = table.stdout.splitlines()
    assert "│ fp32  │ 29.92 GiB │      1.96 GiB │" in table.stdout
    assert sum(line.startswith("│ ") for line in lines) == len(DTYPES)  # one line per dtype
    data = json.loads(runner.invoke(app, ["analyze", "gpt2", "--dtype", "all", "--format", "json"]).stdout)
    rows = data["results"][0]["dtypes"]
    assert [r["dtype"] for r in rows] == list(DTYPES)
    assert rows[0]["largest_layer"] == {"name": "embedding/token", "params": 38_597_376, "bytes": 154_389_504}
    for args in (["compare", "gpt2", "bert-base", "--dtype", "all"],
                 ["analyze", "gpt2", "--dtype", "all", "--hardware", "h100-sxm"]):  # fmt: skip
        refused = runner.invoke(app, args)
        assert refused.exit_code == 2 and "--dtype all" in refused.output, refused.output
