"""Regression tests for issue 15, one per bug class, each with the exact input that reproduced it, and the bounds
the README states (worst-case time and memory of check, analyze and sweep on hostile input).

Time guards are blow-up guards (30 s on a shared CI core), not speed assertions: the bugs they catch hung forever.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from paths import HF_FIXTURES

from embedcalc.config.divisors import TRIAL_DIVISION_LIMIT, factorise, list_divisors
from embedcalc.config.limits import MAX_INT_DIGITS
from embedcalc.sources.loading import load_target
from embedcalc.sources.parsing import MAX_YAML_CHARS
from embedcalc.sources.reading import MAX_CONFIG_BYTES

GUARD_S = 30.0
HF = HF_FIXTURES


def run(cli: Any, *args: str) -> Any:
    start = time.perf_counter()
    result = cli(*args)
    result.seconds = time.perf_counter() - start
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.stderr + result.stdout
    assert result.seconds < GUARD_S, f"{args[:3]} took {result.seconds:.1f} s"
    return result


def assert_refused(result: Any, code: int, *words: str) -> None:
    assert result.exit_code == code, (result.exit_code, result.stderr)
    for word in words:
        assert word in result.stderr, (word, result.stderr)


# --- integers past Python's 4,300-digit limit ---------------------------------------------------------------------


@pytest.mark.parametrize("command", ["check", "analyze", "compare", "sweep"])
def test_set_integer_over_4300_digits_exits_3(cli: Any, command: str) -> None:
    extra = ["bert-base"] if command == "compare" else []
    result = run(cli, command, "bert-base", *extra, "--set", "embed_dim=" + "9" * 5000)
    assert_refused(result, 3, "--set embed_dim", "5,000 digits", f"at most {MAX_INT_DIGITS} digits")


def test_json_file_integer_over_4300_digits_exits_3(cli: Any, tmp_path: Path) -> None:
    path = tmp_path / "model.json"
    path.write_text('{"architecture": "decoder", "ffn_dim": ' + "9" * 5000 + "}")
    assert_refused(run(cli, "check", str(path)), 3, "ffn_dim", "5,000 digits")


def test_quoted_long_digit_string_is_described_not_converted(cli: Any, tmp_path: Path) -> None:
    path = tmp_path / "model.yaml"
    path.write_text('architecture: decoder\nvocab_size: "' + "9" * 5000 + '"\n')
    assert_refused(run(cli, "check", str(path)), 3, "vocab_size", "5,000 characters")


def test_thirty_digit_sizes_are_counted_exactly(cli: Any) -> None:
    big = "9" * MAX_INT_DIGITS
    result = run(
        cli, "analyze", "gpt2", "--set", f"num_layers={big}", "--batch-size", big, "--format", "json"
    )
    assert result.exit_code == 0, result.stderr
    total = json.loads(result.stdout)["results"][0]["params"]["total"]
    assert total == 7_087_872 * int(big) + 39_383_808 + 1_536  # one block, embeddings, final norm


def test_thirty_one_digits_are_refused(cli: Any) -> None:
    assert_refused(run(cli, "check", "gpt2", "--set", "num_layers=1" + "0" * 30), 3, "31 digits")
    assert_refused(run(cli, "analyze", "gpt2", "--seq-len", "1" + "0" * 30), 2, "--seq-len", "30 digits")


def test_python_mapping_with_a_huge_int_is_refused_before_the_schema() -> None:
    from embedcalc.errors import ConfigError
    from embedcalc.sources.loading import validate_config

    with pytest.raises(ConfigError) as info:
        validate_config({"embed_dim": 10**400, "num_heads": 7}, {}, [], "api")
    assert info.value.problems[0].code == "number_too_long"


# --- 1e400, inf, nan ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["1e400", "-1e400", ".inf", "-.inf", ".nan"])
def test_non_finite_set_value_with_suggest_exits_3(cli: Any, value: str) -> None:
    result = run(cli, "check", "bert-base", "--set", f"num_heads={value}", "--suggest")
    assert_refused(result, 3, "--set num_heads", "finite number")


@pytest.mark.parametrize("value", ["1e400", ".nan", ".inf"])
def test_non_finite_yaml_value_exits_3(cli: Any, tmp_path: Path, value: str) -> None:
    path = tmp_path / "model.yaml"
    path.write_text(f"architecture: decoder\ndropout: {value}\nembed_dim: 64\n")
    assert_refused(run(cli, "check", str(path), "--suggest"), 3, "dropout", "finite number")


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_non_finite_json_value_exits_3(cli: Any, tmp_path: Path, literal: str) -> None:
    path = tmp_path / "model.json"
    path.write_text('{"architecture": "decoder", "dropout": ' + literal + "}")
    assert_refused(run(cli, "check", str(path)), 3, "dropout", "finite number")


# --- huge but valid integers in float arithmetic ------------------------------------------------------------------


def test_ffn_dim_ten_to_the_190_is_refused_with_its_key(cli: Any) -> None:
    for command in ("check", "analyze"):
        result = run(cli, command, "bert-base", "--set", "ffn_dim=1" + "0" * 190)
        assert_refused(result, 3, "--set ffn_dim", "191 digits")


def test_largest_ffn_dim_renders_ratio_and_report(cli: Any, tmp_path: Path) -> None:
    """The FFN ratio, its warning and the HF check report at the largest accepted size (float-safe by the bound)."""
    big = 10**MAX_INT_DIGITS - 1
    result = run(cli, "check", "bert-base", "--set", f"ffn_dim={big}", "--format", "json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["results"][0]["derived"]["ffn_ratio"] == pytest.approx(big / 768)
    hf = json.loads((HF / "bert-base-uncased.json").read_text())
    hf["intermediate_size"] = big
    path = tmp_path / "config.json"
    path.write_text(json.dumps(hf))
    assert run(cli, "check", str(path)).exit_code == 0
    hf["intermediate_size"] = 10**190
    path.write_text(json.dumps(hf))
    assert_refused(run(cli, "check", str(path)), 3, "intermediate_size", "191 digits")


# --- YAML mapping keys --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["[1, 2]: 3\nembed_dim: 4\n", "? {a: 1}\n: 2\n", "? [x]\n: y\n"])
def test_unhashable_yaml_key_exits_3(cli: Any, tmp_path: Path, text: str) -> None:
    path = tmp_path / "model.yaml"
    path.write_text(text)
    assert_refused(run(cli, "check", str(path)), 3, "model.yaml", "mapping key")


@pytest.mark.parametrize(
    "raw",
    [
        {"model_type": ["llava"], "text_config": {"model_type": "llama"}},
        {"model_type": "llava", "text_config": {"model_type": ["llama"]}},
        {"model_type": {"a": 1}, "text_config": {"model_type": {"b": 2}}},
    ],
)
def test_unhashable_model_type_beside_a_text_config_exits_3(
    cli: Any, tmp_path: Path, raw: dict[str, Any]
) -> None:
    """The fuzz long profile found it: a model_type that is an array, outer or in text_config, was looked up in
    the family tables (TypeError: unhashable type, exit 1); it is no family's, and the message says model_type."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    assert_refused(run(cli, "check", str(path)), 3, "config.json", "model_type")


