"""Config validation: messages that name the key as written, both values and a fix; exit 3 and no traceback.

Library-level checks call ``embedcalc.sources.loading.load_target``; the error matrix runs ``python -m embedcalc
check`` in a subprocess so that a traceback escaping to stderr, or a wrong exit code, would be seen as a user
sees it.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from paths import FIXTURES
from pydantic import ValidationError

from embedcalc.config.schema import ModelConfig
from embedcalc.errors import ConfigError, ExitCode
from embedcalc.sources.loading import load_target
from embedcalc.sources.parsing import load_mapping
from embedcalc.sources.reading import MAX_CONFIG_BYTES

SMALL: dict[str, Any] = {
    "architecture": "decoder",
    "vocab_size": 1024,
    "max_seq_len": 512,
    "embed_dim": 512,
    "num_heads": 8,
    "num_layers": 2,
}

Run = Callable[..., subprocess.CompletedProcess[str]]
Write = Callable[..., Path]


def problems_of(target: str | Path, overrides: list[str] | None = None) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as info:
        load_target(str(target), overrides)
    assert info.value.exit_code == ExitCode.INVALID_CONFIG
    return [(p.path, p.code) for p in info.value.problems]


@dataclass
class Outcome:
    returncode: int
    stdout: str
    stderr: str
    exception: BaseException | None = None


def in_process(cli: Any, *args: str) -> Outcome:
    """Run the CLI in-process (fast); an exception escaping the app shows up as ``exception`` and exit 1."""
    result = cli(*args)
    exception = None if isinstance(result.exception, SystemExit) else result.exception
    return Outcome(result.exit_code, result.stdout, result.stderr, exception)


def assert_exit3(proc: subprocess.CompletedProcess[str] | Outcome, *words: str) -> None:
    """Exit 3, one-line `embedcalc: error:` on stderr with ``words``, nothing on stdout, no traceback."""
    assert getattr(proc, "exception", None) is None, repr(getattr(proc, "exception", None))
    assert proc.returncode == 3, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.startswith("embedcalc: error:"), proc.stderr
    for word in words:
        assert word in proc.stderr, (word, proc.stderr)


# --- the headline message ---------------------------------------------------------------------------------------


def test_indivisible_heads_message_gives_head_dim_nearest_heads_and_dims() -> None:
    with pytest.raises(ConfigError) as info:
        load_target(str(FIXTURES / "heads_1000_12.yaml"))
    (problem,) = info.value.problems
    assert problem.path == "num_heads"
    assert problem.code == "heads_indivisible"
    for words in ("83.33", "10 or 8", "996 or 1008", "num_heads (12)", "embed_dim (1000)"):
        assert words in problem.message, words
    assert "head_dim" in problem.message  # the fix that keeps both values


def test_indivisible_heads_message_on_the_command_line(run_cli: Run) -> None:
    proc = run_cli("check", str(FIXTURES / "heads_1000_12.yaml"))
    assert_exit3(proc, "heads_1000_12.yaml", "83.33", "10 or 8", "996 or 1008")


def test_validation_error_is_a_pydantic_custom_error_at_num_heads() -> None:
    with pytest.raises(ValidationError) as info:
        ModelConfig.model_validate({**SMALL, "embed_dim": 1000, "num_heads": 12})
    (error,) = info.value.errors()
    assert error["loc"] == ("num_heads",)
    assert error["type"] == "heads_indivisible"
    assert error["ctx"]["nearest_heads"] == [10, 8]
    assert error["ctx"]["nearest_embed_dims"] == [996, 1008]


# --- aliases -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("alias", "field", "value"),
    [
        ("d_model", "embed_dim", 512),
        ("hidden_size", "embed_dim", 512),
        ("n_embd", "embed_dim", 512),
        ("nhead", "num_heads", 16),
        ("n_head", "num_heads", 16),
        ("num_attention_heads", "num_heads", 16),
        ("d_ff", "ffn_dim", 1000),
        ("dim_feedforward", "ffn_dim", 1000),
        ("intermediate_size", "ffn_dim", 1000),
        ("n_inner", "ffn_dim", 1000),
        ("n_layer", "num_layers", 5),
        ("num_hidden_layers", "num_layers", 5),
        ("n_positions", "max_seq_len", 2048),
        ("max_position_embeddings", "max_seq_len", 2048),
    ],
)
def test_alias_loads(write_config: Write, alias: str, field: str, value: int) -> None:
    data = {k: v for k, v in SMALL.items() if k != field}
    data[alias] = value
    config = load_target(str(write_config(data))).config
    assert getattr(config, field) == value


def test_hugging_face_style_gpt2_loads_as_gpt2() -> None:
    from embedcalc.analysis.params import count_params

    loaded = load_target(str(FIXTURES / "hf_gpt2_aliases.yaml"))
    assert loaded.user_keys["num_heads"] == "n_head"
    assert loaded.user_keys["embed_dim"] == "n_embd"
    assert count_params(loaded.config).total == 124_439_808


def test_error_names_the_alias_as_written(write_config: Write) -> None:
    data = {k: v for k, v in SMALL.items() if k not in ("embed_dim", "num_heads")}
    path = write_config({**data, "n_embd": 1000, "n_head": 12})
    with pytest.raises(ConfigError) as info:
        load_target(str(path))
    (problem,) = info.value.problems
    assert problem.path == "n_head"
    assert problem.message.startswith("n_head (12) must divide n_embd (1000)")
    assert "num_heads" not in problem.message


def test_size_error_names_the_alias_as_written(write_config: Write) -> None:
    data = {k: v for k, v in SMALL.items() if k != "num_layers"}
    path = write_config({**data, "n_layer": 0})
    with pytest.raises(ConfigError) as info:
        load_target(str(path))
    (problem,) = info.value.problems
    assert problem.path == "n_layer"
    assert "n_layer" in problem.message and "0" in problem.message


def test_alias_and_canonical_key_together_is_an_error(write_config: Write) -> None:
    path = write_config({**SMALL, "n_head": 8})
    assert problems_of(path) == [("n_head", "duplicate_key")]


# --- several problems at once ----------------------------------------------------------------------------------


def test_several_problems_reported_together() -> None:
    problems = problems_of(FIXTURES / "multi_problem.yaml")
    assert sorted(problems) == sorted(
        [
            ("dropuot", "unknown_key"),
            ("num_layers", "greater_than"),
            ("n_head", "heads_indivisible"),
            ("ffn_dim", "int_type"),
        ]
    )


def test_several_problems_on_the_command_line(run_cli: Run) -> None:
    proc = run_cli("check", str(FIXTURES / "multi_problem.yaml"))
    assert_exit3(
        proc, "4 problems", "dropuot", "did you mean 'dropout'", "num_layers", "n_head (12)", "ffn_dim", "3.0"
    )


def test_missing_required_fields_are_all_named(write_config: Write) -> None:
    problems = problems_of(write_config({"architecture": "encoder"}))
    assert sorted(problems) == sorted(
        (name, "missing") for name in ("vocab_size", "max_seq_len", "embed_dim", "num_heads", "num_layers")
    )


# --- the error matrix: exit 3, a message, never a traceback ----------------------------------------------------

BAD_FILES: list[tuple[str, str | bytes | None, tuple[str, ...]]] = [
    # (file name, content (None: do not create), words expected in stderr)
    ("malformed.yaml", "a: [1, 2\nb: 3\n", ("malformed YAML", "line")),
    ("malformed.json", '{"embed_dim": 768,', ("malformed JSON", "line 1")),
    ("empty.yaml", "", ("is empty",)),
    ("blank.yaml", "\n   \n# only a comment\n", ("mapping",)),
    ("missing.yaml", None, ("no such file",)),
    ("binary.yaml", bytes(range(256)) * 4, ("binary",)),
    ("latin1.yaml", "name: caf\xe9\n".encode("latin-1"), ("not UTF-8",)),
    ("list.yaml", "- embed_dim: 768\n- num_heads: 12\n", ("a list", "mapping")),
    ("scalar.yaml", "768\n", ("mapping",)),
    ("string.yaml", "just some words\n", ("mapping",)),
    ("list.json", "[1, 2, 3]", ("a list", "mapping")),
    ("duplicate.yaml", "embed_dim: 768\nnum_heads: 12\nembed_dim: 512\n", ("duplicate key 'embed_dim'",)),
]


@pytest.mark.parametrize(("name", "content", "words"), BAD_FILES, ids=[c[0] for c in BAD_FILES])
def test_bad_file_exits_3_without_traceback(
    cli: Any, tmp_path: Path, name: str, content: str | bytes | None, words: tuple[str, ...]
) -> None:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content, encoding="utf-8")
    assert_exit3(in_process(cli, "check", str(path)), name, *words)


@pytest.mark.parametrize("name", ["malformed.yaml", "binary.yaml", "missing.yaml", "list.yaml"])
def test_bad_file_in_a_real_process(run_cli: Run, tmp_path: Path, name: str) -> None:
    """The same as above across the process boundary: exit status 3 and no traceback on the real stderr."""
    _, content, words = next(c for c in BAD_FILES if c[0] == name)
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content, encoding="utf-8")
    assert_exit3(run_cli("check", str(path)), name, *words)


def test_directory_exits_3(cli: Any, tmp_path: Path) -> None:
    assert_exit3(in_process(cli, "check", str(tmp_path)), str(tmp_path), "directory")


def test_oversized_file_exits_3(tmp_path: Path) -> None:
    path = tmp_path / "huge.yaml"
    path.write_text("# padding\n" * (MAX_CONFIG_BYTES // 10 + 1), encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_mapping(path)
    assert info.value.code == "file_too_big"


BAD_VALUES: list[tuple[str, dict[str, Any], tuple[str, ...]]] = [
    ("float", {"num_layers": 12.0}, ("num_layers", "12.0", "without the decimal point")),
    ("float-fraction", {"num_layers": 2.5}, ("num_layers", "2.5")),
    ("bool", {"num_layers": True}, ("num_layers", "True", "boolean")),
    ("numeric-string", {"num_layers": "12"}, ("num_layers", "'12'", "without quotes")),
    ("zero", {"embed_dim": 0}, ("embed_dim", "greater than 0", "got 0")),
    ("negative", {"vocab_size": -1}, ("vocab_size", "-1")),
    ("negative-type-vocab", {"type_vocab_size": -2}, ("type_vocab_size", "-2")),
    ("null", {"num_heads": None}, ("num_heads", "null")),
    ("list", {"num_heads": [8]}, ("num_heads",)),
    ("unknown-key", {"embed_dmi": 5}, ("unknown key 'embed_dmi'", "did you mean 'embed_dim'")),
    ("bad-choice", {"activation": "swiglue"}, ("activation", "swiglue", "did you mean 'swiglu'")),
    ("bad-architecture", {"architecture": "decodr"}, ("architecture", "did you mean 'decoder'")),
    ("dropout-range", {"dropout": 1.5}, ("dropout", "1.5")),
    ("kv-heads", {"num_kv_heads": 3}, ("num_kv_heads (3) must divide num_heads (8)", "2 or 4")),
    ("rope-odd-explicit", {"position": "rope", "head_dim": 63}, ("head_dim (63)", "rope", "62 or 64")),
    ("rope-odd-implied", {"position": "rope", "embed_dim": 504}, ("num_heads", "63", "rope", "even")),
    ("pooler-decoder", {"pooler": True}, ("pooler", "encoder")),
    ("decoder-layers-decoder", {"num_decoder_layers": 3}, ("num_decoder_layers", "encoder-decoder")),
]


@pytest.mark.parametrize(("data", "words"), [c[1:] for c in BAD_VALUES], ids=[c[0] for c in BAD_VALUES])
def test_bad_value_exits_3_without_traceback(
    cli: Any, write_config: Write, data: dict[str, Any], words: tuple[str, ...]
) -> None:
    path = write_config({**SMALL, **data})
    assert_exit3(in_process(cli, "check", str(path)), "1 problem", *words)


@pytest.mark.parametrize(
    ("data", "path", "code"),
    [
        ({"num_layers": 12.0}, "num_layers", "int_type"),
        ({"num_layers": True}, "num_layers", "int_type"),
        ({"num_layers": "12"}, "num_layers", "int_type"),
        ({"embed_dim": 0}, "embed_dim", "greater_than"),
        ({"vocab_size": -1}, "vocab_size", "greater_than"),
        ({"num_kv_heads": 3}, "num_kv_heads", "kv_heads_indivisible"),
        ({"position": "rope", "head_dim": 63}, "head_dim", "rope_head_dim_odd"),
        ({"position": "rope", "embed_dim": 504}, "num_heads", "rope_head_dim_odd"),
        ({"pooler": True}, "pooler", "pooler_needs_encoder"),
        ({"num_decoder_layers": 3}, "num_decoder_layers", "decoder_layers_need_encoder_decoder"),
        (
            {"position": "relative", "relative_attention_bias": False},
            "relative_attention_bias",
            "relative_needs_bias",
        ),
        (
            {"architecture": "decoder", "disentangled": {"span": 8}},
            "disentangled",
            "disentangled_unsupported",
        ),
        ({"embed_dmi": 5}, "embed_dmi", "unknown_key"),
    ],
)
def test_problem_path_and_code(write_config: Write, data: dict[str, Any], path: str, code: str) -> None:
    assert problems_of(write_config({**SMALL, **data})) == [(path, code)]


def test_json_values_are_checked_the_same_way(write_config: Write) -> None:
    path = write_config({**SMALL, "num_layers": 12.0, "bias": "yes"}, name="model.json")
    assert sorted(problems_of(path)) == [("bias", "bool_type"), ("num_layers", "int_type")]


def test_unknown_preset_did_you_mean(run_cli: Run) -> None:
    proc = run_cli("check", "bert-bsae")
    assert_exit3(proc, "unknown preset 'bert-bsae'", "did you mean 'bert-base'")
    assert problems_of("bert-bsae") == [("bert-bsae", "unknown_preset")]


def test_alias_bomb_is_refused_fast(run_cli: Run) -> None:
    path = FIXTURES / "alias_bomb.yaml"
    # the bomb expands to billions of nodes: a loader that followed the aliases would not finish (or run out of
    # memory) in any bound; the run's timeout is the check, not a wall-clock figure (the machines are shared)
    with pytest.raises(ConfigError):
        load_mapping(path)
    proc = run_cli("check", str(path), timeout=30)
    assert_exit3(proc, "alias_bomb.yaml", "YAML")


def test_single_anchor_is_refused_too(write_config: Write) -> None:
    text = "architecture: decoder\nvocab_size: &v 1024\nmax_seq_len: *v\nembed_dim: 512\nnum_heads: 8\nnum_layers: 2\n"
    with pytest.raises(ConfigError) as info:
        load_target(str(write_config(text)))
    assert info.value.code == "malformed_yaml"


def test_non_string_key(write_config: Write) -> None:
    text = yaml.safe_dump(SMALL) + "1: 2\n"
    assert problems_of(write_config(text)) == [("1", "key_not_string")]


# --- --set overrides ---------------------------------------------------------------------------------------


def test_set_override_valid() -> None:
    config = load_target("bert-base", ["num_heads=16", "n_layer=6", "position=rope"]).config
    assert (config.num_heads, config.num_layers, config.position) == (16, 6, "rope")
    assert config.resolved_head_dim == 48


def test_set_override_is_validated_and_named(cli: Any) -> None:
    assert problems_of("bert-base", ["num_heads=7"]) == [("--set num_heads", "heads_indivisible")]
    assert_exit3(
        in_process(cli, "check", "bert-base", "--set", "num_heads=7"), "--set num_heads (7)", "must divide"
    )


def test_set_override_invalid_value(cli: Any) -> None:
    assert problems_of("bert-base", ["num_heads=abc"]) == [("--set num_heads", "int_type")]
    assert problems_of("bert-base", ["num_heads=12.0"]) == [("--set num_heads", "int_type")]
    assert_exit3(in_process(cli, "check", "bert-base", "--set", "num_heads=abc"), "--set num_heads", "'abc'")


def test_set_override_unknown_key(cli: Any) -> None:
    assert problems_of("bert-base", ["num_hedas=12"]) == [("--set num_hedas", "unknown_key")]
    assert_exit3(in_process(cli, "check", "bert-base", "--set", "num_hedas=12"), "did you mean 'num_heads'")


def test_set_override_without_equals(cli: Any) -> None:
    result = in_process(cli, "check", "bert-base", "--set", "num_heads")
    assert result.returncode == 2  # a malformed flag value is a usage error (DESIGN §6)
    assert "key=value" in result.stderr and "Traceback" not in result.stderr


def test_set_on_a_file_target(write_config: Write) -> None:
    config = load_target(str(write_config(SMALL)), ["num_kv_heads=2", "activation=swiglu"]).config
    assert config.resolved_kv_heads == 2 and config.gated


# --- workload checks ------------------------------------------------------------------------------------------


def test_seq_len_over_learned_positions_is_an_error(run_cli: Run) -> None:
    proc = run_cli("analyze", "bert-base", "--seq-len", "513")
    assert_exit3(proc, "--seq-len 513", "max_seq_len 512", "--set max_seq_len=513")
    ok = run_cli("analyze", "bert-base", "--seq-len", "512", "--format", "json")
    assert ok.returncode == 0
    assert json.loads(ok.stdout)["workload"]["seq_len"] == 512


@pytest.mark.parametrize(
    ("target", "overrides", "position"),
    [
        ("transformer-base", [], "sinusoidal"),
        ("gpt2", ["--set", "position=rope"], "rope"),
    ],
)
def test_seq_len_over_context_is_a_warning_otherwise(
    cli: Any, target: str, overrides: list[str], position: str
) -> None:
    proc = in_process(cli, "analyze", target, "--seq-len", "4096", "--format", "json", *overrides)
    assert proc.returncode == 0, proc.stderr
    assert "embedcalc: warning:" in proc.stderr and "extrapolate" in proc.stderr and position in proc.stderr
    data = json.loads(proc.stdout)
    assert data["status"] == "ok"
    codes = [w["code"] for w in data["results"][0]["warnings"]]
    assert "seq_len_extrapolates" in codes


def test_tgt_len_over_learned_positions_is_an_error(write_config: Write) -> None:
    from embedcalc.analysis.workload import Workload
    from embedcalc.config.advisories import workload_problems

    config = ModelConfig(
        architecture="encoder-decoder",
        vocab_size=100,
        max_seq_len=64,
        embed_dim=64,
        num_heads=4,
        num_layers=1,
    )
    errors, _ = workload_problems(config, Workload(seq_len=64, tgt_len=65))
    assert [(p.path, p.code) for p in errors] == [("--tgt-len", "seq_len_over_context")]


# --- warnings (valid configs, exit 0) ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "code"),
    [
        ({"embed_dim": 500, "num_heads": 5}, "head_dim_unaligned"),  # head_dim 100
        ({"embed_dim": 4096, "num_heads": 8}, "head_dim_large"),  # head_dim 512
        ({"vocab_size": 1000}, "vocab_unaligned"),
        ({"ffn_dim": 256}, "ffn_ratio_unusual"),  # ratio 0.5
    ],
)
def test_warnings_exit_0_on_stderr(cli: Any, write_config: Write, data: dict[str, Any], code: str) -> None:
    path = write_config({**SMALL, **data})
    result = cli("check", str(path), "--format", "json")
    assert result.exit_code == 0, result.stderr
    assert "embedcalc: warning:" in result.stderr
    out = json.loads(result.stdout)
    assert code in [w["code"] for w in out["results"][0]["warnings"]]


def test_clean_config_has_no_warnings(cli: Any) -> None:
    result = cli("check", str(FIXTURES / "small_decoder.json"))
    assert result.exit_code == 0
    assert result.stderr == ""
    assert "valid" in result.stdout


# --- schema documentation -------------------------------------------------------------------------------------


def test_every_field_has_a_description() -> None:
    missing = [
        name
        for name, field in ModelConfig.model_fields.items()
        if not (field.description and field.description.strip())
    ]
    assert missing == []


def test_schema_is_strict_and_frozen() -> None:
    assert ModelConfig.model_config.get("extra") == "forbid"
    assert ModelConfig.model_config.get("frozen") is True
    config = ModelConfig.model_validate(SMALL)
    with pytest.raises(ValidationError):
        config.embed_dim = 1024  # type: ignore[misc]


# --- edge cases that once failed (found while writing these tests) -------------------------------------------


def test_duplicate_keys_in_json_are_refused(cli: Any, tmp_path: Path) -> None:
    path = tmp_path / "dup.json"
    path.write_text(
        '{"architecture": "decoder", "vocab_size": 1024, "max_seq_len": 512, "embed_dim": 512, '
        '"embed_dim": 768, "num_heads": 8, "num_layers": 2}',
        encoding="utf-8",
    )
    assert_exit3(in_process(cli, "check", str(path)), "duplicate", "embed_dim")


def test_deeply_nested_yaml_exits_3(cli: Any, tmp_path: Path) -> None:
    path = tmp_path / "deep.yaml"
    path.write_text("a: " + "[" * 5000 + "]" * 5000 + "\n", encoding="utf-8")
    assert_exit3(in_process(cli, "check", str(path)), "deep.yaml")


def test_deeply_nested_json_exits_3(cli: Any, tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    path.write_text('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}", encoding="utf-8")
    assert_exit3(in_process(cli, "check", str(path)), "deep.json")


@pytest.mark.parametrize("name", ["digits.yaml", "digits.json"])
def test_integer_over_python_digit_limit_exits_3(cli: Any, tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    text = (
        ('{"embed_dim": ' + "9" * 5000 + "}") if name.endswith(".json") else "embed_dim: " + "9" * 5000 + "\n"
    )
    path.write_text(text, encoding="utf-8")
    assert_exit3(in_process(cli, "check", str(path)), name, "embed_dim")


def test_huge_indivisible_embed_dim_fails_fast(run_cli: Run, write_config: Write) -> None:
    path = write_config({**SMALL, "embed_dim": 10**18, "num_heads": 7})
    try:
        proc = run_cli("check", str(path), timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("embedcalc check did not finish within 30 s (an algorithmic blow-up, not slowness)")
    assert_exit3(proc, "num_heads (7)")


def test_astronomical_but_valid_shape_renders(cli: Any, write_config: Write) -> None:
    path = write_config({**SMALL, "embed_dim": 10**200, "num_heads": 1})
    for args in (["check", str(path)], ["analyze", str(path)]):
        proc = in_process(cli, *args)
        assert proc.exception is None, repr(proc.exception)
        assert proc.returncode in (0, 3), proc.stderr
    proc = in_process(cli, "analyze", str(path), "--format", "json")
    if proc.returncode == 0:  # if accepted, counted exactly
        d = 10**200
        total = json.loads(proc.stdout)["results"][0]["params"]["total"]
        assert total == 1024 * d + 512 * d + 2 * (12 * d * d + 13 * d) + 2 * d


def test_huge_kv_heads_message_is_fast(cli: Any, write_config: Write) -> None:
    path = write_config({**SMALL, "embed_dim": 10**18, "num_heads": 10**18, "num_kv_heads": 7})
    start = time.perf_counter()
    assert_exit3(in_process(cli, "check", str(path)), "num_kv_heads (7)")
    assert time.perf_counter() - start < 3


def test_comment_only_file_is_called_empty(cli: Any, write_config: Write) -> None:
    path = write_config("# a template, nothing filled in yet\n\n", name="template.yaml")
    proc = in_process(cli, "check", str(path))
    assert_exit3(proc, "template.yaml", "empty")
    assert "NoneType" not in proc.stderr


def test_preset_name_is_not_shadowed_by_a_directory(cli: Any, in_tmp_cwd: Path) -> None:
    """A folder named like a preset (a downloaded ``gpt2/`` checkpoint, say) must not hide the preset."""
    (in_tmp_cwd / "gpt2").mkdir()
    proc = in_process(cli, "check", "gpt2", "--format", "json")
    assert proc.exception is None
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["results"][0]["params"]["total"] == 124_439_808


@pytest.mark.parametrize(
    "text",
    [
        "'foo[/]': 1\n",  # unknown key: the message quotes it
        "activation: '[/]'\n",  # bad choice: the message quotes the value
    ],
)
def test_user_text_in_messages_is_not_rich_markup(cli: Any, write_config: Write, text: str) -> None:
    path = write_config(yaml.safe_dump(SMALL) + text)
    proc = in_process(cli, "check", str(path))
    assert_exit3(proc, "[/]")


def test_bracketed_file_name_in_error_message(cli: Any, tmp_path: Path) -> None:
    path = tmp_path / "model [draft].yaml"
    path.write_text(yaml.safe_dump({**SMALL, "num_heads": 7}), encoding="utf-8")
    assert_exit3(in_process(cli, "check", str(path)), "model [draft].yaml")


def test_a_shared_expert_gate_needs_shared_experts(write_config: Any, cli: Any) -> None:
    path = write_config({"architecture": "decoder", "vocab_size": 64, "max_seq_len": 32, "embed_dim": 16,
                         "num_heads": 2, "num_layers": 1,
                         "ffn": {"kind": "moe", "num_experts": 4, "top_k": 2, "shared_expert_gate": True}})  # fmt: skip
    result = cli("check", str(path))
    assert result.exit_code == 3
    assert "shared_expert_gate" in result.stderr and "num_shared_experts" in result.stderr


def test_set_reaches_inside_the_layer_model(cli: Any) -> None:
    result = cli("analyze", "mixtral-8x7b", "--set", "ffn.top_k=1", "--format", "json")
    assert result.exit_code == 0, result.stderr
    params = json.loads(result.stdout)["results"][0]["params"]
    assert params["total"] == 46_702_792_704  # all experts stay
    per_expert = 3 * 4096 * 14336 * 32  # gate, up, down in every one of the 32 layers
    assert params["active"] == 12_879_925_248 - per_expert
    bad = cli("check", "mixtral-8x7b", "--set", "ffn.top_k=9")
    assert bad.exit_code == 3 and "--set ffn.top_k: top_k (9) cannot exceed num_experts (8)" in bad.stderr
    window = cli(
        "check", "gemma-2-9b", "--set", "blocks.local.attention.sliding_window=1024", "--format", "json"
    )
    assert window.exit_code == 0, window.stderr
    unknown = cli("check", "gpt2", "--set", "attention.bogus=1")
    assert unknown.exit_code == 3 and "--set attention.bogus" in unknown.stderr


@pytest.mark.parametrize("mode", ["python", "json"])
def test_every_preset_means_the_same_after_a_dump_and_a_load(mode: str) -> None:
    """A block variant overrides only the fields it sets: a dump that wrote its defaults too would change it."""
    from embedcalc.config.schema import ModelConfig
    from embedcalc.sources.presets import preset_names

    for name in preset_names():
        config = load_target(name).config
        again = ModelConfig.model_validate(config.model_dump(mode=mode))
        assert again.named_blocks == config.named_blocks, name
        stacks = ("encoder", "decoder") if config.architecture == "encoder-decoder" else (
            "encoder" if config.architecture == "encoder" else "decoder",)  # fmt: skip
        for stack in stacks:
            assert again.stack_plan(stack) == config.stack_plan(stack), name


def test_unknown_fields_of_the_layer_model_get_a_did_you_mean(cli: Any, write_config: Any) -> None:
    nested = cli("check", "mixtral-8x7b", "--set", "ffn.topk=2")
    assert nested.exit_code == 3 and "did you mean 'top_k'?" in nested.stderr
    flat = cli("check", "mixtral-8x7b", "--set", "top_k=2")
    assert flat.exit_code == 3 and "did you mean 'ffn.top_k'?" in flat.stderr
    path = write_config(
        {
            "architecture": "decoder",
            "vocab_size": 100,
            "max_seq_len": 64,
            "embed_dim": 64,
            "num_heads": 4,
            "num_layers": 2,
            "blocks": {"local": {"attention": {"sliding_widow": 8}}},
        }
    )
    in_file = cli("check", str(path))
    assert in_file.exit_code == 3 and "blocks.local.attention.sliding_widow" in in_file.stderr
    assert "did you mean 'sliding_window'?" in in_file.stderr


def test_xielu_is_a_dense_ffn_activation() -> None:
    """xIELU learns its scalars once per dense FFN (Apertus); experts carrying it are refused with the field."""
    from pydantic import ValidationError

    base = {"architecture": "decoder", "vocab_size": 64, "max_seq_len": 16, "embed_dim": 16, "num_heads": 2,
            "num_layers": 2, "activation": "xielu"}  # fmt: skip
    moe = {"kind": "moe", "num_experts": 4, "top_k": 2}
    for extra, where in (({"ffn": moe}, "ffn"), ({"blocks": {"e": {"ffn": moe}}, "layers": [{"pattern": ["e"],
                         "repeat": 2}]}, "blocks")):  # fmt: skip
        with pytest.raises(ValidationError, match="xielu") as info:
            ModelConfig.model_validate(base | extra)
        assert info.value.errors()[0]["loc"][0] == where
        assert info.value.errors()[0]["type"] == "xielu_moe"
