"""Options as objects (issue 14): each shared option defined once, its default and bounds those of Workload and
Parallelism, its choices the analysis' Literals; every command builds its workload through the same group."""

from __future__ import annotations

import dataclasses
import json
import re
import typing
from typing import Annotated, Any

import pytest
import typer

from embedcalc.analysis.workload import Dtype, Parallelism, Workload
from embedcalc.cli.options import flags, only
from embedcalc.cli.workload_options import BudgetFlags, ParallelFlags, WorkloadFlags
from embedcalc.errors import WorkloadError


def test_group_defaults_are_the_workloads() -> None:
    assert WorkloadFlags().workload() == Workload()
    assert ParallelFlags().parallelism() == Parallelism()
    assert WorkloadFlags(seq_len=64).workload(ParallelFlags(tp=2), dtype="bfloat16") == Workload(
        seq_len=64, dtype="bf16", parallel=Parallelism(tp=2)
    )
    chosen = WorkloadFlags(dtype="bf16").workload()
    assert (chosen.dtype, chosen.dtype_source) == ("bf16", "flag")
    assert WorkloadFlags().workload().dtype_source == "default"


def test_dtype_flag_takes_the_vocabulary_and_its_aliases() -> None:
    from embedcalc.cli.options import dtype_parser

    parse = dtype_parser()
    assert [parse(d) for d in typing.get_args(Dtype)] == list(typing.get_args(Dtype))
    assert (parse("bfloat16"), parse("float32"), parse("float16")) == ("bf16", "fp32", "fp16")
    with pytest.raises(typer.BadParameter, match=re.escape("fp32|bf16|fp16|fp8|mxfp4|nvfp4|int8|int4")):
        parse("float8")
    assert Workload(dtype="bfloat16").dtype == "bf16"  # type: ignore[arg-type]  # the API's aliases too
    assert Workload(dtype="bfloat16") == Workload(dtype="bf16")  # type: ignore[arg-type]


@pytest.mark.parametrize(("cls", "name", "bad"), [
    (Workload, "batch_size", 0), (Workload, "seq_len", -1), (Workload, "gen_tokens", -1),
    (Parallelism, "zero", 4), (Parallelism, "tp", 0), (Workload, "seq_len", 12.0),
])  # fmt: skip
def test_workload_refuses_out_of_bounds_for_api_users_too(cls: type, name: str, bad: Any) -> None:
    with pytest.raises(WorkloadError) as info:
        cls(**{name: bad})
    assert info.value.problems[0].path == name
    assert info.value.exit_code == 3


def test_flags_spreads_and_gathers_groups() -> None:
    seen: dict[str, Any] = {}

    @flags
    def command(
        target: str, *, run: Annotated[WorkloadFlags, only("seq_len", "mode")], limits: BudgetFlags
    ) -> None:
        seen.update(run=run, limits=limits, target=target)

    import inspect

    assert list(inspect.signature(command).parameters) == ["target", "seq_len", "mode", "max_params", "max_memory",
                                                           "max_flops"]  # fmt: skip
    command(target="x", seq_len=7, mode="training", max_params=None, max_memory=5, max_flops=None)
    assert seen["run"] == WorkloadFlags(seq_len=7, mode="training")
    assert seen["limits"].budget().max_memory_bytes == 5


def test_only_names_a_real_field() -> None:
    with pytest.raises(TypeError, match="no option field"):

        @flags
        def command(*, run: Annotated[WorkloadFlags, only("seqlen")]) -> None: ...


def test_every_group_field_has_help() -> None:
    for cls in (WorkloadFlags, ParallelFlags, BudgetFlags):
        for f in dataclasses.fields(cls):
            info = typing.get_args(typing.get_type_hints(cls, include_extras=True)[f.name])[1]
            assert info.help, f"{cls.__name__}.{f.name}"


def test_check_judges_memory_per_device_with_the_parallel_flags(cli: Any) -> None:
    """A training budget llama-2-7b misses on one device but meets with --tp 8 --dp 8 --zero 3, as analyze says."""
    args = ["llama-2-7b", "--mode", "training", "--max-memory", "40GB", "--format", "json"]
    alone, sharded = cli("check", *args), cli("check", *args, "--tp", "8", "--dp", "8", "--zero", "3")
    assert alone.exit_code == 5 and sharded.exit_code == 0, (alone.stderr, sharded.stderr)
    workload = json.loads(sharded.stdout)["workload"]
    assert workload["parallel"] == {"tp": 8, "pp": 1, "dp": 8, "zero": 3, "ep": 1, "pp_virtual": 1, "cp": 1}
    analyzed = cli("analyze", *args, "--tp", "8", "--dp", "8", "--zero", "3")
    assert analyzed.exit_code == 0


def test_check_int8_training_is_exit_3_with_the_fix(cli: Any) -> None:
    result = cli("check", "bert-base", "--mode", "training", "--dtype", "int8")
    assert (result.exit_code == 3 and result.exception is None) or isinstance(result.exception, SystemExit)
    assert "use --dtype fp32, bf16, fp16 or fp8" in result.stderr


def test_help_builds_every_command_without_the_config_models() -> None:
    """`embedcalc --help` imports every command module for its signature: the options are all it needs, so
    neither pydantic (the config models) nor yaml nor the analysis of a config is loaded (issue 14)."""
    import subprocess
    import sys

    code = (
        "import io, sys, contextlib\n"
        "sys.argv = ['embedcalc', '--help']\n"
        "from embedcalc.cli.app import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n        main()\n    except SystemExit:\n        pass\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pydantic', 'yaml', 'torch', 'numpy')\n"
        "             or m in ('embedcalc.config.schema', 'embedcalc.analysis.report')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "[]", out.stdout


def test_literal_choices_are_the_tables_keys() -> None:
    """The dtype choices and the byte tables they index are the same sets (one list of names)."""
    from embedcalc.analysis.workload import DTYPE_BYTES, KvDtype
    from embedcalc.config.dtypes import KV_ELEMENT_BYTES

    assert set(typing.get_args(Dtype)) == set(DTYPE_BYTES)
    assert set(typing.get_args(KvDtype)) == set(KV_ELEMENT_BYTES)
