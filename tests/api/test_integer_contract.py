"""One integer contract for the API and the CLI (issue 33): numpy integers are converted to Python ints and
bounded exactly like Python ints before any arithmetic; booleans (Python's or numpy's) are refused where an
integer is due; plan's real-valued inputs are bounded so that no result holds inf; every result serialises with
``json.dumps`` (plain JSON types) and equals the result of the same call with Python ints."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

import embedcalc
from embedcalc.config.limits import plain_number, plain_numbers
from embedcalc.errors import EmbedcalcError, ExitCode

TINY = {"name": "tiny", "architecture": "decoder", "vocab_size": 1000, "max_seq_len": 128, "embed_dim": 64,
        "num_heads": 4, "num_layers": 2}  # fmt: skip
NUMPY_INTS = (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64)


def _plain_json(result: Any) -> Any:
    data = result.to_json()
    return json.loads(json.dumps(data, allow_nan=False))


@pytest.mark.parametrize("kind", NUMPY_INTS)
def test_plain_number_turns_every_numpy_integer_into_a_python_int(kind: Any) -> None:
    value = plain_number(kind(7))
    assert type(value) is int and value == 7
    assert plain_number(np.bool_(True)) is True and plain_number(np.float32(0.5)) == 0.5
    assert type(plain_number(np.float32(0.5))) is float
    assert plain_numbers({"a": [np.int64(1), (np.int32(2),)]}) == {"a": [1, (2,)]}


def test_a_numpy_batch_of_2_to_the_40_is_exact_not_int64_wrapped() -> None:
    """The issue's case: batch_size=np.int64(2**40) reported forward FLOPs -9.4e17 and failed json.dumps."""
    numpy = embedcalc.analyze("gpt2", batch_size=np.int64(2**40))
    python = embedcalc.analyze("gpt2", batch_size=2**40)
    assert numpy.flops.forward == python.flops.forward > 0 and type(numpy.flops.forward) is int
    assert numpy.memory.total_bytes == python.memory.total_bytes > 0
    assert _plain_json(numpy) == _plain_json(python)


@pytest.mark.parametrize(
    "call",
    [
        lambda n: embedcalc.analyze("gpt2", seq_len=n(64), batch_size=n(3)),
        lambda n: embedcalc.analyze("gpt2", parallel={"tp": n(2), "dp": n(2)}, mode="training"),
        lambda n: embedcalc.compare(["gpt2", "bert-base"], seq_len=n(64)),
        lambda n: embedcalc.analyze(TINY | {"vocab_size": n(1000), "num_layers": n(3)}),
        lambda n: embedcalc.sweep("gpt2", seq_len=[n(64), n(128)], batch_size=n(2)),
        lambda n: embedcalc.plan(
            "gpt2", hardware="h100-sxm", seq_len=n(64), gen_tokens=n(16), concurrency=n(4)
        ),
    ],
    ids=["analyze", "parallel", "compare", "load-mapping", "sweep", "plan"],
)
def test_numpy_integers_give_the_python_int_result(call: Any) -> None:
    assert _plain_json(call(np.int64)) == _plain_json(call(int))


@pytest.mark.parametrize(
    "call",
    [
        lambda v: embedcalc.analyze("gpt2", batch_size=v),
        lambda v: embedcalc.analyze("gpt2", parallel={"tp": v}),
        lambda v: embedcalc.plan("gpt2", hardware="h100-sxm", concurrency=v),
        lambda v: embedcalc.sweep("gpt2", embed_dim=[v]),
        lambda v: embedcalc.analyze(TINY | {"num_layers": v}),
    ],
    ids=["analyze", "parallel", "plan", "sweep", "load-mapping"],
)
@pytest.mark.parametrize("value", [True, np.bool_(True), 2.0, np.float64(2.0), 10**30, np.uint64(2**64 - 1) * 0],
                         ids=["bool", "np-bool", "float", "np-float", "31-digits", "np-zero"])  # fmt: skip
def test_booleans_floats_and_out_of_range_integers_are_the_packages_error(call: Any, value: Any) -> None:
    with pytest.raises(EmbedcalcError) as info:
        call(value)
    assert info.value.exit_code in (ExitCode.USAGE, ExitCode.INVALID_CONFIG)
    assert info.value.problems and info.value.problems[0].path


@pytest.mark.parametrize(
    ("argument", "value"),
    [("rate", 5e-324), ("rate", 1e308), ("deadline_s", 5e-324), ("max_ttft", float("inf")),
     ("min_tokens_per_s", float("nan")), ("max_tpot", -1.0), ("rate", np.float64(1e-300))],
)  # fmt: skip
def test_plan_bounds_its_real_inputs(argument: str, value: float) -> None:
    extra: dict[str, Any] = {"mode": "training", "train_tokens": 10**9} if argument == "deadline_s" else {}
    with pytest.raises(EmbedcalcError) as info:
        embedcalc.plan("gpt2", hardware="h100-sxm", **{argument: value}, **extra)
    assert info.value.exit_code == ExitCode.USAGE and argument in info.value.message


def test_a_price_is_bounded_and_zero_is_a_price_for_plan_as_for_analyze() -> None:
    with pytest.raises(EmbedcalcError) as info:
        embedcalc.plan("gpt2", hardware="h100-sxm", price_per_hour={"h100-sxm": 1e308})
    assert info.value.exit_code == ExitCode.USAGE and "price_per_hour" in info.value.message
    owned = embedcalc.plan("gpt2", hardware="h100-sxm", price_per_hour={"h100-sxm": np.float64(0)})
    assert json.dumps(owned.to_json(), allow_nan=False)


@pytest.mark.parametrize(
    "kwargs",
    [{"hardware": 5}, {"hardware": [5]}, {"price_per_hour": [1]}, {"price_per_hour": {5: 1.0}},
     {"memory_utilization": True}, {"gen_tokens": 10**31}],
)  # fmt: skip
def test_plan_arguments_of_the_wrong_type_are_usage_errors(kwargs: dict[str, Any]) -> None:
    kwargs = {"hardware": "h100-sxm", **kwargs}
    with pytest.raises(EmbedcalcError) as info:
        embedcalc.plan("gpt2", **kwargs)
    assert info.value.exit_code == ExitCode.USAGE