# --- special files ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/dev/urandom", "/dev/zero", "/dev/null"])
def test_device_is_refused_up_front(cli: Any, path: str) -> None:
    if not Path(path).exists():
        pytest.skip(f"no {path}")
    assert_refused(run(cli, "check", path), 3, path, "not a regular file")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs")
def test_fifo_is_refused_without_blocking(cli: Any, tmp_path: Path) -> None:
    fifo = tmp_path / "model.yaml"
    os.mkfifo(fifo)
    assert_refused(run(cli, "check", str(fifo)), 3, "named pipe", "not a regular file")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs")
def test_fifo_with_a_writer_is_still_refused(cli: Any, tmp_path: Path) -> None:
    """A pipe with an endless writer (the /dev/zero shape of a pipe) is refused by type, never read."""
    fifo = tmp_path / "stream.yaml"
    os.mkfifo(fifo)

    def write() -> None:
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            return
        os.close(fd)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    assert_refused(run(cli, "analyze", str(fifo)), 3, "named pipe")


def test_read_is_bounded_whatever_the_reported_size(tmp_path: Path) -> None:
    """read_bytes_bounded reads at most limit + 1 bytes, so a growing or lying file cannot be read unboundedly."""
    from embedcalc.errors import ConfigError
    from embedcalc.sources.reading import read_bytes_bounded

    path = tmp_path / "big.json"
    path.write_bytes(b" " * 5000)
    with pytest.raises(ConfigError) as info:
        read_bytes_bounded(path, limit=1000)
    assert info.value.code == "file_too_big"


