"""The command line: exit codes (DESIGN.md §6), streams (results on stdout; warnings and errors on stderr), the
JSON envelope (§5), the other output formats, and that the analytic commands never import torch.
"""

from __future__ import annotations

import ast
import csv
import io
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from expected_presets import PRESETS
from paths import FIXTURES, ROOT, SCRIPTS

from embedcalc.analysis.heads import divisors
from embedcalc.cli.common import handle_errors
from embedcalc.config.schema import ModelConfig
from embedcalc.errors import ExitCode

Run = Callable[..., subprocess.CompletedProcess[str]]

INVALID = str(FIXTURES / "heads_1000_12.yaml")


def stderr_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


# --- exit codes -------------------------------------------------------------------------------------------------


def test_exit_codes_are_named() -> None:
    assert (
        ExitCode.OK,
        ExitCode.RUNTIME,
        ExitCode.USAGE,
        ExitCode.INVALID_CONFIG,
        ExitCode.ENVIRONMENT,
        ExitCode.OVER_BUDGET,
        ExitCode.INTERRUPTED,
    ) == (0, 1, 2, 3, 4, 5, 130)


@pytest.mark.parametrize(
    "args",
    [
        ["analyze", "bert-base"],
        [
            "analyze",
            "transformer-base",
            "--seq-len",
            "256",
            "--tgt-len",
            "64",
            "--mode",
            "training",
            "--dtype",
            "bfloat16",
        ],
        ["analyze", "gpt2", "--attention", "eager", "--dtype", "int4"],
        ["check", "bert-base", "gpt2"],
        ["compare", "bert-base", "gpt2"],
        ["heads", "768"],
        ["schema"],
        ["presets"],
        ["presets", "show", "gpt2"],
        ["--version"],
        ["--help"],
    ],
)
def test_exit_0(cli: Any, args: list[str]) -> None:
    result = cli(*args)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip()


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["analyze", "bert-base", "--batch-size", "0"], "--batch-size"),
        (["analyze", "bert-base", "--seq-len", "-5"], "--seq-len"),
        (["analyze", "bert-base", "--format", "xml"], "xml"),
        (["analyze", "bert-base", "--format", "csv"], "csv"),  # csv/markdown are compare-only
        (["compare", "bert-base", "gpt2", "--format", "xml"], "xml"),
        (["analyze", "bert-base", "--dtype", "float8"], "float8"),
        (["analyze", "bert-base", "--no-such-flag"], "--no-such-flag"),
        (["analyze"], "target"),
        (["heads", "0"], "embed_dim"),
        (["heads", "abc"], "embed_dim"),
        (["nonsense-command"], "nonsense-command"),
    ],
)
def test_exit_2_bad_flag(cli: Any, args: list[str], words: str) -> None:
    result = cli(*args)
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    assert result.stdout == ""
    assert words in result.stderr


def test_exit_2_in_a_real_process(run_cli: Run) -> None:
    proc = run_cli("analyze", "bert-base", "--batch-size", "0", "--format", "json")
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "--batch-size" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["check", INVALID],
        ["analyze", INVALID],
        ["compare", "bert-base", INVALID],
        ["check", "bert-base", INVALID],
        ["analyze", "no-such-preset"],
        ["presets", "show", "bert-bse"],
        ["analyze", "bert-base", "--set", "num_heads=5"],
        ["analyze", "bert-base", "--seq-len", "1024"],
    ],
)
def test_exit_3_invalid_config(cli: Any, args: list[str]) -> None:
    result = cli(*args)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 3, (result.exit_code, result.stderr)
    assert "embedcalc: error:" in result.stderr
    assert "embedcalc: error:" not in result.stdout


def test_keyboard_interrupt_exits_130(capsys: pytest.CaptureFixture[str]) -> None:
    @handle_errors("test")
    def interrupted() -> None:
        raise KeyboardInterrupt

    with pytest.raises(typer.Exit) as info:
        interrupted()
    assert info.value.exit_code == 130


def test_debug_flag_shows_the_traceback(run_cli: Run) -> None:
    quiet = run_cli("analyze", "missing-file.yaml")
    assert quiet.returncode == 3 and "Traceback" not in quiet.stderr
    loud = run_cli("--debug", "analyze", "missing-file.yaml")
    assert "Traceback" in loud.stderr
    assert "ConfigError" in loud.stderr


