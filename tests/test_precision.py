"""Precision as users say it (issue 20, item 3): one dtype vocabulary with its aliases in flags, config files, JSON
and the Python API."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from typer.testing import CliRunner

import embedcalc
from embedcalc.cli.app import app
from embedcalc.config.dtypes import ALIASES, DTYPES, DtypeError, canonical_dtype

runner = CliRunner()


def _json(*args: str) -> dict[str, Any]:
    result = runner.invoke(app, [*args, "--format", "json"])
    assert result.exit_code == 0, result.output
    return dict(json.loads(result.stdout))


def test_long_names_are_aliases_of_the_short_ones() -> None:
    assert [canonical_dtype(d) for d in DTYPES] == list(DTYPES)
    assert {long: canonical_dtype(long) for long in ALIASES} == {"float32": "fp32", "bfloat16": "bf16",
                                                                 "float16": "fp16"}  # fmt: skip
    with pytest.raises(DtypeError, match=re.escape("fp32|bf16")):
        canonical_dtype("float64")


def test_bf16_and_bfloat16_give_the_same_json() -> None:
    short = _json("analyze", "llama-2-7b", "--dtype", "bf16")
    long = _json("analyze", "llama-2-7b", "--dtype", "bfloat16")
    assert short == long
    assert short["workload"]["dtype"] == "bf16" and short["workload"]["dtype_source"] == "flag"


def test_kv_dtype_takes_the_same_names() -> None:
    a = _json("analyze", "llama-2-7b", "--dtype", "bf16", "--kv-dtype", "float16", "--gen-tokens", "8")
    b = _json("analyze", "llama-2-7b", "--dtype", "bf16", "--kv-dtype", "fp16", "--gen-tokens", "8")
    assert a == b
    bad = runner.invoke(app, ["analyze", "llama-2-7b", "--kv-dtype", "int4"])
    assert bad.exit_code == 2 and "--kv-dtype" in bad.stderr


def test_python_api_takes_aliases_and_writes_short_names() -> None:
    a = embedcalc.analyze("llama-2-7b", dtype="bfloat16")
    b = embedcalc.analyze("llama-2-7b", dtype="bf16")
    assert a.to_json() == b.to_json() and a.workload.dtype == "bf16"
    with pytest.raises(embedcalc.EmbedcalcError) as err:
        embedcalc.analyze("gpt2", dtype="float64")
    assert err.value.exit_code == 2 and "fp32" in err.value.message


def test_bench_refuses_what_the_torch_model_cannot_run() -> None:
    result = runner.invoke(app, ["bench", "gpt2", "--dtype", "fp8"])
    assert result.exit_code == 2
    assert "--dtype fp8 --hardware" in " ".join(result.stderr.split())  # the fix: predict it with analyze