# --- did-you-mean on files with very many keys --------------------------------------------------------------------


def test_many_unknown_keys_are_fast_and_summarised(cli: Any, tmp_path: Path) -> None:
    path = tmp_path / "model.json"
    path.write_text(json.dumps({f"embed_dmi_{i}": i for i in range(40_000)}))
    result = run(cli, "check", str(path))
    assert_refused(result, 3, "did you mean", "39,980 more unknown keys")


def test_long_unknown_key_gets_no_fuzzy_match(cli: Any) -> None:
    result = run(cli, "check", "bert-base", "--set", "x" * 100_000 + "=1")
    assert_refused(result, 3, "unknown key")


# --- heads factorisation ------------------------------------------------------------------------------------------


def test_heads_of_thirty_sevens_answers(cli: Any) -> None:
    result = run(cli, "heads", "777777777777777777777777777777", "--format", "json")
    assert result.exit_code == 0, result.stderr
    entry = json.loads(result.stdout)["results"][0]
    assert entry["divisor_count"] == 12_288 and not entry["complete"]
    assert len(entry["choices"]) == 10_000
    assert [c["num_heads"] for c in entry["choices"][:6]] == [1, 3, 7, 11, 13, 21]


def test_heads_of_a_hard_semiprime_states_the_bound(cli: Any) -> None:
    n = (10**14 + 31) * (10**15 + 37)  # two large primes: not split within the rho budget
    result = run(cli, "heads", str(n), "--format", "json")
    assert result.exit_code == 0, result.stderr
    entry = json.loads(result.stdout)["results"][0]
    assert entry["exact_below"] <= TRIAL_DIVISION_LIMIT + 1
    assert {c["num_heads"] for c in entry["choices"]} >= {1, n}
    assert "not fully factored" in result.stderr


def test_divisor_listing_is_exact_where_it_says() -> None:
    n = 2**10 * 3**5 * (2**61 - 1)
    listing = list_divisors(n)
    assert listing.complete and factorise(n).complete
    assert list(listing.values) == sorted(d for d in range(1, 10**6) if n % d == 0) + [
        d for d in listing.values if d >= 10**6
    ]


def test_heads_over_thirty_digits_is_a_usage_error(cli: Any) -> None:
    assert_refused(run(cli, "heads", "1" + "0" * 40), 2, "30 digits")


# --- sweep sizes --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "axes",
    [
        ["--num-heads", "1:100000:+1", "--batch-size", "768:7680:x4"],
        ["--ffn-dim", "1:100000:+1", "--embed-dim", "768,1024"],
    ],
)
def test_enormous_sweep_is_refused_up_front(cli: Any, axes: list[str]) -> None:
    result = run(cli, "sweep", "bert-base", *axes, "--format", "json")
    assert_refused(result, 2, "200,000 points", "--max-points")
    assert json.loads(result.stdout)["problems"][0]["code"] == "grid_too_large"


def test_max_points_raises_the_limit(cli: Any) -> None:
    result = run(cli, "sweep", "bert-base", "--seq-len", "1:30:+1", "--max-points", "10")
    assert_refused(result, 2, "30 points", "--max-points 30")
    assert run(cli, "sweep", "bert-base", "--seq-len", "1:30:+1", "--max-points", "30").exit_code == 0


def test_sweep_axis_over_the_digit_bound_is_a_usage_error(cli: Any) -> None:
    assert_refused(
        run(cli, "sweep", "bert-base", "--embed-dim", "1" + "0" * 40), 2, "--embed-dim", "30 digits"
    )