# --- streams ----------------------------------------------------------------------------------------------------


def test_json_on_stdout_warnings_on_stderr_real_process(run_cli: Run) -> None:
    # a chosen size: warned
    proc = run_cli("analyze", "bert-base", "--set", "vocab_size=30522", "--format", "json")
    assert proc.returncode == 0
    data = json.loads(proc.stdout)  # the warning did not leak into stdout
    assert data["status"] == "ok"
    assert data["results"][0]["params"]["total"] == 109_482_240
    lines = stderr_lines(proc.stderr)
    assert lines and all(line.startswith("embedcalc: warning:") for line in lines)
    assert "vocab_size" in proc.stderr
    assert [w["code"] for w in data["results"][0]["warnings"]] == ["vocab_unaligned"]


def test_table_on_stdout_warnings_on_stderr_real_process(run_cli: Run) -> None:
    proc = run_cli("analyze", "bert-base", "--set", "vocab_size=30522")
    assert proc.returncode == 0
    assert "109,482,240" in proc.stdout
    assert "22,348,431,360" in proc.stdout
    assert "warning" not in proc.stdout
    lines = stderr_lines(proc.stderr)
    assert lines and all(line.startswith("embedcalc: warning:") for line in lines)
    assert "109,482,240" not in proc.stderr


def test_error_on_stderr_nothing_on_stdout_real_process(run_cli: Run) -> None:
    proc = run_cli("analyze", INVALID)
    assert proc.returncode == 3
    assert proc.stdout == ""
    assert proc.stderr.startswith("embedcalc: error:")
    assert "83.33" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("command", [["analyze", INVALID], ["compare", "gpt2", INVALID], ["check", INVALID]])
def test_json_error_envelope(run_cli: Run, command: list[str]) -> None:
    proc = run_cli(*command, "--format", "json")
    assert proc.returncode == 3
    data = json.loads(proc.stdout)
    assert data["schema_version"] == 1
    assert data["command"] == command[0]
    assert data["status"] == "error"
    assert data["problems"]
    for problem in data["problems"]:
        assert set(problem) == {"path", "message", "code"}
    (problem,) = data["problems"]
    assert problem["path"].endswith("num_heads")
    assert problem["code"] == "heads_indivisible"
    assert "83.33" in problem["message"]
    assert "embedcalc: error:" in proc.stderr
    for line in stderr_lines(proc.stderr):  # warnings, the error and its indented detail; no JSON
        assert line.startswith(("embedcalc: warning:", "embedcalc: error:", "  ")), line
    assert '"status"' not in proc.stderr


