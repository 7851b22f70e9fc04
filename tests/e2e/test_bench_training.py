"""benchmarks/bench_training.py's data: the llm-foundry MPT runs it judges the training time model on are the
published shapes (embedcalc's parameter count equals the table's NumParams, row by row) and each row's command
runs. The time ratios themselves are the benchmark's output, not asserted (no speed in a test)."""

from __future__ import annotations

from pathlib import Path

from paths import BENCHMARKS, load_script

from embedcalc.analysis.params import count_params
from embedcalc.config.schema import ModelConfig

bench = load_script("bench_training", BENCHMARKS)


def test_every_mpt_shape_counts_what_llm_foundry_published() -> None:
    rows = bench.rows()
    assert len(rows) == 216
    shapes = {(r.model, r.seq_len): r.num_params for r in rows}
    counted = {key: count_params(ModelConfig.model_validate(bench.mpt_config(*key))).total for key in shapes}
    assert counted == shapes


def test_a_row_of_each_table_predicts(tmp_path: Path) -> None:
    firsts = {r.table: r for r in reversed(bench.rows())}
    for row in firsts.values():
        tokens_per_s, params, bound = bench.predict(row, tmp_path)
        assert params == row.num_params and 0 < tokens_per_s < bound