# --- input paths --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["a" * 300 + ".yaml", "a" * 300, "/a" * 3000 + ".yaml"])
def test_over_long_input_path_is_an_input_error(cli: Any, tmp_path: Path, name: str) -> None:
    path = str(tmp_path) + "/" + name.lstrip("/") if not name.startswith("/") else str(tmp_path) + name
    for args in (["check", path], ["analyze", path, "--format", "json"]):
        result = run(cli, *args)
        assert_refused(result, 3, "too long")
        assert "cannot write output" not in result.stderr


def test_unnamed_os_error_is_an_output_error_named_file_its_file() -> None:
    from embedcalc.cli.common import os_error_message

    assert (
        os_error_message(OSError(28, "No space left on device"))
        == "cannot write output: No space left on device"
    )
    assert os_error_message(OSError(13, "Permission denied", "plot.png")) == "plot.png: Permission denied"


# --- int8 training ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["check", "analyze", "compare", "sweep"])
def test_int8_training_names_the_flag(cli: Any, command: str) -> None:
    targets = ["bert-base", "gpt2"] if command == "compare" else ["bert-base"]
    result = run(cli, command, *targets, "--mode", "training", "--dtype", "int8")
    assert_refused(result, 3, "--dtype")  # issue 14: exit 3 with the fix, the same in every command
    assert "fp32" in result.stderr and "bf16" in result.stderr


# --- the README's bounds: worst-case time of check, analyze and sweep ---------------------------------------------


def _worst_yaml(tmp_path: Path) -> Path:
    """The slowest YAML per byte for PyYAML found by the fuzzing: a flow list of tiny scalars, at the size limit."""
    path = tmp_path / "worst.yaml"
    body = "1, " * ((MAX_YAML_CHARS - 10) // 3)
    path.write_text("a: [" + body + "1]\n")
    return path


def test_worst_case_yaml_is_bounded(cli: Any, tmp_path: Path) -> None:
    path = _worst_yaml(tmp_path)
    for command in ("check", "analyze"):
        assert_refused(run(cli, command, str(path)), 3, "unknown key 'a'")
    over = tmp_path / "over.yaml"
    over.write_text("# " + "x" * MAX_YAML_CHARS + "\n")
    assert_refused(run(cli, "check", str(over)), 3, "YAML model config is at most")


def test_worst_case_json_is_bounded(cli: Any, tmp_path: Path) -> None:
    path = tmp_path / "worst.json"
    path.write_text("[" + "[1]," * (MAX_CONFIG_BYTES // 4 - 2) + "1]")  # the most lists the bound admits
    assert_refused(run(cli, "analyze", str(path)), 3, "holds a list")


def test_default_sweep_limit_is_bounded(cli: Any) -> None:
    result = run(cli, "sweep", "bert-base", "--seq-len", "1:20000:+1", "--format", "json")
    assert result.exit_code == 0, result.stderr
    assert len(json.loads(result.stdout)["results"][0]["points"]) == 20_000


def test_load_target_refuses_devices_through_the_api() -> None:
    from embedcalc.errors import ConfigError

    if sys.platform == "win32":
        pytest.skip("POSIX devices")
    with pytest.raises(ConfigError) as info:
        load_target("/dev/zero")
    assert info.value.problems[0].code == "file_not_regular"


# --- found by the long fuzz profile (10,303 cases, this session) --------------------------------------------------


def test_a_mapping_where_an_activation_name_goes_is_refused(cli: Any, tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "t5", "d_model": 768, "d_ff": 2048, "d_kv": 64, "num_heads": 12,
                                "num_layers": 12, "vocab_size": 32128, "feed_forward_proj": "gated-gelu",
                                "dense_act_fn": {"": "x"}}))  # fmt: skip
    result = cli("analyze", str(path))
    assert result.exit_code == 3 and "dense_act_fn" in result.stderr and "Traceback" not in result.output


def test_presets_show_with_a_name_too_long_for_a_file_is_an_unknown_preset(cli: Any) -> None:
    result = cli("presets", "show", "x" * 300)
    assert (
        result.exit_code == 3
        and "unknown preset" in result.stderr
        and "File name too long" not in result.stderr
    )