def test_json_error_envelope_for_a_bad_file(cli: Any, tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("a: [1,\n", encoding="utf-8")
    result = cli("analyze", str(path), "--format", "json")
    assert result.exit_code == 3
    data = json.loads(result.stdout)
    assert data["status"] == "error"
    assert data["results"] == []
    assert data["problems"][0]["code"] == "malformed_yaml"


def test_check_several_targets_one_invalid(cli: Any) -> None:
    result = cli("check", "bert-base", INVALID, "gpt2")
    assert result.exit_code == 3
    assert "bert-base: valid" in result.stdout and "gpt2: valid" in result.stdout
    assert "83.33" in result.stderr and "83.33" not in result.stdout

    result = cli("check", "bert-base", INVALID, "--format", "json")
    assert result.exit_code == 3
    data = json.loads(result.stdout)
    assert data["status"] == "error"
    assert [(r["target"], r["valid"]) for r in data["results"]] == [("bert-base", True), (INVALID, False)]
    assert data["problems"][0]["code"] == "heads_indivisible"


def test_check_prints_derived_values(cli: Any) -> None:
    result = cli("check", "bert-base", "--set", "num_kv_heads=4", "--format", "json")
    assert result.exit_code == 0
    derived = json.loads(result.stdout)["results"][0]["derived"]
    assert (derived["head_dim"], derived["kv_groups"], derived["ffn_ratio"]) == (64, 3, 4.0)
    table = cli("check", "bert-base")
    for word in ("head_dim", "64", "ffn_ratio", "4.0", "kv_groups", "109,482,240"):
        assert word in table.stdout


def test_compare_with_one_invalid_target(cli: Any) -> None:
    result = cli("compare", "bert-base", INVALID, "--format", "json")
    assert result.exit_code == 3
    data = json.loads(result.stdout)
    assert data["status"] == "error"
    assert data["problems"][0]["path"] == f"{INVALID}: num_heads"


# --- compare formats ---------------------------------------------------------------------------------------------


def test_compare_json_matches_analyze(cli: Any) -> None:
    result = cli("compare", "bert-base", "gpt2", "transformer-base", "--format", "json")
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert data["command"] == "compare"
    totals = {r["target"]: r["params"]["total"] for r in data["results"]}
    assert totals == {"bert-base": 109_482_240, "gpt2": 124_439_808, "transformer-base": 63_082_496}
    single = json.loads(cli("analyze", "gpt2", "--format", "json").stdout)["results"][0]
    assert data["results"][1] == single


def test_compare_csv(cli: Any) -> None:
    result = cli("compare", "bert-base", "gpt2", "--format", "csv")
    assert result.exit_code == 0
    rows = list(csv.reader(io.StringIO(result.stdout)))
    assert rows[0] == ["quantity", "bert-base", "gpt2"]
    by_label = {row[0]: row[1:] for row in rows[1:]}
    assert by_label["params"] == ["109482240", "124439808"]
    assert by_label["forward FLOPs"] == ["22348431360", "32228179968"]
    assert by_label["crossover seq_len n*"] == ["4608", "4608"]
    assert by_label["forward FLOPs, causal"][0] == ""  # an encoder has no causal count
    assert all(len(row) == 3 for row in rows)
    assert "warning" not in result.stdout


def test_compare_markdown(cli: Any) -> None:
    result = cli("compare", "bert-base", "gpt2", "--format", "markdown")
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0] == "| quantity | bert-base | gpt2 |"
    assert set(lines[1]) <= set("|-: ") and lines[1].count("|") == 4
    assert all(line.startswith("|") and line.endswith("|") and line.count("|") == 4 for line in lines)
    assert "| params | 109,482,240 | 124,439,808 |" in lines


def test_compare_table(cli: Any) -> None:
    result = cli("compare", "bert-base", "bert-large", "transformer-base")
    assert result.exit_code == 0
    for word in ("bert-base", "bert-large", "transformer-base", "109,482,240", "335,141,888", "63,082,496"):
        assert word in result.stdout


def test_set_applies_to_every_compare_target(cli: Any) -> None:
    result = cli("compare", "bert-base", "gpt2", "--set", "num_layers=1", "--format", "json")
    data = json.loads(result.stdout)
    assert [r["config"]["num_layers"] for r in data["results"]] == [1, 1]


# --- analyze output ---------------------------------------------------------------------------------------------


def test_analyze_table_shows_convention_and_score_term(cli: Any) -> None:
    result = cli("analyze", "bert-base")
    out = result.stdout
    for word in (
        "Parameters",
        "Forward FLOPs",
        "Memory",
        "★",
        "2 per multiply-accumulate",
        "4,608",
        "417.64 MiB",
        "training step",
    ):
        assert word in out, word


def test_analyze_workload_in_json(cli: Any) -> None:
    result = cli(
        "analyze",
        "transformer-base",
        "--batch-size",
        "4",
        "--seq-len",
        "64",
        "--tgt-len",
        "32",
        "--dtype",
        "bfloat16",
        "--mode",
        "training",
        "--format",
        "json",
    )
    data = json.loads(result.stdout)
    expected = {
        "batch_size": 4,
        "seq_len": 64,
        "tgt_len": 32,
        "dtype": "bf16",
        "mode": "training",
        "attention": "sdpa",
    }
    assert {k: data["workload"][k] for k in expected} == expected
    memory = data["results"][0]["memory"]
    assert memory["optimizer_bytes"] == 12 * 63_082_496


def test_tgt_len_on_a_decoder_warns(cli: Any) -> None:
    result = cli("analyze", "gpt2", "--tgt-len", "64", "--format", "json")
    assert result.exit_code == 0
    assert "--tgt-len" in result.stderr
    assert "tgt_len_ignored" in [w["code"] for w in json.loads(result.stdout)["results"][0]["warnings"]]


# --- heads, schema, presets -------------------------------------------------------------------------------------


def test_heads_768(cli: Any) -> None:
    result = cli("heads", "768", "--format", "json")
    assert result.exit_code == 0
    choices = json.loads(result.stdout)["results"][0]["choices"]
    assert [c["num_heads"] for c in choices] == divisors(768)
    by_heads = {c["num_heads"]: c for c in choices}
    assert by_heads[12]["head_dim"] == 64 and by_heads[12]["usual"]
    assert by_heads[6]["head_dim"] == 128 and by_heads[6]["usual"]
    assert not by_heads[1]["flash_ok"]  # head_dim 768 > 256
    table = cli("heads", "768").stdout
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in table.splitlines() if "│" in line]
    assert ["12", "64"] in [row[:2] for row in rows]
    assert len([row for row in rows if row[0].isdigit()]) == len(divisors(768))


def test_heads_prime(cli: Any) -> None:
    choices = json.loads(cli("heads", "997", "--format", "json").stdout)["results"][0]["choices"]
    assert [c["num_heads"] for c in choices] == [1, 997]


def test_schema(cli: Any) -> None:
    result = cli("schema")
    assert result.exit_code == 0
    schema = json.loads(result.stdout)
    assert {"embed_dim", "num_heads"} <= set(schema["properties"])
    assert set(schema["properties"]) == set(ModelConfig.model_fields)
    assert schema["additionalProperties"] is False
    assert {"architecture", "embed_dim", "num_heads", "num_layers", "vocab_size"} <= set(schema["required"])
    assert all(prop.get("description") for prop in schema["properties"].values())


def test_presets_list_json(cli: Any) -> None:
    result = cli("presets", "--format", "json")
    assert result.exit_code == 0
    rows = json.loads(result.stdout)["results"]
    assert [r["name"] for r in rows] == sorted(PRESETS)
    params = {r["name"]: r["params"] for r in rows}
    assert params["bert-base"] == 109_482_240 and params["transformer-big"] == 214_245_376


def test_presets_list_table_at_120_columns(run_cli: Run) -> None:
    proc = run_cli("presets")  # run_cli sets COLUMNS=120
    assert proc.returncode == 0
    for name in PRESETS:
        assert name in proc.stdout, name


def test_presets_list_table_without_columns(run_cli: Run) -> None:
    """Piped output with no COLUMNS (rich would assume 80) must not truncate names or counts."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env.update(NO_COLOR="1", TERM="dumb")
    proc = run_cli("presets", env=env)
    assert proc.returncode == 0
    for name in PRESETS:
        assert name in proc.stdout, name
    assert "109,482,240" in proc.stdout


@pytest.mark.parametrize("name", PRESETS)
def test_presets_show_prints_yaml_that_loads(cli: Any, name: str) -> None:
    result = cli("presets", "show", name)
    assert result.exit_code == 0
    assert result.stdout.startswith("#")  # the sources come first, as comments
    data = yaml.safe_load(result.stdout)
    config = ModelConfig.model_validate(data)
    assert config.name == name
    as_json = json.loads(cli("presets", "show", name, "--format", "json").stdout)["results"][0]["config"]
    assert ModelConfig.model_validate(as_json) == config


def test_presets_show_unknown(cli: Any) -> None:
    result = cli("presets", "show", "gtp2")
    assert result.exit_code == 3
    assert "did you mean 'gpt2'" in result.stderr


@pytest.mark.parametrize("command", [["check"], ["analyze"], ["compare", "gpt2"]])
def test_bracketed_file_name_shown_verbatim(cli: Any, in_tmp_cwd: Path, command: list[str]) -> None:
    path = Path("m [draft].yaml")  # relative and short, so that no title wraps it
    path.write_text(
        yaml.safe_dump(
            {
                "architecture": "decoder",
                "vocab_size": 1024,
                "max_seq_len": 512,
                "embed_dim": 512,
                "num_heads": 8,
                "num_layers": 2,
            }
        ),
        encoding="utf-8",
    )
    result = cli(*command, str(path))
    assert result.exit_code == 0, result.stderr
    assert "[draft]" in result.stdout


def test_heads_of_a_huge_embed_dim_is_fast(run_cli: Run) -> None:
    try:
        proc = run_cli("heads", str(10**18), "--format", "json", timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail(
            "embedcalc heads 10**18 did not finish within 30 s (an algorithmic blow-up, not slowness)"
        )
    assert proc.returncode == 0
    choices = json.loads(proc.stdout)["results"][0]["choices"]
    assert len(choices) == 19 * 19  # 10^18 = 2^18 5^18


# --- torch is never imported by the analytic commands -----------------------------------------------------------

NO_TORCH_CHECK = SCRIPTS / "no_torch_check.py"


def test_analytic_commands_never_import_torch(tmp_path: Path) -> None:
    """Every analytic command (the list .ci/run also runs in its venv without torch) exits 0 with `import torch`
    failing as it does without torch, and none asks for torch (issue 24: `analyze gpt2 --tp 2` did)."""
    proc = subprocess.run([sys.executable, str(NO_TORCH_CHECK), "--block-torch"], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path, env={**os.environ, "COLUMNS": "100"})  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "0 failures" in proc.stderr


def test_help_imports_no_torch_importtime() -> None:
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "embedcalc", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0
    imported = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if "|" in line]
    assert "embedcalc.cli.app" in imported
    assert not [m for m in imported if m.split(".")[0] == "torch"]


# The modules `analyze PRESET --format json` imports (issue 22, start-up: its import work is what the command costs
# beyond its dependencies). A module joining this path is a deliberate choice: add it here. The HF readers, the
# device catalogue, the roofline, plotting, explain, render (rich) and numpy stay off it, and so does the config
# schema (pydantic's model machinery): a shipped preset is built as its record (config/record_base.py).
ANALYZE_PRESET_MODULES = frozenset({
    "embedcalc", "embedcalc.analysis", "embedcalc.analysis.altup", "embedcalc.analysis.attention",
    "embedcalc.analysis.breakdown", "embedcalc.analysis.budget", "embedcalc.analysis.buffers",
    "embedcalc.analysis.checked", "embedcalc.analysis.compressed", "embedcalc.analysis.hyper",
    "embedcalc.analysis.indexers", "embedcalc.analysis.comm", "embedcalc.analysis.comm.volumes",
    "embedcalc.analysis.crossover", "embedcalc.analysis.drafter",
    "embedcalc.analysis.elementwise", "embedcalc.analysis.flops", "embedcalc.analysis.memory",
    "embedcalc.analysis.memory.disentangled", "embedcalc.analysis.memory.estimate",
    "embedcalc.analysis.memory.inference", "embedcalc.analysis.memory.training", "embedcalc.analysis.mixers",
    "embedcalc.analysis.parallel", "embedcalc.analysis.params", "embedcalc.analysis.report",
    "embedcalc.analysis.structure", "embedcalc.analysis.tensor", "embedcalc.analysis.workload", "embedcalc.api",
    "embedcalc.api.analyze", "embedcalc.api.load", "embedcalc.api.results", "embedcalc.api.timing",
    "embedcalc.api.workload", "embedcalc.cli", "embedcalc.cli.analyze", "embedcalc.cli.app", "embedcalc.cli.common",
    "embedcalc.cli.hardware_options", "embedcalc.cli.options", "embedcalc.cli.output",
    "embedcalc.cli.serving_options", "embedcalc.cli.finetune_options", "embedcalc.cli.startup",
    "embedcalc.cli.workload_options", "embedcalc.config",
    "embedcalc.config.advisories",
    "embedcalc.config.altup", "embedcalc.config.hyper",
    "embedcalc.config.config_fields", "embedcalc.config.dtypes", "embedcalc.config.fields",
    "embedcalc.config.kinds", "embedcalc.config.layer_plan", "embedcalc.config.limits", "embedcalc.config.mixer_plan",
    "embedcalc.config.problems", "embedcalc.config.record_base", "embedcalc.config.records",
    "embedcalc.config.resolved", "embedcalc.config.spec_shapes", "embedcalc.errors", "embedcalc.sources",
    "embedcalc.sources.aliases", "embedcalc.sources.hub", "embedcalc.sources.loading", "embedcalc.sources.parsing",
    "embedcalc.sources.presets", "embedcalc.sources.reading", "embedcalc.units",
})  # fmt: skip


LIST_MODULES_AT_EXIT = (  # python -c ... LISTING ARGS...: run `embedcalc ARGS...`, write sys.modules to LISTING
    "import atexit, json, sys\n"
    "listing = sys.argv[1]\n"
    "atexit.register(lambda: open(listing, 'w').write(json.dumps(sorted(sys.modules))))\n"
    "sys.argv = ['embedcalc', *sys.argv[2:]]\n"
    "from embedcalc.cli.app import main\n"
    "main()\n"
)


def test_analyze_a_preset_imports_only_its_own_path(tmp_path: Path) -> None:
    listing = tmp_path / "modules.json"
    proc = subprocess.run([sys.executable, "-c", LIST_MODULES_AT_EXIT, str(listing), "analyze", "bert-base",
                           "--format", "json"], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    imported = set(json.loads(listing.read_text(encoding="utf-8")))
    ours = {m for m in imported if _top(m) == "embedcalc"}
    assert ours == ANALYZE_PRESET_MODULES, (
        f"new: {sorted(ours - ANALYZE_PRESET_MODULES)}, gone: {sorted(ANALYZE_PRESET_MODULES - ours)}"
    )
    assert not {_top(m) for m in imported} & {
        "torch",
        "numpy",
        "rich",
        "matplotlib",
        "transformers",
        "safetensors",
    }
    # pydantic's plugin discovery (importlib.metadata) stays unloaded (cli/app.py)
    assert "importlib.metadata" not in imported
    # no pydantic model or TypeAdapter is built (config/record_base.py, and typer's adapters for TARGET and --format,
    # cli/startup.py), and nothing validates: pydantic is not even imported (config/problems.py imports its
    # ValidationError for typing only)
    assert not {_top(m) for m in imported} & {"pydantic", "pydantic_core"}
    assert "typer._adapters" not in imported


# --- import rules (DESIGN.md §7), read from the source with ast -------------------------------------------------

PACKAGE = ROOT / "embedcalc"


def _imports(path: Path, module_level_only: bool) -> set[str]:
    """Absolute module names imported by ``path`` (relative imports resolved against the package)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    if module_level_only:  # module-level statements and try/if/with blocks, not function or class bodies
        nodes: list[ast.AST] = []
        stack: list[ast.AST] = list(tree.body)
        while stack:
            node = stack.pop()
            nodes.append(node)
            if isinstance(node, ast.If | ast.Try | ast.With):
                stack.extend(ast.iter_child_nodes(node))
    else:
        nodes = list(ast.walk(tree))
    package = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1])
    names: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                names.add(f"{base}.{node.module}" if node.module else base)
            else:
                names.add(node.module or "")
    return names


def _modules(*subpackages: str) -> list[Path]:
    return sorted(p for sub in subpackages for p in (PACKAGE / sub).rglob("*.py"))


def _top(name: str) -> str:
    return name.split(".")[0]


# the packages below api/reconcile (DESIGN.md §7), from the tree: every package but the five that may reach torch,
# rich or typer, so a new or moved one is checked unless it is placed among those on purpose
_ABOVE_ANALYSIS = {"cli", "render", "api", "reconcile", "modeling", "locale"}
_PLAIN_PACKAGES = sorted(
    p.parent.name for p in PACKAGE.glob("*/__init__.py") if p.parent.name not in _ABOVE_ANALYSIS
)


def test_the_plain_packages_are_found() -> None:
    assert {"analysis", "config", "sources", "devices"} <= set(_PLAIN_PACKAGES)


@pytest.mark.parametrize("path", _modules(*_PLAIN_PACKAGES), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_plain_packages_import_no_torch_rich_or_typer(path: Path) -> None:
    imported = _imports(path, module_level_only=False)
    assert not {_top(m) for m in imported} & {"torch", "rich", "typer"}, sorted(imported)
    assert not [
        m for m in imported if m.startswith(("embedcalc.cli", "embedcalc.render", "embedcalc.modeling"))
    ]


def test_only_modeling_imports_torch_at_module_level() -> None:
    offenders = [
        str(path.relative_to(PACKAGE.parent))
        for path in sorted(PACKAGE.rglob("*.py"))
        if "modeling" not in path.relative_to(PACKAGE).parts
        and "torch" in {_top(m) for m in _imports(path, module_level_only=True)}
    ]
    assert offenders == []


def test_analysis_shares_no_code_with_modeling() -> None:
    """verify compares two independent implementations (DESIGN.md §7)."""
    for path in _modules("modeling"):
        assert not [m for m in _imports(path, False) if m.startswith("embedcalc.analysis")], path.name


def test_import_rule_parser_sees_imports() -> None:
    """The checks above would pass vacuously if the parser found nothing."""
    assert "embedcalc.analysis.breakdown" in _imports(PACKAGE / "analysis" / "params.py", True)
    assert "typer" in _imports(PACKAGE / "cli" / "app.py", True)
